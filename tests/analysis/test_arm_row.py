"""The per-arm row (``runrecord.row``) is what every surface shows: ``summary.csv``, the printed
summary, the ``arms`` table, the report's ``## Arms`` table and the view's panels each show
exactly the columns the row says, under the row's names. Checked on real fixture runs (real
SQLite event logs, real submission repositories) through the real writers."""

from __future__ import annotations

import csv
import math

import pandas as pd
import pytest

from analysis.report.arms import arms_table as report_arms_table
from analysis.tables import build_tables
from analysis.view.data import build_sections
from runner.events import EventLog
from runner.summary import format_summary, summarize, write_summary
from runrecord import LEGACY_COLUMNS, current_columns
from runrecord.row import (
    ARMS,
    PRINTED,
    REPORT,
    ROW,
    SUMMARY_CSV,
    SURFACES,
    VIEW_COST,
    VIEW_JUDGE,
    VIEW_RACE,
    columns,
    project,
)

OPTIONS = [{}, {"rechecks": True, "model_calls": True, "tokens": True}, {"latency": True}]
IDS = ["plain", "rejudged-proxied", "lower-is-better"]


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_summary_csv_and_the_printed_summary_show_the_rows_columns(run_factory, options):
    run = run_factory(**options)
    rows = summarize(EventLog(run.path / "events.sqlite"), run.path)
    path = write_summary(rows, run.path / "summary.csv")
    with path.open() as fh:
        header = next(csv.reader(fh))
    assert header == columns(SUMMARY_CSV)
    printed = format_summary(rows).splitlines()[0].split()
    # x_champion is printed only where some arm has one (a continuation).
    assert printed == [c for c in columns(PRINTED) if c != "x_champion"]


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_the_arms_table_and_the_views_panels_show_the_rows_columns(run_factory, options):
    tables = build_tables(run_factory(**options).path)
    assert list(tables.arms.columns) == columns(ARMS)
    sections = build_sections(tables, 0.0)
    panels = {
        VIEW_RACE: sections["race"]["arms"],
        VIEW_JUDGE: sections["judge"]["capacity"],
        VIEW_COST: sections["cost"]["arms"],
    }
    for surface, arms in panels.items():
        assert arms and all(list(a) == columns(surface) for a in arms), surface


def _other(value: object) -> object:
    """A value unlike ``value`` that every report cell would show differently."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return "zzsentinel"  # ten characters: a shortened commit shows all of it
    if isinstance(value, int):
        return 4242
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return 4242.0
    return float(value) + 4242.0  # type: ignore[arg-type]


def test_the_reports_arms_table_shows_exactly_the_rows_report_columns(run_factory):
    tables = build_tables(run_factory(rechecks=True, tokens=True).path)
    metric = tables.runs[0].metric
    base = tables.arms.astype(object)
    # Every conditional part of the table on: a sweep's seed, duplicates, re-judged bests.
    base["duplicates"] = 1
    assert (base["rejudged_verdicts"] != "").any()

    def shown(arms: pd.DataFrame) -> list[str]:
        return report_arms_table(arms, True, metric)

    before = shown(base)
    for column in columns(ARMS):
        changed = base.copy()
        changed[column] = [_other(v) for v in base[column]]
        if column in columns(REPORT):
            assert shown(changed) != before, f"the report does not show {column}"
        else:
            assert shown(changed) == before, f"the report shows {column}, not in the row's list"


def test_every_column_is_on_a_known_surface_and_named_once():
    names = [c.name for c in ROW]
    assert len(names) == len(set(names))
    assert all(c.shown and c.shown <= set(SURFACES) and c.meaning for c in ROW)
    # The arms table shows every column of the row but the runner's own x_champion.
    assert set(names) - set(columns(ARMS)) == {"x_champion"}
    # No column is written under an older run's name (those are only read: runrecord.names).
    assert not set(LEGACY_COLUMNS) & set(names)
    assert set(LEGACY_COLUMNS.values()) <= set(names)


def test_summary_csv_rounds_to_the_rows_digits_and_needs_every_column_it_shows():
    digits = {c.name: c.digits for c in ROW if c.digits is not None}
    assert digits == {
        "x_champion": 3, "time_to_best_s": 1, "rejudged_score": 3, "rejudged_x_baseline": 4,
        "judge_noise_x_sd": 4, "judge_utilisation": 3, "mean_queue_wait_s": 1, "model_lost_s": 1,
    }  # fmt: skip
    values = {c: 1.23456 for c in columns(ARMS)} | {"x_champion": None}
    written = project(values, SUMMARY_CSV)
    assert list(written) == columns(SUMMARY_CSV)
    assert (written["time_to_best_s"], written["best_score"], written["x_champion"]) == (
        1.2, 1.23456, None,
    )  # fmt: skip
    assert project(values, ARMS)["time_to_best_s"] == 1.23456  # the arms table keeps every digit
    with pytest.raises(KeyError, match="x_champion"):
        project({k: v for k, v in values.items() if k != "x_champion"}, SUMMARY_CSV)
    with pytest.raises(ValueError, match="no surface"):
        columns("elsewhere")


def test_an_older_runs_summary_columns_read_under_todays_names():
    old = {"arm": "swarm", "confirmed_score": "150.0", "confirm_verdicts": "PASS",
           "agents": "5", "x_baseline": "1.25", "judge_busy_pct": "57.1"}  # fmt: skip
    assert current_columns(old) == {
        "arm": "swarm", "rejudged_score": "150.0", "rejudged_verdicts": "PASS", "seats": "5",
        "best_x_baseline": "1.25", "judge_utilisation": "0.571",
    }  # fmt: skip
    # A number stays a number (a summary.csv read by pandas); an empty field stays empty.
    assert current_columns({"judge_busy_pct": 57.1}) == {"judge_utilisation": 0.571}
    assert current_columns({"judge_busy_pct": ""}) == {"judge_utilisation": ""}
