"""Identical trees judged once (judge.duplicates) in the run record: a duplicate evaluation is
counted in its arm's evaluations, said as a duplicate in summary.csv, the arms table and the
report, and never taken for a measurement of its own (a full evaluation's median duration
leaves it out). Real fixture runs: a real SQLite event log and real submission repositories."""

from __future__ import annotations

import csv

from analysis.report import build_report
from analysis.tables import build_tables
from judge import Evaluation
from runner.events import EventLog
from runner.summary import summarize, write_summary
from tests.support.run_record import assert_summary_agrees_with_arms


def _add_duplicate(run) -> int:
    """The swarm's first PASS submitted again by another worker, reused by the judge."""
    events = EventLog(run.path / "events.sqlite")
    [first] = [
        e for e in events.table("evaluations") if e["arm"] == "swarm" and e["verdict"] == "PASS"
    ][:1]
    job = max(int(e["job_id"]) for e in events.table("evaluations")) + 1
    sid, _ = events.add_submission("swarm", "w2", "swarm/w2/again", first["commit_sha"], "again")
    events.set_job(sid, job)
    t = float(first["finished_at"]) + 30
    events.add_evaluation(
        sid,
        Evaluation(
            job_id=job,
            arm="swarm",
            agent="w2",
            commit=first["commit_sha"],
            verdict=first["verdict"],
            metrics={"score": 1.0, "x_baseline": 1.0},
            enqueued_at=t,
            started_at=t,
            finished_at=t + 0.01,
            duplicate_of=int(first["job_id"]),
            tree="ab" * 20,
        ),
    )
    return int(first["job_id"])


def test_a_duplicate_is_counted_and_said_everywhere(run_factory):
    plain = run_factory("plain")
    before = build_tables(plain.path, git=False).arms.set_index("arm")
    run = run_factory("dup")
    original = _add_duplicate(run)
    tables = build_tables(run.path, git=False)
    ev = tables.evaluations
    dup = ev[ev["duplicate_of"].notna()]
    assert list(dup["duplicate_of"]) == [original] and list(dup["tree"]) == ["ab" * 20]
    assert ev["duplicate_of"].isna().sum() == len(ev) - 1
    arms = tables.arms.set_index("arm")
    assert arms.loc["swarm", "duplicates"] == 1 and arms.loc["solo", "duplicates"] == 0
    assert arms.loc["swarm", "evaluations"] == before.loc["swarm", "evaluations"] + 1
    # A 0.01 s reuse is no full evaluation: the median PASS duration is unchanged by it.
    assert arms.loc["swarm", "full_evaluation_s"] == before.loc["swarm", "full_evaluation_s"]
    path = write_summary(summarize(EventLog(run.path / "events.sqlite"), run.path),
                         run.path / "summary.csv")  # fmt: skip
    rows = {r["arm"]: r for r in csv.DictReader(path.open())}
    assert rows["swarm"]["duplicates"] == "1" and rows["solo"]["duplicates"] == "0"
    assert "duplicates" in assert_summary_agrees_with_arms(run.path)
    text = build_report(run.path).path.read_text()
    assert "of them dup." in text
    # Without any duplicate the column is left out (older reports read as before).
    assert "of them dup." not in build_report(plain.path).path.read_text()
