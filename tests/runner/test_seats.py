"""Real CLI seats without containers: the checks before a run, each seat's spec and prompt, the
supervisor's resume with the CLI's own mechanism (and its back-off), retries read from the
CLI's output, and token rows that reading the records again never doubles."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from agents.clients import STAMP, get_client
from analysis.tokens import read_usage
from arms.directions import direction_texts
from isolation.backends import AgentSpec
from isolation.workspace import Seat as WorkspaceSeat
from isolation.workspace import prepare_arm, template_repo
from runner import supervisor as supervisor_module
from runner.config import register_configs
from runner.events import EventLog
from runner.seats import client_meta, real_seat, record_prompts, seat_problem
from runner.supervisor import Supervisor, count_retries
from tasks.schema import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "tests" / "analysis" / "fixtures" / "tokens"
KEY = "sk-test-not-a-real-key"


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="runner", overrides=list(overrides))


@pytest.fixture
def fake_clients(tmp_path, monkeypatch):
    """An 'installed' cache: the stamp and an executable where each binary belongs."""
    root = tmp_path / "clients"
    for name in ("claude_code", "codex"):
        client = get_client(name)
        binary = client.install_dir(root) / client.relative_binary
        binary.parent.mkdir(parents=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
        (client.install_dir(root) / STAMP).write_text(client.spec)
    monkeypatch.setenv("SWARMLAB_CLIENTS_DIR", str(root))
    return root


def _arms(tmp_path: Path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, tmp_path / "template.git")
    run_dir = tmp_path / "run"
    uid = 1000 if os.geteuid() == 0 else None
    swarm = prepare_arm(
        run_dir,
        "swarm",
        source,
        start,
        [WorkspaceSeat("w1", "worker", "moe"), WorkspaceSeat("critic", "critic")],
        uid,
        uid,
    )
    solo = prepare_arm(run_dir, "solo", source, start, [WorkspaceSeat("w1", "worker")], uid, uid)
    return run_dir, [swarm, solo]


def _spec(arm, name: str) -> AgentSpec:
    return AgentSpec(
        arm=arm.name,
        agent=name,
        workspace=arm.agents[name],
        arm_workspace=arm,
        command=[],
        env={"SWARMLAB_AGENT": name},
        extra_mounts={"/tools": "/opt/swarmlab/bin"},
        network="swarmlab-model",
    )


# -- before anything starts ------------------------------------------------------------------


def test_seat_problems_are_one_line(fake_clients, tmp_path):
    assert seat_problem(_cfg()) is None  # the scripted agent needs nothing
    cfg = _cfg("agent=claude_code")
    missing = seat_problem(cfg, environ={})
    assert missing.startswith("agent=claude_code needs ANTHROPIC_API_KEY") and "\n" not in missing
    assert seat_problem(cfg, environ={"ANTHROPIC_API_KEY": KEY}) is None
    codex = seat_problem(_cfg("agent=codex"), environ={"ANTHROPIC_API_KEY": KEY})
    assert codex.startswith("agent=codex needs OPENAI_API_KEY")
    local = seat_problem(_cfg("agent=claude_code", "isolation=local"), {"ANTHROPIC_API_KEY": KEY})
    assert "isolation=local is not supported" in local
    shutil.rmtree(fake_clients / "codex-0.171.0")
    gone = seat_problem(_cfg("agent=codex"), environ={"OPENAI_API_KEY": KEY})
    assert "python -m agents.clients install codex" in gone and "make clients" in gone
    assert "\n" not in gone


def test_agent_configs_name_their_client():
    for name, key in (("claude_code", "ANTHROPIC_API_KEY"), ("codex", "OPENAI_API_KEY")):
        cfg = _cfg(f"agent={name}")
        assert cfg.agent.client == name and cfg.agent.kind == name
        assert cfg.agent.scripted is False and cfg.agent.resume is True
        meta = client_meta(cfg)
        assert meta["key_env"] == key and KEY not in json.dumps(meta)
    assert _cfg().agent.client is None


# -- each seat ---------------------------------------------------------------------------


def test_a_claude_code_seat_gets_its_prompt_key_and_resume(fake_clients, tmp_path):
    cfg = _cfg("experiment=swarm_vs_solo", "agent=claude_code", "agent.model=claude-x")
    run_dir, (swarm, solo) = _arms(tmp_path)
    deadline = time.time() + 600
    environ = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "http://10.9.0.1:8080/"}
    spec = real_seat(cfg, _spec(swarm, "w1"), swarm, deadline, environ)
    prompt = spec.command[spec.command.index("-p") + 1]
    assert "You are w1" in prompt and "on a team" in prompt and "moe" in prompt
    assert spec.command[spec.command.index("--model") + 1] == "claude-x"
    assert spec.env["ANTHROPIC_API_KEY"] == KEY and spec.env["SWARMLAB_AGENT"] == "w1"
    assert spec.env["ANTHROPIC_BASE_URL"] == "http://10.9.0.1:8080"
    assert KEY not in " ".join(spec.command + spec.resume_command)
    assert spec.extra_mounts["/tools"] == "/opt/swarmlab/bin"  # the contract's tools stay
    assert "/opt/swarmlab/clients/claude_code" in spec.extra_mounts.values()
    assert spec.network == "swarmlab-model" and spec.memory == "2g"
    assert spec.resume_mechanism == "claude -p --continue"
    assert spec.resume_command[1:4] == ["-p", spec.resume_command[2], "--continue"]
    assert "the experiment is not over" in spec.resume_command[2]
    assert spec.records == str(swarm.agents["w1"].notes / ".claude" / "projects")
    assert spec.records_format == "claude_code"

    alone = real_seat(cfg, _spec(solo, "w1"), solo, deadline, environ)
    assert "working alone" in alone.command[alone.command.index("-p") + 1]
    critic = real_seat(cfg, _spec(swarm, "critic"), swarm, deadline, environ)
    assert "the critic of your arm" in critic.command[critic.command.index("-p") + 1]

    prompts = record_prompts([swarm, solo], deadline, direction_texts(cfg.task))
    assert set(prompts) == {"swarm", "solo"} and set(prompts["swarm"]) == {"w1", "critic"}
    w1 = prompts["swarm"]["w1"]
    assert (run_dir / w1["file"]).read_text() == prompt
    assert w1["role"] == "worker" and w1["direction"] == "moe" and w1["solo"] is False
    assert prompts["solo"]["w1"]["solo"] is True
    # The same template for both workers, different text (direction, team or alone).
    assert w1["template_sha256"] == prompts["solo"]["w1"]["template_sha256"]
    assert w1["sha256"] != prompts["solo"]["w1"]["sha256"]


def test_a_codex_seat_resumes_with_exec_resume_last(fake_clients, tmp_path):
    cfg = _cfg("arm=solo", "agent=codex", "agent.resume=true")
    _, (_, solo) = _arms(tmp_path)
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://10.9.0.1:9/v1"}
    spec = real_seat(cfg, _spec(solo, "w1"), solo, time.time() + 60, environ)
    assert spec.command[3] == "exec" and "resume" not in spec.command
    assert spec.resume_command[3:6] == ["exec", "resume", "--last"]
    assert spec.resume_command[spec.resume_command.index("-m") + 1] == "gpt-5.5"
    assert 'base_url="http://10.9.0.1:9/v1"' in " ".join(spec.resume_command)
    assert spec.resume_mechanism == "codex exec resume --last"
    assert spec.records.endswith("notes/.codex/sessions") and spec.records_format == "codex"
    off = real_seat(_cfg("arm=solo", "agent=codex", "agent.resume=false"), _spec(solo, "w1"),
                    solo, time.time() + 60, environ)  # fmt: skip
    assert off.resume_command == [] and off.resume_mechanism == ""


def test_the_scripted_agent_is_left_as_it_was(tmp_path):
    _, (_, solo) = _arms(tmp_path)
    spec = _spec(solo, "w1")
    assert real_seat(_cfg(), spec, solo, time.time()) is spec


# -- the supervisor ------------------------------------------------------------------------


class FakeHandle:
    def __init__(self, spec: AgentSpec, output: str = "") -> None:
        self.spec = spec
        self.output = output
        self.alive = True
        self.stopped = False

    def running(self) -> bool:
        return self.alive

    def exit_code(self) -> int | None:
        return None if self.alive else 0

    def logs_tail(self, n: int) -> str:
        return "\n".join(self.output.splitlines()[-n:])

    def stop(self, timeout: float = 5) -> None:
        self.alive, self.stopped = False, True


class FakeBackend:
    def __init__(self, output: str = "") -> None:
        self.started: list[AgentSpec] = []
        self.handles: list[FakeHandle] = []
        self.output = output

    def start(self, spec: AgentSpec) -> FakeHandle:
        self.started.append(spec)
        self.handles.append(FakeHandle(spec, self.output))
        return self.handles[-1]

    def cleanup(self, run: str) -> int:
        return 0


def _cli_spec(solo, records: Path, fmt: str = "claude_code") -> AgentSpec:
    spec = _spec(solo, "w1")
    spec.command = ["claude", "-p", "PROMPT"]
    spec.resume_command = ["claude", "-p", "KEEP GOING", "--continue"]
    spec.resume_mechanism = "claude -p --continue"
    spec.records, spec.records_format = str(records), fmt
    return spec


def _restarted(events: EventLog) -> list[dict]:
    return [json.loads(e["detail"]) for e in events.table("lifecycle", "WHERE event='restarted'")]


def test_an_early_exit_is_resumed_with_the_clis_mechanism_and_backs_off(tmp_path, monkeypatch):
    run_dir, (_, solo) = _arms(tmp_path)
    records = solo.agents["w1"].notes / ".claude" / "projects"
    events = EventLog(run_dir / "events.sqlite")
    backend = FakeBackend()
    sup = Supervisor(backend, events, [_cli_spec(solo, records)], min_restart_interval_s=1.0)
    sup.start_all()
    clock = [time.time()]
    monkeypatch.setattr(supervisor_module.time, "time", lambda: clock[0])

    # No session record yet: nothing to resume, so the CLI starts afresh.
    backend.handles[-1].alive = False
    assert sup.check() == 0  # exited; its restart waits for the pause
    clock[0] += 1.0
    assert sup.check() == 1
    assert backend.started[-1].command == ["claude", "-p", "PROMPT"]
    assert backend.started[-1].env["SWARMLAB_KEEP_GOING"] == "1"
    assert _restarted(events)[-1]["mechanism"] == "fresh start (no session record to resume yet)"

    # Once the CLI wrote its record, each restart resumes it; quick exits double the pause.
    (records / "-work-repo").mkdir(parents=True)
    shutil.copy(FIXTURES / "claude_code_session.jsonl", records / "-work-repo" / "s.jsonl")
    backend.handles[-1].alive = False
    sup.check()
    clock[0] += 1.9
    assert sup.check() == 0  # the second quick exit in a row waits 2 s
    clock[0] += 0.2
    assert sup.check() == 1
    assert backend.started[-1].command == ["claude", "-p", "KEEP GOING", "--continue"]
    last = _restarted(events)[-1]
    assert last["mechanism"] == "claude -p --continue" and last["backoff_s"] == 2.0
    assert last["restarts"] == 2 and last["code"] == 0

    # A long session resets the back-off.
    clock[0] += 100
    backend.handles[-1].alive = False
    sup.check()
    clock[0] += 1.0
    assert sup.check() == 1 and _restarted(events)[-1]["backoff_s"] == 1.0

    sup.stop_all("deadline")
    outputs = sorted((solo.agents["w1"].root / "output").glob("start-*.jsonl"))
    assert [p.name for p in outputs] == [f"start-{i:03d}.jsonl" for i in range(4)]
    tokens = events.table("tokens")
    want = read_usage(records, "claude_code")
    assert {r["model"]: r["output"] for r in tokens} == {m: u.output for m, u in want.items()}
    assert {r["source"] for r in tokens} == {"claude_code"}


def test_the_scripted_agent_restarts_as_before(tmp_path):
    run_dir, (_, solo) = _arms(tmp_path)
    events = EventLog(run_dir / "events.sqlite")
    backend = FakeBackend()
    spec = _spec(solo, "w1")
    spec.command = ["python", "scripted.py"]
    sup = Supervisor(backend, events, [spec], min_restart_interval_s=0.0)
    sup.start_all()
    backend.handles[-1].alive = False
    assert sup.check() == 1  # at once, in the same check
    assert backend.started[-1].command == ["python", "scripted.py"]
    assert "mechanism" not in _restarted(events)[-1]
    sup.stop_all("deadline")
    assert not (solo.agents["w1"].root / "output").exists()
    assert events.table("tokens") == []
    assert [e["event"] for e in events.table("lifecycle")] == [
        "started",
        "exited",
        "restarted",
        "stopped",
    ]


def test_token_rows_are_replaced_not_appended(tmp_path):
    events = EventLog(tmp_path / "events.sqlite")
    usage = read_usage(FIXTURES / "claude_code_session.jsonl", "claude_code")
    for _ in range(3):
        events.set_tokens("solo", "w1", "claude_code", usage.values())
    events.set_tokens("swarm", "w1", "claude_code", usage.values())
    rows = events.table("tokens")
    assert len(rows) == 2 * len(usage)
    solo = [r for r in rows if r["arm"] == "solo"]
    assert sum(r["output"] for r in solo) == sum(u.output for u in usage.values())
    assert all(r["requests"] == usage[r["model"]].requests for r in solo)
    events.set_tokens("solo", "w1", "claude_code", [])
    assert [r["arm"] for r in events.table("tokens")] == ["swarm"] * len(usage)


def test_retries_are_read_from_the_clis_output():
    claude = "\n".join(
        [
            '{"type":"system","subtype":"init","session_id":"s"}',
            '{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,'
            '"retry_delay_ms":523,"error_status":429,"error":"rate_limit"}',
            '{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,'
            '"retry_delay_ms":1210.5,"error_status":529,"error":"overloaded"}',
            "not json",
            '{"type":"result","subtype":"success"}',
        ]
    )
    assert count_retries(claude, "claude_code") == {
        "count": 2,
        "statuses": {"429": 1, "529": 1},
        "waited_s": 1.734,
    }
    codex = "\n".join(
        [
            '{"type":"thread.started","thread_id":"t"}',
            '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected)"}',
            '{"type":"error","message":"unexpected status 401"}',
        ]
    )
    assert count_retries(codex, "codex") == {"count": 1, "statuses": {"stream": 1}}
    assert count_retries(claude, "")["count"] == 0
