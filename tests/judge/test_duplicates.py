"""Identical trees are recognised (issue 13 item 2): real git repositories, a real SQLite
queue and the worker's own per-job step (``judge.service.judge_job``). The sandboxed
evaluator is replaced by one that records what it is asked to judge; the Docker test
(test_duplicates_docker.py) runs the real one."""

from __future__ import annotations

import subprocess
import types
import zlib
from pathlib import Path

import pytest

from isolation.gitutil import fetch_commit, git, git_env
from judge import compose_judge_config, settings_hash
from judge.checkout import candidate_store
from judge.queue import Job, JudgeQueue
from judge.service import describe, judge_job
from judge.verdict import Evaluation, Verdict


class Recorder:
    """Stands in for the sandboxed evaluator: records each job it is given and answers with
    the next verdict of ``verdicts`` (then PASS)."""

    def __init__(self, *verdicts: Verdict) -> None:
        self.jobs: list[Job] = []
        self.verdicts = list(verdicts)

    def evaluate(self, job: Job) -> Evaluation:
        self.jobs.append(job)
        verdict = self.verdicts.pop(0) if self.verdicts else Verdict.PASS
        return Evaluation(
            job_id=job.id,
            arm=job.arm,
            agent=job.agent,
            commit=job.commit,
            verdict=verdict,
            reason="" if verdict is Verdict.PASS else "infrastructure",
            detail=f"judged {job.commit[:8]}",
            metrics={"score": 40.0 + len(self.jobs), "x_baseline": 2.5},
            stages={"checkout": 0.1, "total": 12.0},
            flags={"near_tie": ["b4"]},
            attempts=job.attempts,
        )


def _commit(repo: Path, files: dict[str, str], message: str, author: str = "a") -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    env = git_env(
        GIT_AUTHOR_NAME=author,
        GIT_AUTHOR_EMAIL=f"{author}@x",
        GIT_COMMITTER_NAME=author,
        GIT_COMMITTER_EMAIL=f"{author}@x",
    )
    git("add", "-A", cwd=repo, env=env)
    git("commit", "-q", "--allow-empty", "-m", message, cwd=repo, env=env)
    return git("rev-parse", "HEAD", cwd=repo)


class Lab:
    """An agent's clone, the arm's submissions repository (what the gateway fills), a judge
    config and its queue."""

    def __init__(self, tmp: Path, *overrides: str) -> None:
        self.tmp = tmp
        self.agent = tmp / "agent"
        self.agent.mkdir()
        git("init", "-q", "--initial-branch=master", str(self.agent))
        self.submissions = tmp / "submissions.git"
        git("init", "-q", "--bare", str(self.submissions))
        self.cfg = compose_judge_config([f"judge.private_dir={tmp / 'judge'}", *overrides])
        self.home = types.SimpleNamespace(root=tmp / "judge" / "home")
        self.queue = JudgeQueue(tmp / "queue.sqlite", settings_hash=settings_hash(self.cfg))

    def submit(self, commit: str, arm: str = "swarm", run: str = "run1", **kw) -> int:
        fetch_commit(self.agent, commit, self.submissions, f"refs/submissions/{commit}")
        return self.queue.enqueue(
            arm=arm,
            agent="w0",
            repo=str(self.submissions),
            commit=commit,
            fair_key=f"{run}/{arm}",
            **kw,
        )

    def judge(self, evaluator: Recorder, queue: JudgeQueue | None = None) -> Evaluation:
        queue = queue or self.queue
        job = queue.claim("cpu")
        assert job is not None
        evaluation = judge_job(self.cfg, self.home, queue, evaluator, job)  # type: ignore[arg-type]
        assert queue.finish(job.id, evaluation)
        return evaluation


@pytest.fixture
def lab(tmp_path) -> Lab:
    return Lab(tmp_path)


