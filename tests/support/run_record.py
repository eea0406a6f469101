"""Checks on a run folder's record shared by several tests (the demo's among them)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from analysis.tables import load_run
from runrecord import ARMS_NAMES, SHARED_COLUMNS, current_columns, summary_value


def _same(column: str, written: str, value: object) -> bool:
    """``written`` (a summary.csv field) is the arms table's ``value`` as the summary holds it."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return written == ""
    if isinstance(value, str):
        return written == value
    return float(written) == summary_value(column, float(value))


def assert_summary_agrees_with_arms(run_dir: Path) -> list[str]:
    """Every column ``summary.csv`` shares with the ``arms`` table holds the same value, arm by
    arm (rounded as ``summary.csv`` rounds it: ``runrecord.SUMMARY_DIGITS``).

    Returns:
        The columns compared (so a caller can check that the comparison covered something).
    """
    with (Path(run_dir) / "summary.csv").open() as fh:
        summary = {r["arm"]: current_columns(r) for r in csv.DictReader(fh)}
    arms = load_run(Path(run_dir)).arms.set_index("arm", drop=False)
    assert sorted(summary) == sorted(arms.index), (sorted(summary), list(arms.index))
    pairs = [(c, c) for c in SHARED_COLUMNS] + list(ARMS_NAMES.items())
    compared = [c for c, _ in pairs if c in next(iter(summary.values()), {})]
    wrong = [
        f"{arm}.{col}: summary.csv {summary[arm][col]!r}, arms {arms.loc[arm, theirs]!r}"
        for arm in summary
        for col, theirs in pairs
        if col in summary[arm] and not _same(col, summary[arm][col], arms.loc[arm, theirs])
    ]
    assert not wrong, "summary.csv and the arms table disagree: " + "; ".join(wrong)
    return compared
