"""Seats' trajectories (``agents.trajectory``, ``runner.trajectories``): each CLI's session
records, the fixtures the token readers are tested on, become ATIF that validates against the
``atif`` package's models, whose per-step tokens add up to what the token reader counts; the
supervisor writes ``trajectory.json`` and the ``steps`` rows from the same reading as the
``tokens`` rows, with the seat's submissions and posts at their times; long texts are bounded
with the full text on disk; a scripted seat's trajectory comes from its notes log."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import atif
import pytest

from agents.clis import get_cli
from agents.trajectory import TEXT_LIMIT, build, record_turns
from runner.events import EventLog
from runner.supervisor import Supervisor
from tests.runner.test_seats import FakeBackend, _arms, _cli_spec, _spec

FIXTURES = Path(__file__).parents[1] / "analysis" / "fixtures" / "tokens"

# (format, fixture, holds tool calls with results)
CASES = [
    ("claude_code", "claude_code_session.jsonl", True),
    ("claude_code", "claude_code_project", False),
    ("claude_code", "claude_code_reused_ids.jsonl", True),
    ("codex", "codex_sessions", True),
    ("gemini", "gemini_session-2025-10-02T10-00-3e9f1c2a.jsonl", False),
    ("gemini", "gemini_chats", False),
    ("mini_swe", "mini_swe_task.traj.json", True),
    ("mini_swe", "mini_swe_responses.traj.json", True),
    ("mini_swe", "mini_swe_responses_format_error.traj.json", True),
    ("mini_swe", "mini_swe_reused_ids.traj.json", True),
]


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize(("fmt", "name", "with_results"), CASES)
def test_each_clis_records_become_atif_whose_steps_carry_the_readers_tokens(
    fmt, name, with_results
):
    files = _files(FIXTURES / name)
    usage = get_cli(fmt).read_records(files)
    seat = build(record_turns(files, fmt), seat="w1", agent_name=fmt, source=fmt, usage=usage)
    parsed = atif.Trajectory.model_validate(seat.document)
    assert [s.step_id for s in parsed.steps] == list(range(1, len(parsed.steps) + 1))
    total = sum(u.total() for u in usage.usage.values())
    assert sum(r["tokens"] or 0 for r in seat.rows) == total
    final = parsed.final_metrics
    assert final.total_prompt_tokens + final.total_completion_tokens == total
    assert final.total_steps == len(parsed.steps)
    # Every reply the reader counted is a step with its model's tokens.
    replies = [s for s in parsed.steps if s.metrics is not None]
    assert len(replies) == sum(u.requests for u in usage.usage.values())
    assert parsed.steps[0].source in ("system", "user")
    calls = [c for s in parsed.steps for c in s.tool_calls or []]
    answered = {
        r.source_call_id for s in parsed.steps if s.observation for r in s.observation.results
    }
    assert answered <= {c.tool_call_id for c in calls}
    if with_results:
        assert calls and answered


def test_the_claude_fixture_reads_as_its_calls_with_their_arguments_and_results():
    files = [FIXTURES / "claude_code_session.jsonl"]
    seat = build(record_turns(files, "claude_code"), seat="w1", agent_name="c", source="c")
    steps = atif.Trajectory.model_validate(seat.document).steps
    assert steps[0].message.startswith("Make tests/test_parse.py pass faster")
    read = next(s for s in steps if s.tool_calls and s.tool_calls[0].function_name == "Read")
    assert read.observation.results[0].content == "def parse(s): ..."
    assert "file_path" in read.tool_calls[0].arguments or read.tool_calls[0].arguments
    assert [r["kind"] for r in seat.rows][:2] == ["user", "tool"]


def test_the_supervisor_writes_trajectory_and_steps_from_the_token_reading(tmp_path):
    run_dir, (_, solo) = _arms(tmp_path)
    records = solo.agents["w1"].notes / ".claude" / "projects" / "-work-repo"
    records.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude_code_session.jsonl", records / "s.jsonl")
    # A long tool result: bounded in the file, whole beside it.
    long_line = {
        "type": "user",
        "uuid": "u-long",
        "timestamp": "2025-10-02T10:00:30.000Z",
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01D", "content": "x" * (TEXT_LIMIT + 50)}
        ]},
    }  # fmt: skip
    with (records / "s.jsonl").open("a") as out:
        out.write(json.dumps(long_line) + "\n")
    events = EventLog(run_dir / "events.sqlite")
    events.add_submission("solo", "w1", "req-1", "a" * 40, "faster parse")
    events.add_message("solo", "w1", "worker", "note", "trying the regex cache")
    sup = Supervisor(FakeBackend(), events, [_cli_spec(solo, records.parent)])
    sup.start_all()
    sup.stop_all("deadline")

    path = solo.agents["w1"].root / "trajectory.json"
    parsed = atif.Trajectory.model_validate_json(path.read_text())
    tokens = events.table("tokens")
    steps = events.table("steps", "WHERE arm = 'solo' AND seat = 'w1'")
    assert [r["step"] for r in steps] == [s.step_id for s in parsed.steps]
    assert sum(r["tokens"] or 0 for r in steps) == sum(
        r["input"] + r["cache_read"] + r["cache_write"] + r["output"] for r in tokens
    )
    kinds = [r["kind"] for r in steps]
    assert kinds.count("submit") == 1 and kinds.count("post") == 1
    # The run's own events come after the fixture's 2025 session: placed at their times.
    assert kinds[-2:] in (["submit", "post"], ["post", "submit"])
    submit = next(s for s in parsed.steps if (s.extra or {}).get("swarmlab") == "submit")
    assert submit.extra["request_id"] == "req-1"
    edit = next(s for s in parsed.steps if (s.extra or {}).get("full_text"))
    (name,) = edit.extra["full_text"]
    full = solo.agents["w1"].root / "trajectory" / name
    assert full.read_text() == "x" * (TEXT_LIMIT + 50)
    assert all(len(r["text"]) <= 200 for r in steps)


def test_a_scripted_seat_writes_its_moves_marked_scripted(tmp_path):
    run_dir, (_, solo) = _arms(tmp_path)
    notes = solo.agents["w1"].notes / "NOTES.md"
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now - 5))
    notes.write_text(
        f"- {stamp} start: scripted worker, direction any, seed 1\n"
        f"- {stamp} waiting for w2's submission 1 (regex)\n"
    )
    events = EventLog(run_dir / "events.sqlite")
    events.add_submission("solo", "w1", "req-1", "b" * 40, "move: regex")
    spec = _spec(solo, "w1")
    spec.command = ["python", "scripted.py"]
    sup = Supervisor(FakeBackend(), events, [spec])
    sup.start_all()
    sup.stop_all("deadline")
    parsed = atif.Trajectory.model_validate_json(
        (solo.agents["w1"].root / "trajectory.json").read_text()
    )
    assert parsed.agent.extra["scripted"] is True and parsed.agent.name == "scripted"
    kinds = [r["kind"] for r in events.table("steps")]
    assert kinds == ["move", "wait", "submit"]
    assert events.table("tokens") == []
