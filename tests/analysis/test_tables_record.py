"""The run record as the analysis reads it: older runs' names and event logs, the schema.
Checked on real fixture runs: real SQLite event logs and real submission repositories. (Which
columns each surface shows: ``test_arm_row``.)"""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from runner.events import EventLog
from runner.summary import summarize, write_summary
from runrecord import LEGACY_COLUMNS, LEGACY_DIVISORS
from tests.support.run_record import assert_summary_agrees_with_arms


def _summarized(run):
    path = write_summary(summarize(EventLog(run.path / "events.sqlite"), run.path),
                         run.path / "summary.csv")  # fmt: skip
    return {r["arm"]: r for r in csv.DictReader(path.open())}


def test_an_older_runs_summary_csv_still_reads_as_the_arms_table(run_factory):
    # An older run's summary.csv (its columns under the names it wrote then, runrecord.names)
    # reads as today's and holds the arms table's values.
    run = run_factory(rechecks=True)
    rows = _summarized(run)
    assert int(rows["swarm"]["relays"]) == 1  # the fixture's one relay
    assert rows["swarm"]["rejudged_verdicts"] == "PASS,PASS"
    back = {new: old for old, new in LEGACY_COLUMNS.items() if old not in LEGACY_DIVISORS}
    with (run.path / "summary.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[back.get(c, c) for c in rows["solo"]])
        writer.writeheader()
        writer.writerows({back.get(k, k): v for k, v in r.items()} for r in rows.values())
    compared = assert_summary_agrees_with_arms(run.path)
    assert {"rejudged_verdicts", "seats", "best_x_baseline", "relays"} <= set(compared)


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
