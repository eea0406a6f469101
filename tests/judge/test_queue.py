"""The judge's durable queue on a real SQLite file, opened from several processes."""

from __future__ import annotations

import dataclasses
import multiprocessing
import subprocess
import time

import pytest

from judge.queue import JudgeQueue, connect_wal, process_alive, process_token
from judge.verdict import Evaluation, Verdict


def _evaluation(job_id: int, verdict: Verdict = Verdict.PASS) -> Evaluation:
    now = time.time()
    return Evaluation(
        job_id=job_id,
        arm="a",
        agent="w",
        commit="c" * 40,
        verdict=verdict,
        started_at=now,
        finished_at=now,
    )


def test_fifo_takes_oldest_first(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite", "fifo")
    ids = [q.enqueue(arm=arm, agent="w", repo="/r", commit="c" * 40) for arm in ("a", "a", "b")]
    assert [q.claim("cpu").id for _ in ids] == ids
    assert q.claim("cpu") is None


def test_fair_round_robins_between_arms(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite", "fair")
    a = [q.enqueue(arm="swarm", agent=f"w{i}", repo="/r", commit="c" * 40) for i in range(3)]
    b = [q.enqueue(arm="solo", agent="w0", repo="/r", commit="c" * 40) for _ in range(2)]
    order = []
    while (job := q.claim("cpu")) is not None:
        order.append(job.id)
        q.finish(job.id, _evaluation(job.id))
        time.sleep(0.01)  # started_at must differ between claims
    assert order == [a[0], b[0], a[1], b[1], a[2]]


def test_fair_keys_give_every_run_sharing_the_judge_its_turns(tmp_path):
    # Two runs (a parallel sweep) share one judge; run 2 queued later. Keyed by arm name
    # alone, run 2's swarm would wait behind all of run 1's swarm jobs.
    q = JudgeQueue(tmp_path / "q.sqlite", "fair")

    def put(run: str, arm: str, n: int) -> list[int]:
        return [
            q.enqueue(arm=arm, agent="w", repo="/r", commit="c" * 40, fair_key=f"{run}/{arm}")
            for _ in range(n)
        ]

    r1 = put("run1", "swarm", 3)
    r2 = put("run2", "swarm", 2)
    order = []
    while (job := q.claim("cpu")) is not None:
        order.append(job.id)
        q.finish(job.id, _evaluation(job.id))
        time.sleep(0.01)
    assert order == [r1[0], r2[0], r1[1], r2[1], r1[2]]


def test_a_queue_made_before_fair_keys_is_upgraded(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, arm TEXT NOT NULL,"
        " agent TEXT NOT NULL, label TEXT NOT NULL DEFAULT '', repo TEXT NOT NULL,"
        " commit_sha TEXT NOT NULL, state TEXT NOT NULL, device TEXT,"
        " attempts INTEGER NOT NULL DEFAULT 0, enqueued_at REAL NOT NULL, started_at REAL,"
        " finished_at REAL, verdict TEXT, result TEXT)"
    )
    db.execute(
        "INSERT INTO jobs (arm, agent, repo, commit_sha, state, enqueued_at)"
        " VALUES ('a', 'w', '/r', 'c', 'queued', 1.0)"
    )
    db.commit()
    db.close()
    q = JudgeQueue(path, "fair")
    assert q.claim("cpu").arm == "a"


def test_a_result_is_stored_once(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite")
    job_id = q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    job = q.claim("cpu")
    assert job is not None and job.attempts == 1
    assert q.finish(job_id, _evaluation(job_id))
    assert not q.finish(job_id, _evaluation(job_id, Verdict.WRONG))
    assert q.result(job_id).verdict is Verdict.PASS
    assert len(q.evaluations()) == 1


def test_recover_requeues_what_a_dead_worker_left_running(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite")
    job_id = q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    q.claim("cpu")
    other = q.enqueue(arm="a", agent="w", repo="/r", commit="d" * 40)
    q.claim("gpu:0")
    # A new worker on "cpu" only takes back its own device's jobs.
    assert q.recover("cpu") == [job_id]
    assert q.state(job_id) == "queued" and q.state(other) == "running"
    again = q.claim("cpu")
    assert again.id == job_id and again.attempts == 2
    assert [e[2] for e in q.events(job_id)] == ["enqueued", "started", "recovered", "started"]


def _claim_all(path: str, out: multiprocessing.Queue) -> None:
    q = JudgeQueue(path)
    got = []
    while (job := q.claim("cpu")) is not None:
        got.append(job.id)
    out.put(got)


def test_concurrent_workers_never_claim_the_same_job(tmp_path):
    path = tmp_path / "q.sqlite"
    q = JudgeQueue(path)
    ids = [q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40) for _ in range(60)]
    out: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_claim_all, args=(str(path), out)) for _ in range(3)]
    for p in procs:
        p.start()
    claimed = [job for _ in procs for job in out.get(timeout=60)]
    for p in procs:
        p.join()
    assert sorted(claimed) == ids


def test_unknown_policy_is_refused(tmp_path):
    with pytest.raises(ValueError, match="fifo, fair"):
        JudgeQueue(tmp_path / "q.sqlite", "lifo")


def test_cancel_withdraws_only_waiting_jobs(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite")
    running = q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    waiting = q.enqueue(arm="a", agent="w", repo="/r", commit="d" * 40)
    q.claim("cpu")
    assert q.cancel([running, waiting], "deadline") == [waiting]
    assert q.state(running) == "running" and q.state(waiting) == "cancelled"
    assert q.claim("cpu") is None
    with pytest.raises(LookupError, match="cancelled"):
        q.wait(waiting, timeout=1)


# -- settings: a job is judged only under the settings it was queued with --------------------


def _dead_process_token() -> str:
    """The token of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    token = process_token(proc.pid)
    proc.wait()
    return token


def test_a_worker_claims_only_jobs_of_its_own_settings_or_of_none(tmp_path):
    path = tmp_path / "q.sqlite"
    run_a = JudgeQueue(path, settings_hash="a" * 16)
    run_b = JudgeQueue(path, settings_hash="b" * 16)
    first_a = run_a.enqueue(arm="x", agent="w", repo="/r", commit="c" * 40)
    first_b = run_b.enqueue(arm="x", agent="w", repo="/r", commit="d" * 40)
    anyone = JudgeQueue(path).enqueue(arm="x", agent="w", repo="/r", commit="e" * 40)
    # B's worker skips A's older job: it is never judged under B's settings.
    assert run_b.claim("cpu").id == first_b
    assert run_b.claim("cpu").id == anyone
    assert run_b.claim("cpu") is None
    job = run_a.claim("cpu")
    assert job.id == first_a and job.settings_hash == "a" * 16
    assert run_a.counts("a" * 16) == {"running": 1}
    assert run_a.counts("b" * 16) == {"running": 1}
    assert run_a.counts() == {"running": 3}


def test_the_turn_follows_the_policy_across_settings_and_skips_dead_submitters(tmp_path):
    path = tmp_path / "q.sqlite"
    mine = JudgeQueue(path, settings_hash="m" * 16)
    theirs = JudgeQueue(path, settings_hash="t" * 16)
    assert mine.next_turn() is None
    stale = theirs.enqueue(arm="x", agent="w", repo="/r", commit="c" * 40)
    with connect_wal(path) as db:  # queued by a run whose runner was killed, never resumed
        db.execute("UPDATE jobs SET owner = ? WHERE id = ?", (_dead_process_token(), stale))
    assert mine.next_turn() is None  # a dead run's job never blocks a live one
    assert theirs.next_turn() == "t" * 16  # but its own settings' worker still takes it
    live = theirs.enqueue(arm="x", agent="w", repo="/r", commit="d" * 40)
    mine.enqueue(arm="x", agent="w", repo="/r", commit="e" * 40)
    assert mine.next_turn() == "t" * 16  # the live job of other settings came first
    theirs.adopt([stale])  # a resumed run takes its jobs over
    assert [theirs.claim("cpu").id for _ in range(2)] == [stale, live]
    assert mine.next_turn() == "m" * 16


def test_a_withdrawn_running_job_is_never_finished(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite", settings_hash="a" * 16)
    job = q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    q.claim("cpu")
    assert q.cancel([job], "its run ended", running=True) == [job]
    assert q.finish(job, _evaluation(job)) is False
    assert q.state(job) == "cancelled" and q.result(job) is None


def test_the_settings_hash_travels_with_the_result(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite", settings_hash="a" * 16)
    job = q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    q.claim("cpu")
    q.finish(job, dataclasses.replace(_evaluation(job), settings_hash="a" * 16))
    assert q.result(job).settings_hash == "a" * 16


def test_process_tokens_tell_a_live_process_from_a_gone_one():
    assert process_alive(process_token())
    assert not process_alive(_dead_process_token())
    pid, _, started = process_token().partition(":")
    assert started and not process_alive(f"{pid}:{int(started) + 1}")  # a reused pid
    assert not process_alive("")
