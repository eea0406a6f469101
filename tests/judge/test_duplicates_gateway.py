"""A duplicate as the run sees it: real gateway, real git repositories, real SQLite (the
run's events and the judge's queue), the worker's own per-job step with a recording evaluator
in place of the sandbox. The agent is told which submission was judged; the run's events keep
``duplicate_of`` and the tree; a restarted gateway rebuilds the same verdict files."""

from __future__ import annotations

import json
import types

from isolation.gitutil import git
from isolation.workspace import AgentWorkspace, Seat, prepare_arm, template_repo
from judge import compose_judge_config, settings_hash
from judge.queue import JudgeQueue
from judge.service import judge_job
from runner.events import EventLog
from runner.gateway import Gateway
from tests.judge.test_duplicates import Recorder


def _commit(ws: AgentWorkspace, speed: int, message: str) -> str:
    (ws.repo / "engine" / "model.py").write_text(f"SPEED = {speed}\n")
    git("commit", "-qam", message, cwd=ws.repo)
    return git("rev-parse", "HEAD", cwd=ws.repo)


def _submit(ws: AgentWorkspace, sha: str, rid: str) -> None:
    (ws.outbox / f"{rid}.json").write_text(json.dumps({"id": rid, "op": "submit", "commit": sha}))


def test_the_agent_is_told_which_submission_its_duplicate_reuses(tmp_path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, base = template_repo(template, tmp_path / "template.git")
    run_dir = tmp_path / "run"
    swarm = prepare_arm(
        run_dir, "swarm", source, base, [Seat("w1", "worker"), Seat("w2", "worker")]
    )
    solo = prepare_arm(run_dir, "solo", source, base, [Seat("w1", "worker")])
    events = EventLog(run_dir / "events.sqlite")
    events.set_meta(run_id="run-1")
    cfg = compose_judge_config([f"judge.private_dir={tmp_path / 'judge'}"])
    queue = JudgeQueue(tmp_path / "judge" / "queue.sqlite", settings_hash=settings_hash(cfg))
    gateway = Gateway(events, queue, [swarm, solo])
    home = types.SimpleNamespace(root=tmp_path / "judge" / "home")
    recorder = Recorder()

    def judge_next() -> None:
        job = queue.claim("cpu")
        assert job is not None
        assert queue.finish(job.id, judge_job(cfg, home, queue, recorder, job))  # type: ignore[arg-type]

    w1, w2, solo_w1 = swarm.agents["w1"], swarm.agents["w2"], solo.agents["w1"]
    first = _commit(w1, 2, "speed 2")
    _submit(w1, first, "a")
    gateway.poll()
    judge_next()
    gateway.poll()
    # w2 reaches the very same files on its own (another commit, author and message).
    same = _commit(w2, 2, "w2 also tries speed 2")
    assert same != first
    _submit(w2, same, "b")
    _submit(solo_w1, _commit(solo_w1, 2, "solo: speed 2"), "c")
    gateway.poll()
    judge_next()
    judge_next()
    gateway.poll()
    assert len(recorder.jobs) == 2  # w1's and the solo arm's: w2's was not judged again

    [told_w1] = [json.loads(x) for x in w1.verdicts_file.read_text().splitlines()]
    [told_w2] = [json.loads(x) for x in w2.verdicts_file.read_text().splitlines()]
    [told_solo] = [json.loads(x) for x in solo_w1.verdicts_file.read_text().splitlines()]
    assert "duplicate_of" not in told_w1 and "duplicate_of" not in told_solo
    assert told_w2["duplicate_of"] == told_w1["submission"]
    assert (told_w2["verdict"], told_w2["metrics"]) == (told_w1["verdict"], told_w1["metrics"])
    assert told_w2["commit"] == same

    rows = {r["agent"] + "@" + r["arm"]: r for r in events.table("evaluations")}
    w1_row, w2_row = rows["w1@swarm"], rows["w2@swarm"]
    assert w2_row["duplicate_of"] == w1_row["job_id"] and w1_row["duplicate_of"] is None
    assert w2_row["tree"] == w1_row["tree"] == git("rev-parse", f"{first}^{{tree}}", cwd=w1.repo)
    assert json.loads(w2_row["stages"]) == {}
    assert rows["w1@solo"]["duplicate_of"] is None

    # A gateway started again re-derives the verdict files from the log: nothing changes.
    before = {p: p.read_text() for p in (w1.verdicts_file, w2.verdicts_file)}
    Gateway(EventLog(run_dir / "events.sqlite"), queue, [swarm, solo])
    assert {p: p.read_text() for p in before} == before
