"""The queue side of identical-tree recognition: re-judgement jobs, old queue files, and the
fields an evaluation carries (real SQLite)."""

from __future__ import annotations

import sqlite3

import pytest

from judge import compose_judge_config
from judge.checkout import BadInput
from judge.queue import JudgeQueue
from judge.verdict import Evaluation, Verdict


def test_a_rejudgement_is_stored_with_its_job(tmp_path):
    q = JudgeQueue(tmp_path / "q.sqlite")
    plain = q.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    again = q.enqueue(arm="a", agent="confirm", repo="/r", commit="c" * 40, rejudge=True)
    claimed = {job.id: job.rejudge for job in (q.claim("cpu"), q.claim("cpu"))}
    assert claimed == {plain: False, again: True}


def test_a_queue_file_made_before_rejudgements_gains_the_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, arm TEXT NOT NULL,"
        " agent TEXT NOT NULL, label TEXT NOT NULL DEFAULT '', repo TEXT NOT NULL,"
        " commit_sha TEXT NOT NULL, state TEXT NOT NULL, device TEXT,"
        " attempts INTEGER NOT NULL DEFAULT 0, enqueued_at REAL NOT NULL, started_at REAL,"
        " finished_at REAL, verdict TEXT, result TEXT);"
        "INSERT INTO jobs (arm, agent, repo, commit_sha, state, enqueued_at)"
        " VALUES ('a', 'w', '/r', 'cccc', 'queued', 1.0);"
    )
    db.commit()
    db.close()
    q = JudgeQueue(path)
    job = q.claim("cpu")
    assert job is not None and job.id == 1 and job.rejudge is False
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(jobs)")}
    assert {"rejudge", "tree_id", "duplicate_of"} <= columns


def test_duplicate_of_and_tree_round_trip_through_a_record():
    e = Evaluation(
        job_id=7,
        arm="a",
        agent="w",
        commit="c" * 40,
        verdict=Verdict.PASS,
        duplicate_of=3,
        tree="t" * 40,
    )
    back = Evaluation.from_dict(e.to_dict())
    assert (back.duplicate_of, back.tree) == (3, "t" * 40)
    # A record written before these fields existed still reads.
    old = e.to_dict()
    del old["duplicate_of"], old["tree"]
    assert Evaluation.from_dict(old).duplicate_of is None


def test_the_duplicates_setting_is_validated():
    cfg = compose_judge_config(["task=decode_cpu"])
    assert cfg.judge.duplicates == "arm"  # across arms is a choice, never the default
    with pytest.raises(BadInput, match=r"judge\.duplicates") as info:
        compose_judge_config(["task=decode_cpu", "judge.duplicates=some"])
    assert "use one of arm, all, off" in str(info.value)
