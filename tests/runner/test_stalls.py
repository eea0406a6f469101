"""Live stall detection (``runner.supervisor.Supervisor.check_stalls``): a seat alive but doing
nothing for ``agent.stall_minutes`` gets a ``stalled`` event with what it was last doing, then
``agent.on_stall``: ``nudge`` (a restart with the keep-going signal, reason ``stalled``) or
``record`` (the event only). A seat waiting for the judge's verdict, or running a build it
started, is not stalled. End to end: the real scripted agent, on the host through the real
``LocalBackend``, made to sleep after its first message (``SWARMLAB_SCRIPTED_STALL_S``), is
found stalled, nudged, and works again."""

from __future__ import annotations

import json
import sys
import time

import pytest

from agents.scripted.card import ENV as CARD_ENV
from isolation.backends import AgentSpec, LocalBackend
from isolation.workspace import Seat
from runner.events import EventLog
from runner.supervisor import Supervisor
from tests.agents.test_scripted import MOVES, SCRIPTED, _library, make_arm, stand_in, task_card
from tests.runner.test_seats import FakeBackend, _arms, _cli_spec, _spec


def _lifecycle(events: EventLog, name: str) -> list[dict]:
    return [json.loads(r["detail"]) for r in events.table("lifecycle", f"WHERE event='{name}'")]


def test_a_quiet_seat_is_recorded_or_nudged_once_per_stretch(tmp_path):
    run_dir, (swarm, _) = _arms(tmp_path)
    events = EventLog(run_dir / "events.sqlite")
    specs = [_spec(swarm, "w1"), _spec(swarm, "critic")]
    for spec in specs:
        spec.command = ["python", "scripted.py"]
    backend = FakeBackend()
    sup = Supervisor(backend, events, specs, stall_s=60.0, on_stall="record")
    sup.start_all()
    assert sup.check_stalls(time.time() + 30) == 0 and _lifecycle(events, "stalled") == []
    later = time.time() + 120
    assert sup.check_stalls(later) == 0  # record: the events only
    assert sorted(e["action"] for e in _lifecycle(events, "stalled")) == ["record", "record"]
    sup.check_stalls(later + 60)  # the same quiet stretch: not told twice
    assert len(_lifecycle(events, "stalled")) == 2 and len(backend.started) == 2

    nudging = Supervisor(FakeBackend(), events, specs[:1], stall_s=60.0)
    nudging.start_all()
    assert nudging.check_stalls(time.time() + 120) == 1
    restarted = _lifecycle(events, "restarted")
    assert [r["reason"] for r in restarted] == ["stalled"] and restarted[0]["restarts"] == 1
    assert nudging.backend.started[-1].env["SWARMLAB_KEEP_GOING"] == "1"
    with pytest.raises(ValueError, match="on_stall"):
        Supervisor(FakeBackend(), events, specs, on_stall="shout")