def test_the_same_tree_under_another_commit_reuses_the_verdict(lab):
    first = _commit(lab.agent, {"engine.py": "fast = 1\n"}, "try the fast path")
    # The same files again: another commit, author and message (an agent reverting its work).
    _commit(lab.agent, {"engine.py": "slow = 1\n"}, "try something else")
    again = _commit(lab.agent, {"engine.py": "fast = 1\n"}, "back to fast", author="b")
    assert again != first
    recorder = Recorder()
    lab.submit(first)
    a = lab.judge(recorder)
    job = lab.submit(again)
    b = lab.judge(recorder)
    assert len(recorder.jobs) == 1  # the evaluator (the sandbox) never saw the second job
    assert (b.job_id, b.commit, b.duplicate_of) == (job, again, a.job_id)
    assert (b.verdict, b.reason, b.detail, b.metrics, b.flags) == (
        a.verdict,
        a.reason,
        a.detail,
        a.metrics,
        a.flags,
    )
    assert b.stages == {}  # no judge time
    assert b.tree == a.tree == git("rev-parse", f"{first}^{{tree}}", cwd=lab.agent)
    assert b.settings_hash == lab.queue.settings_hash
    assert f"duplicate of job {a.job_id}" in describe(b)
    assert "duplicate" not in describe(a)
    # The queue keeps both facts, and the record round-trips.
    assert lab.queue.result(job) == b
    assert [k for _, _, k, d in lab.queue.events(job) if d.get("duplicate_of") == a.job_id] == [
        "finished"
    ]


