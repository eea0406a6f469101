"""A private arm (``visibility: private``, issue 28) on real git repositories and a real event
log: each seat has its own origin, board and submission repository, as a solo arm, while the
arm's ``submissions.git`` (the judge's and the analysis's) still holds every seat's
submissions and the arm counts as one arm for its judge budget. The in-container isolation
of the same layout is proven with real containers in
``tests/isolation/test_private_arm_docker.py``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir

from isolation.backends import agent_paths
from isolation.gitutil import GitError, git
from isolation.workspace import AgentWorkspace, Seat, load_arm, prepare_arm, template_repo
from judge.queue import JudgeQueue
from judge.verdict import Evaluation, Verdict
from runner.config import register_configs
from runner.events import EventLog
from runner.gateway import Gateway
from runner.seats import seat_prompt
from runner.settings import settings_problems
from tasks.schema import PROJECT_ROOT

SEATS = [Seat("w1", "worker", "moe"), Seat("w2", "worker", "head"), Seat("w3", "worker")]


@pytest.fixture
def lab(tmp_path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, base = template_repo(template, tmp_path / "template.git")
    run_dir = tmp_path / "run"
    indep = prepare_arm(run_dir, "independent", source, base, SEATS, visibility="private")
    solo = prepare_arm(run_dir, "solo", source, base, [Seat("w1", "worker")])
    events = EventLog(run_dir / "events.sqlite")
    events.set_meta(run_id="run-1")
    queue = JudgeQueue(tmp_path / "judge" / "queue.sqlite")
    gateway = Gateway(events, queue, [indep, solo], evaluations_per_arm=4)
    return SimpleNamespace(
        run_dir=run_dir, base=base, indep=indep, solo=solo, events=events, queue=queue,
        gateway=gateway,
    )  # fmt: skip


def commit(ws: AgentWorkspace, text: str) -> str:
    (ws.repo / "engine" / "model.py").write_text(text)
    git("commit", "-qam", text, cwd=ws.repo)
    return git("rev-parse", "HEAD", cwd=ws.repo)


def send(ws: AgentWorkspace, body: dict) -> str:
    rid = f"r{time.time_ns()}"
    (ws.outbox / f"{rid}.json").write_text(json.dumps({"id": rid, **body}))
    return rid


def reply(ws: AgentWorkspace, rid: str) -> dict:
    return json.loads((ws.replies / f"{rid}.json").read_text())


def refs(repo: Path) -> list[str]:
    return git("for-each-ref", "--format=%(refname)", cwd=repo).split()


def board(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def finish_next(queue: JudgeQueue, **metrics) -> None:
    job = queue.claim("cpu")
    assert job is not None
    now = time.time()
    queue.finish(
        job.id,
        Evaluation(
            job_id=job.id, arm=job.arm, agent=job.agent, commit=job.commit,
            verdict=Verdict.PASS, reason="", detail="", metrics=metrics, stages={}, flags={},
            enqueued_at=job.enqueued_at, started_at=now, finished_at=now,
        ),
    )  # fmt: skip


def test_each_seat_has_its_own_origin_board_and_submissions(lab):
    arm = lab.indep
    own = {n: (arm.origin_of(n), arm.board_dir_of(n), arm.submissions_of(n)) for n in arm.agents}
    assert len({p for paths in own.values() for p in paths}) == 3 * len(SEATS)
    for name, ws in arm.agents.items():
        origin, board_dir, subs = own[name]
        assert git("remote", "get-url", "origin", cwd=ws.repo) == str(origin)
        assert refs(origin) == ["refs/heads/master"]
        assert git("rev-parse", "master", cwd=origin) == lab.base
        assert (board_dir / "board.jsonl").read_text() == "" and refs(subs) == []
        paths = agent_paths(ws, arm, container=False)
        assert (paths["SWARMLAB_BOARD"], paths["SWARMLAB_SUBMISSIONS"]) == (
            str(board_dir),
            str(subs),
        )
    # A shared arm is laid out as before: one board, one submission repo.
    solo = lab.solo
    assert not solo.private and solo.boards() == {None: solo.board_file}
    assert solo.submissions_of("w1") == solo.submissions and solo.origin_of("w1") == solo.origin
    reloaded = load_arm(lab.run_dir, "independent")
    assert reloaded.visibility == "private" and reloaded.boards() == arm.boards()


def test_a_critic_in_a_private_arm_is_refused(tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    (template / "a.txt").write_text("a\n")
    source, base = template_repo(template, tmp_path / "template.git")
    seats = [Seat("w1", "worker"), Seat("c1", "critic")]
    with pytest.raises(ValueError, match="a critic has nothing to review in a private arm"):
        prepare_arm(tmp_path / "run", "indep", source, base, seats, visibility="private")
    with pytest.raises(ValueError, match="visibility 'secret'"):
        prepare_arm(tmp_path / "run", "indep", source, base, seats[:1], visibility="secret")
    assert not (tmp_path / "run" / "arms" / "indep").exists()


def test_posts_submissions_and_verdicts_reach_only_their_own_seat(lab):
    arm, gw = lab.indep, lab.gateway
    w1, w2, w3 = (arm.agents[n] for n in ("w1", "w2", "w3"))
    shas = {"w1": commit(w1, "SPEED = 2\n"), "w2": commit(w2, "SPEED = 3\n")}
    asked = {
        "w1": send(w1, {"op": "submit", "commit": shas["w1"], "message": "mine"}),
        "w2": send(w2, {"op": "submit", "commit": shas["w2"], "message": "mine"}),
    }
    for ws in (w1, w2, w3):
        send(ws, {"op": "post", "kind": "note", "text": f"note of {ws.name}"})
    gw.poll()
    numbers = {n: reply(arm.agents[n], rid)["submission"] for n, rid in asked.items()}
    # Each seat's board holds its own posts only; the log holds them all, in one arm.
    for ws in (w1, w2, w3):
        assert [m["text"] for m in board(arm.board_dir_of(ws.name) / "board.jsonl")] == [
            f"note of {ws.name}"
        ]
    assert len(lab.events.messages("independent")) == 3
    # Each seat's submission repo: its own ref, and no object of another seat's commit.
    for name, sha in shas.items():
        subs = arm.submissions_of(name)
        assert refs(subs) == [f"refs/submissions/{name}/{numbers[name]}"]
        other = next(s for n, s in shas.items() if n != name)
        assert git("cat-file", "-t", sha, cwd=subs) == "commit"
        with pytest.raises(GitError):
            git("cat-file", "-t", other, cwd=subs)
    assert refs(arm.submissions_of("w3")) == []
    # The arm's own repo (the judge's, never mounted) has every seat's submission.
    assert sorted(refs(arm.submissions)) == sorted(
        f"refs/submissions/{n}/{numbers[n]}" for n in shas
    )
    jobs = {row["agent"]: row for row in lab.events.pending_jobs()}
    assert {row["arm"] for row in jobs.values()} == {"independent"}
    finish_next(lab.queue, tokens_per_s=10.0)
    finish_next(lab.queue, tokens_per_s=12.0)
    gw.poll()
    for name in shas:
        (line,) = board(arm.agents[name].verdicts_file)
        assert line["submission"] == numbers[name] and line["commit"] == shas[name]
    assert w3.verdicts_file.read_text() == ""


def test_the_arm_is_one_arm_for_its_judge_budget(lab):
    arm, gw = lab.indep, lab.gateway  # evaluations_per_arm=4, shared by the four seats' work
    made = []
    for i, name in enumerate(["w1", "w2", "w3", "w1", "w2"]):
        ws = arm.agents[name]
        rid = send(ws, {"op": "submit", "commit": commit(ws, f"SPEED = {10 + i}\n")})
        gw.poll()
        made.append(reply(ws, rid))
    assert [r["ok"] for r in made] == [True, True, True, True, False]
    assert "the arm's judge budget is spent" in made[-1]["error"]


def test_a_board_is_rebuilt_from_the_log_per_seat(lab):
    arm = lab.indep
    for ws in arm.agents.values():
        send(ws, {"op": "post", "kind": "note", "text": f"from {ws.name}"})
    lab.gateway.poll()
    for path in arm.boards().values():
        path.write_text('{"torn":')
    Gateway(lab.events, lab.queue, [lab.indep, lab.solo])  # a restarted gateway
    for name, path in arm.boards().items():
        assert [(m["author"], m["text"]) for m in board(path)] == [(name, f"from {name}")]


def test_the_independent_arm_composes_with_three_arms_and_match():
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="runner",
            overrides=[
                "experiment=swarm_vs_independent_vs_solo",
                "match=evaluations",
                "budget.evaluations=6",
            ],
        )
    assert list(cfg.arms) == ["swarm", "independent", "solo"]
    indep = cfg.arms.independent
    assert indep.visibility == "private" and cfg.arms.swarm.visibility == "shared"
    assert [s.role for s in indep.seats] == ["worker"] * 4 and indep.task_directions
    assert cfg.judge.queue_policy == "fair"
    assert settings_problems(cfg) == []


def test_a_private_seat_is_told_it_works_alone(lab):
    # No teammate's post or submission ever reaches it: a solo seat's prompt, not a team's.
    alone = seat_prompt(lab.indep.agents["w1"], lab.indep, time.time() + 600, {})
    assert "You are alone" in alone.text and "teammates" not in alone.text
    # The shared solo arm's one seat alike; a shared arm of several seats is a team.
    assert "You are alone" in seat_prompt(lab.solo.agents["w1"], lab.solo, time.time(), {}).text
