"""The run summary from a real event log and a real submission repository."""

from __future__ import annotations

import csv
import subprocess
import time

from judge import Evaluation, Verdict
from runner.events import EventLog
from runner.summary import summarize, write_summary
from runrecord import CommitGraph, relay_pairs
from runrecord.row import SUMMARY_CSV, columns


def _git(cwd, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit(repo, name: str, text: str) -> str:
    (repo / name).write_text(text)
    _git(repo, "add", name)
    _git(repo, "commit", "-qm", name)
    return _git(repo, "rev-parse", "HEAD")


def test_summary_counts_verdicts_relays_and_judge_time(tmp_path):
    run = tmp_path / "run"
    repo = run / "arms" / "swarm" / "submissions.git"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "master")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    base = _commit(repo, "a", "1")
    w1_pass = _commit(repo, "b", "2")  # w1's PASS
    w2_pass = _commit(repo, "c", "3")  # w2 built on w1's PASS: a relay
    _git(repo, "checkout", "-q", base)
    w3_wrong = _commit(repo, "d", "4")
    events = EventLog(run / "events.sqlite")
    start = time.time() - 100
    events.set_meta(arms=["swarm"], seats={"swarm": [["w1", "worker", "x"], ["w2", "worker", "y"],
                    ["w3", "worker", "z"]]}, started_at=start, ended_at=start + 100,
                    agent_kind="scripted", scripted=True)  # fmt: skip
    rows = [("w1", w1_pass, Verdict.PASS, 2.0, 10), ("w2", w2_pass, Verdict.PASS, 3.0, 40),
            ("w3", w3_wrong, Verdict.WRONG, None, 60)]  # fmt: skip
    for job, (agent, sha, verdict, x, at) in enumerate(rows, start=1):
        sid, _ = events.add_submission("swarm", agent, f"r{job}", sha)
        events.set_job(sid, job)
        # A record made before kinds owned their metric: no "metric" in the meta, no "score".
        metrics = {"tok_s": 100.0 * x, "x_baseline": x} if x else {}
        events.add_evaluation(sid, Evaluation(
            job_id=job, arm="swarm", agent=agent, commit=sha, verdict=verdict, metrics=metrics,
            enqueued_at=start + at - 15, started_at=start + at - 10, finished_at=start + at,
        ))  # fmt: skip
    sid, _ = events.add_submission("swarm", "w1", "r-late", w1_pass)  # never evaluated
    [row] = summarize(events, run)
    assert [row[k] for k in ("evaluations", "pass", "wrong", "not_evaluated")] == [3, 2, 1, 1]
    assert row["best_score"] == 300.0 and row["best_x_baseline"] == 3.0
    assert row["time_to_best_s"] == 40.0
    assert (row["metric"], row["unit"]) == ("tok_s", "tok/s")  # read as the decode kind's
    assert row["relays"] == 1 and row["seats"] == 3
    assert row["judge_utilisation"] == 0.3 and row["mean_queue_wait_s"] == 5.0
    assert "scripted" in row["agent_kind"]
    path = write_summary([row], run / "summary.csv")
    [record] = list(csv.DictReader(path.open()))
    assert list(record) == columns(SUMMARY_CSV)
    assert record["pass"] == "2" and record["relays"] == "1" and record["x_champion"] == ""
    assert relay_pairs(CommitGraph.load(repo), []) == []


def test_judge_busy_counts_only_the_agents_phase(tmp_path):
    # An evaluation still running when the drain ended finishes during the re-judging: only its
    # part before the re-judging is the agents'. The re-judgements themselves are not counted.
    run = tmp_path / "run"
    events = EventLog(run / "events.sqlite")
    start = 1_000.0
    events.set_meta(arms=["solo"], seats={"solo": [["w1", "worker", "x"]]}, started_at=start,
                    rechecks_started_at=start + 100, ended_at=start + 160,
                    agent_kind="scripted", scripted=True)  # fmt: skip
    spans = [("w1", 10, 50), ("w1", 80, 130), ("rejudge", 130, 150), ("confirm", 130, 150)]
    for job, (agent, t0, t1) in enumerate(spans, start=1):
        sid, _ = events.add_submission("solo", agent, f"r{job}", "c" * 40)
        events.set_job(sid, job)
        events.add_evaluation(sid, Evaluation(
            job_id=job, arm="solo", agent=agent, commit="c" * 40, verdict=Verdict.PASS,
            metrics={"tok_s": 1.0, "x_baseline": 1.0}, enqueued_at=start + t0,
            started_at=start + t0, finished_at=start + t1,
        ))  # fmt: skip
    [row] = summarize(events, run)
    assert row["judge_utilisation"] == 0.6  # (40 + 20) s of the 100 s agents' phase
    assert row["evaluations"] == 2
    # The re-judgements (today's ``rejudge`` and an older run's ``confirm``) are the best's.
    assert row["rejudged_verdicts"] == "PASS,PASS" and row["rejudged_score"] == 1.0
    # No submission repository: the relays are not known (not 0).
    assert row["relays"] is None
