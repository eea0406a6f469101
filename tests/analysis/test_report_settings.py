"""The report refuses to mix evaluations judged under different judge settings in one run
(issue 9: a run was judged partly by another run's judge service)."""

from __future__ import annotations

import sqlite3

from analysis.report import main
from analysis.tables import load_run
from runner.events import EventLog


def _stamp(run_dir, hashes: list[str], own: str | None) -> None:
    """Give the run's evaluations these settings hashes in turn, and the run its own."""
    db = sqlite3.connect(run_dir / "events.sqlite")
    jobs = [row[0] for row in db.execute("SELECT job_id FROM evaluations ORDER BY job_id")]
    for i, job in enumerate(jobs):
        db.execute(
            "UPDATE evaluations SET settings_hash = ? WHERE job_id = ?",
            (hashes[i % len(hashes)], job),
        )
    db.commit()
    db.close()
    if own is not None:
        EventLog(run_dir / "events.sqlite").set_meta(judge_settings_hash=own)


def test_evaluations_carry_their_settings_hash_into_the_table(fixture_run):
    _stamp(fixture_run.path, ["a" * 16], "a" * 16)
    table = load_run(fixture_run.path, git=False).evaluations
    assert len(table) and set(table["settings_hash"]) == {"a" * 16}
    assert main([str(fixture_run.path)]) == 0


def test_two_settings_in_one_run_are_refused(fixture_run, capsys):
    _stamp(fixture_run.path, ["a" * 16, "b" * 16], "a" * 16)
    assert main([str(fixture_run.path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "2 judge setting(s)" in err and "a" * 16 in err and "b" * 16 in err
    assert not (fixture_run.path / "analysis" / "report.md").exists()


def test_settings_other_than_the_runs_own_are_refused(fixture_run, capsys):
    _stamp(fixture_run.path, ["b" * 16], "a" * 16)
    assert main([str(fixture_run.path)]) == 2
    assert "the run's own: " + "a" * 16 in capsys.readouterr().err


def test_a_log_from_before_the_hash_existed_still_reports(fixture_run):
    db = sqlite3.connect(fixture_run.path / "events.sqlite")
    db.execute("ALTER TABLE evaluations DROP COLUMN settings_hash")
    db.commit()
    db.close()
    table = load_run(fixture_run.path, git=False).evaluations
    assert len(table) and set(table["settings_hash"]) == {""}
    assert main([str(fixture_run.path)]) == 0