def test_the_judge_reads_its_own_fsck_checked_copy(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    lab.submit(commit)
    recorder = Recorder()
    lab.judge(recorder)
    store = candidate_store(lab.cfg.judge.private_dir)
    assert Path(recorder.jobs[0].repo) == store.resolve()
    assert git("rev-parse", f"refs/candidates/{commit}", cwd=store) == commit


def test_another_arm_is_judged_by_default(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder()
    lab.submit(commit, arm="swarm")
    lab.judge(recorder)
    lab.submit(commit, arm="solo")
    lab.submit(commit, arm="swarm", run="run2")  # the same arm of another run sharing the judge
    assert lab.judge(recorder).duplicate_of is None
    assert lab.judge(recorder).duplicate_of is None
    assert len(recorder.jobs) == 3


def test_with_duplicates_all_another_arm_reuses_the_verdict(tmp_path):
    lab = Lab(tmp_path, "judge.duplicates=all")
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder()
    first = lab.submit(commit, arm="swarm")
    lab.judge(recorder)
    lab.submit(commit, arm="solo")
    assert lab.judge(recorder).duplicate_of == first
    assert len(recorder.jobs) == 1


def test_with_duplicates_off_every_submission_is_judged(tmp_path):
    lab = Lab(tmp_path, "judge.duplicates=off")
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder()
    for _ in range(2):
        lab.submit(commit)
        assert lab.judge(recorder).duplicate_of is None
    assert len(recorder.jobs) == 2


def test_a_rejudgement_is_always_judged(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder()
    lab.submit(commit)
    lab.judge(recorder)
    lab.submit(commit, rejudge=True)
    again = lab.judge(recorder)
    assert again.duplicate_of is None and again.tree
    assert len(recorder.jobs) == 2
    # A later plain submission reuses the first evaluation, not the re-judgement's.
    lab.submit(commit)
    assert lab.judge(recorder).duplicate_of == recorder.jobs[0].id


def test_an_error_is_never_reused(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder(Verdict.ERROR)
    lab.submit(commit)
    assert lab.judge(recorder).verdict is Verdict.ERROR
    lab.submit(commit)
    second = lab.judge(recorder)
    assert (second.verdict, second.duplicate_of) == (Verdict.PASS, None)
    assert len(recorder.jobs) == 2


def test_a_wrong_is_reused_like_a_pass(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder(Verdict.WRONG)
    first = lab.submit(commit)
    lab.judge(recorder)
    lab.submit(commit)
    again = lab.judge(recorder)
    assert (again.verdict, again.duplicate_of) == (Verdict.WRONG, first)


def test_other_settings_never_reuse(lab, tmp_path):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    recorder = Recorder()
    lab.submit(commit)
    lab.judge(recorder)
    other_cfg = compose_judge_config(
        [f"judge.private_dir={tmp_path / 'judge'}", "judge.prefill_cap_factor=2.0"]
    )
    other = JudgeQueue(lab.queue.path, settings_hash=settings_hash(other_cfg))
    assert other.settings_hash != lab.queue.settings_hash
    fetch_commit(lab.agent, commit, lab.submissions, "refs/x")
    other.enqueue(
        arm="swarm", agent="w0", repo=str(lab.submissions), commit=commit, fair_key="run1/swarm"
    )
    assert lab.judge(recorder, other).duplicate_of is None
    assert len(recorder.jobs) == 2


def test_an_earlier_job_still_running_does_not_hold_this_one(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    lab.submit(commit)
    lab.submit(commit)
    busy = lab.queue.claim("cpu-0")  # another device is on the first
    assert busy is not None
    recorder = Recorder()
    assert lab.judge(recorder).duplicate_of is None  # judged, not kept waiting on the first
    assert len(recorder.jobs) == 1


def _loose_object_path(repo: Path, sha: str) -> Path:
    return repo / "objects" / sha[:2] / sha[2:]


def test_a_forged_object_cannot_make_trees_look_equal(lab):
    good = _commit(lab.agent, {"engine.py": "correct = 1\n"}, "correct")
    bad = _commit(lab.agent, {"engine.py": "wrong = 1\n"}, "wrong")
    lab.submit(good)
    recorder = Recorder()
    judged = lab.judge(recorder)
    # A repository serving, under the bad commit's name, the good commit's content (its
    # tree and all): a submission claiming the judged tree without having it.
    forged = lab.tmp / "forged.git"
    git("init", "-q", "--bare", str(forged))
    content = subprocess.run(
        ["git", "cat-file", "commit", good], cwd=lab.agent, capture_output=True, check=True
    ).stdout
    path = _loose_object_path(forged, bad)
    path.parent.mkdir(parents=True)
    path.write_bytes(zlib.compress(b"commit %d\0" % len(content) + content))
    lab.queue.enqueue(arm="swarm", agent="w0", repo=str(forged), commit=bad, fair_key="run1/swarm")
    # The judge's copy recomputes every object's id from its content: the forgery is
    # refused (never charged, never judged), and the good verdict is not handed out.
    refused = lab.judge(recorder)
    assert (refused.verdict, refused.reason, refused.duplicate_of) == (
        Verdict.ERROR,
        "infrastructure",
        None,
    )
    assert refused.tree == "" and len(recorder.jobs) == 1
    # The honest bad commit is judged on its own tree.
    lab.submit(bad)
    honest = lab.judge(recorder)
    assert honest.duplicate_of is None
    assert honest.tree == git("rev-parse", f"{bad}^{{tree}}", cwd=lab.agent) != judged.tree
    assert len(recorder.jobs) == 2


def test_a_source_changed_after_the_copy_changes_nothing(lab):
    commit = _commit(lab.agent, {"engine.py": "x = 1\n"}, "one")
    first = lab.submit(commit)
    recorder = Recorder()
    tree = lab.judge(recorder).tree
    # The queued repository loses the commit: the judge reads the copy it checked.
    git("update-ref", "-d", f"refs/submissions/{commit}", cwd=lab.submissions)
    git("-c", "gc.reflogExpire=now", "gc", "-q", "--prune=now", cwd=lab.submissions)
    assert not git("rev-list", "--all", cwd=lab.submissions)
    lab.queue.enqueue(
        arm="swarm", agent="w0", repo=str(lab.submissions), commit=commit, fair_key="run1/swarm"
    )
    again = lab.judge(recorder)
    assert (again.tree, again.duplicate_of) == (tree, first)