def test_waiting_for_the_judge_or_a_running_build_is_not_a_stall(tmp_path):
    run_dir, (_, solo) = _arms(tmp_path)
    events = EventLog(run_dir / "events.sqlite")
    records = solo.agents["w1"].notes / ".claude" / "projects" / "-work-repo"
    records.mkdir(parents=True)
    lines = [
        {"type": "user", "uuid": "u1", "timestamp": "2025-10-02T10:00:00Z",
         "message": {"role": "user", "content": "Make it faster."}},
        {"type": "assistant", "uuid": "a1", "timestamp": "2025-10-02T10:00:01Z",
         "requestId": "r1", "message": {
             "id": "m1", "role": "assistant", "model": "claude-sonnet-4-5",
             "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                          "input": {"command": "make -j2 && pytest -q"}}],
             "usage": {"input_tokens": 10, "output_tokens": 5}}},
    ]  # fmt: skip
    (records / "s.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    spec = _cli_spec(solo, records.parent)
    sup = Supervisor(FakeBackend(), events, [spec], stall_s=60.0)
    sup.start_all()
    # Its last tool call, a build and test, has no result yet: still running.
    assert sup.check_stalls(time.time() + 600) == 0 and _lifecycle(events, "stalled") == []
    with (records / "s.jsonl").open("a") as out:
        out.write(json.dumps({"type": "user", "uuid": "u2", "timestamp": "2025-10-02T10:09:00Z",
                              "message": {"role": "user", "content": [
                                  {"type": "tool_result", "tool_use_id": "t1",
                                   "content": "ok"}]}}) + "\n")  # fmt: skip
    # A submission with no verdict yet: waiting for the judge.
    events.add_submission("solo", "w1", "req-1", "c" * 40)
    assert sup.check_stalls(time.time() + 600) == 0 and _lifecycle(events, "stalled") == []
    (job,) = [r["id"] for r in events.table("submissions")]
    with events.connect() as db:  # the verdict came: the wait is over
        db.execute(
            "INSERT INTO evaluations (job_id, submission_id, arm, agent, commit_sha, verdict,"
            " reason, detail, metrics, stages, flags, attempts, enqueued_at, started_at,"
            " finished_at, queue_wait_s) VALUES (1, ?, 'solo', 'w1', ?, 'PASS', '', '', '{}',"
            " '{}', '[]', 1, 0, 0, 0, 0)",
            (job, "c" * 40),
        )
        db.execute("UPDATE submissions SET job_id = 1")
    assert sup.check_stalls(time.time() + 600) == 1
    (stalled,) = _lifecycle(events, "stalled")
    assert stalled["action"] == "nudge" and stalled["last"]["tool"] == "Bash"
    assert sup.backend.started[-1].command[-1] == "--continue"  # the CLI's own resume


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # LocalBackend warns it isolates nothing
def test_the_scripted_agent_made_to_sleep_is_found_stalled_nudged_and_works_again(tmp_path):
    arm = make_arm(tmp_path, [Seat("w1", "worker")], name="solo")
    ws = arm.agents["w1"]
    events = EventLog(tmp_path / "run" / "events.sqlite")
    deadline = time.time() + 900
    spec = AgentSpec(
        arm="solo",
        agent="w1",
        workspace=ws,
        arm_workspace=arm,
        command=[sys.executable, "-I", str(SCRIPTED), "--role", "worker", "--direction", "any",
                 "--seed", "3", "--moves", str(MOVES), "--deadline", f"{deadline:.0f}"],
        env={
            "SWARMLAB_AGENT": "w1",
            CARD_ENV: task_card(),
            "SWARMLAB_SCRIPTED_POLL_S": "0.1",
            "SWARMLAB_SCRIPTED_IDLE_S": "0.3",
            "SWARMLAB_SCRIPTED_STALL_S": "3600",
        },
    )  # fmt: skip
    backend = LocalBackend()
    # stall_minutes=0.1: six quiet seconds (a slow start is not mistaken for the sleep: the
    # event must name the sleep as what the seat was last doing).
    sup = Supervisor(backend, events, [spec], stall_s=6.0, tokens_every_s=0)
    with stand_in(arm, _library()) as gateway:
        sup.start_all()
        try:
            worked_again = False
            give_up = time.time() + 600  # a ceiling for a broken run, not a measurement
            while not worked_again and time.time() < give_up:
                sup.check()
                time.sleep(0.2)
                nudged = [r for r in _lifecycle(events, "restarted") if r["reason"] == "stalled"]
                state = ws.notes / "scripted-state.json"
                attempts = json.loads(state.read_text())["attempts"] if state.exists() else []
                worked_again = bool(nudged) and len(attempts) >= 1
        finally:
            sup.stop_all("test")
    (stalled,) = _lifecycle(events, "stalled")
    assert "pending review" in stalled["last"]["text"], stalled
    assert stalled["action"] == "nudge" and stalled["idle_s"] >= 6.0
    assert worked_again, events.table("lifecycle")
    assert any("restarted (keep going)" in r["text"] for r in gateway.board)
    # The trajectory shows the sleep, then the moves after the nudge.
    kinds = [r["text"] for r in events.table("steps")]
    assert any("pending review" in t for t in kinds)
