"""``summary.csv`` (runner.summary) and the ``arms`` table (analysis.tables) agree by
construction: both take each arm's facts from ``runrecord``. Checked on real fixture runs:
real SQLite event logs and real submission repositories."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from runner.events import EventLog
from runner.summary import summarize, write_summary
from runrecord import LEGACY_COLUMNS, SHARED_COLUMNS, current_columns
from tests.support.run_record import assert_summary_agrees_with_arms


def _summarized(run):
    path = write_summary(summarize(EventLog(run.path / "events.sqlite"), run.path),
                         run.path / "summary.csv")  # fmt: skip
    return {r["arm"]: r for r in csv.DictReader(path.open())}


@pytest.mark.parametrize(
    "options",
    [{}, {"rechecks": True, "model_calls": True, "tokens": True}, {"latency": True}],
    ids=["plain", "rejudged-proxied", "lower-is-better"],
)
def test_summary_csv_and_arms_table_agree_column_by_column(run_factory, options):
    run = run_factory(**options)
    rows = _summarized(run)
    compared = assert_summary_agrees_with_arms(run.path)
    # Every shared column was in the summary and compared (not a vacuous pass).
    assert set(SHARED_COLUMNS) <= set(compared) and {"agents", "x_baseline"} <= set(compared)
    assert int(rows["swarm"]["relays"]) == 1  # the fixture's one relay, counted the same way
    if options.get("rechecks"):
        assert rows["swarm"]["rejudged_verdicts"] == "PASS,PASS"
        assert float(rows["swarm"]["rejudged_score"]) == 152.5
        assert int(rows["swarm"]["model_calls"]) > 0


def test_a_disagreement_is_reported_by_column(run_factory):
    run = run_factory(rechecks=True)
    rows = _summarized(run)
    rows["solo"]["best_score"] = "1.5"
    with (run.path / "summary.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows["solo"]))
        writer.writeheader()
        writer.writerows(rows.values())
    with pytest.raises(AssertionError, match=r"solo\.best_score"):
        assert_summary_agrees_with_arms(run.path)


def test_an_older_runs_summary_columns_read_under_todays_names(run_factory):
    old = {"arm": "swarm", "confirmed_score": "150.0", "confirm_verdicts": "PASS"}
    assert current_columns(old) == {"arm": "swarm", "rejudged_score": "150.0",
                                    "rejudged_verdicts": "PASS"}  # fmt: skip
    assert set(LEGACY_COLUMNS.values()) <= set(SHARED_COLUMNS)
    # An older run's summary.csv, renamed back, still agrees with the arms table.
    run = run_factory(rechecks=True)
    rows = _summarized(run)
    back = {new: old for old, new in LEGACY_COLUMNS.items()}
    with (run.path / "summary.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[back.get(c, c) for c in rows["solo"]])
        writer.writeheader()
        writer.writerows({back.get(k, k): v for k, v in r.items()} for r in rows.values())
    assert "rejudged_verdicts" in assert_summary_agrees_with_arms(run.path)


def test_an_older_event_log_is_upgraded_to_the_schema(tmp_path):
    # A log made before the later columns (and before the model proxy): the tables as they were.
    import sqlite3

    from runrecord import LATER_COLUMNS, columns, event_tables

    path = tmp_path / "events.sqlite"
    with sqlite3.connect(path) as db:
        for table in event_tables():
            later = {name for name, _ in LATER_COLUMNS.get(table, [])}
            kept = [c for c in columns(table) if c not in later]
            if table != "model_calls":
                db.execute(f"CREATE TABLE {table} ({', '.join(kept)})")
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.close()
    EventLog(path)
    with sqlite3.connect(path) as db:
        for table in event_tables():
            got = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
            assert got == columns(table), table
    db.close()
    assert set(event_tables()) == {
        "lifecycle", "submissions", "evaluations", "messages", "tokens", "model_calls"
    }  # fmt: skip
    with pytest.raises(ValueError, match="no table"):
        EventLog(path).table("meta")


def test_the_analysis_reads_every_table_from_the_schema():
    # Each of analysis.tables' SQL reads runs on a log made from runrecord's schema alone.
    import sqlite3
    from contextlib import closing

    from analysis.tables import _SQL
    from runrecord import SCHEMA

    with closing(sqlite3.connect(":memory:")) as db:
        db.executescript(SCHEMA)
        for sql in _SQL.values():
            db.execute(sql.format(score="NULL", baseline_score="NULL")).fetchall()


def test_todays_and_older_rejudging_names_give_the_same_tables(run_factory):
    from analysis.tables import load_run

    older = load_run(run_factory("older", rechecks=True).path)
    run = run_factory("today", rechecks=True)
    with EventLog(run.path / "events.sqlite").connect() as db:
        for table in ("evaluations", "submissions"):
            db.execute(f"UPDATE {table} SET agent = 'rejudge' WHERE agent = 'confirm'")
        db.execute("UPDATE meta SET key = 'rejudging_started_at' WHERE key = 'rechecks_started_at'")
    today = load_run(run.path)
    shared = [c for c in today.arms.columns if c != "run_id"]
    pd.testing.assert_frame_equal(today.arms[shared], older.arms[shared])
    assert (today.runs[0].rejudging_at, today.runs[0].run_seconds) == (
        older.runs[0].rejudging_at,
        older.runs[0].run_seconds,
    )
    assert set(today.evaluations["agent"]) == set(older.evaluations["agent"])
