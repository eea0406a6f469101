"""Checks on a run folder's record shared by several tests (the demo's among them)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from analysis.tables import load_run
from runrecord import csv_value, current_columns
from runrecord.row import ARMS, SUMMARY_CSV, columns


def _same(column: str, written: str, value: object) -> bool:
    """``written`` (a summary.csv field) is the arms table's ``value`` as the summary holds it."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return written == ""
    if isinstance(value, str):
        return written == value
    return float(written) == csv_value(column, float(value))


def assert_summary_agrees_with_arms(run_dir: Path) -> list[str]:
    """Every column of the per-arm row that both ``summary.csv`` and the ``arms`` table show
    (``runrecord.row``) holds the same value, arm by arm, rounded as ``summary.csv`` rounds it.

    The runner and the analysis read a run's record by different paths (the event log's rows,
    pandas frames); this checks on a real run that the values they project agree.

    Returns:
        The columns compared (so a caller can check that the comparison covered something).
    """
    with (Path(run_dir) / "summary.csv").open() as fh:
        summary = {r["arm"]: current_columns(r) for r in csv.DictReader(fh)}
    arms = load_run(Path(run_dir)).arms.set_index("arm", drop=False)
    assert sorted(summary) == sorted(arms.index), (sorted(summary), list(arms.index))
    shared = [c for c in columns(SUMMARY_CSV) if c in columns(ARMS)]
    compared = [c for c in shared if c in next(iter(summary.values()), {})]
    wrong = [
        f"{arm}.{col}: summary.csv {summary[arm][col]!r}, arms {arms.loc[arm, col]!r}"
        for arm in summary
        for col in compared
        if not _same(col, summary[arm][col], arms.loc[arm, col])
    ]
    assert not wrong, "summary.csv and the arms table disagree: " + "; ".join(wrong)
    return compared
