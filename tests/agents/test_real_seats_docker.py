"""A real CLI in a seat of ``python -m runner``: ``agent=claude_code`` (and ``codex``, ``gemini``,
``mini_swe``) ``arm=solo`` with a judge budget of two evaluations against the local endpoint of
its vendor's protocol (``tests/support/endpoints``), through the run's model proxy
(``agent.network=proxy``, the default).

The endpoint listens on the host's loopback, which no container reaches, so every call must
pass the proxy; it answers the first two model calls ``429 Retry-After: 1`` and then plays a
short session (commit a change, ``submit``, answer), after which the CLI exits: the supervisor
must resume it with the CLI's own mechanism (Claude Code's ``--continue``, Codex's ``exec resume
--last``, Gemini's ``--resume latest``; mini-swe-agent starts afresh) and the keep-going
message, upon which the endpoint plays the session again: a second commit and submission, whose
verdict spends the judge budget and ends the run (``budget.evaluations=2``; the minutes budget
is only a ceiling that a passing run never reaches). The test checks that both submissions
reached the judge and got their verdicts, that the run ended on its judge budget, that the
``tokens`` table and the tokens the proxy read on the wire both equal what the endpoint reported
(every resumed call included, none twice), that every restart is a lifecycle event naming the
resume mechanism and that the resumed calls carried the session's history, that the seat's
prompt is recorded, that the agent saw a seat token and never the key (which is in no file of
the run), that every call is in ``model_calls`` and none was refused, and that the seat's lost
time matches the endpoint's own clock.

Fast tests (no engine, no CLI): each vendor's endpoint plays its script again after the keep-going
message, its earlier replies still counted; a missing key is one line and exit 2 before anything
starts.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from analysis.model_calls import seat_outages
from isolation.model_proxy import TOKEN_PREFIX
from runner.events import EventLog
from tasks.schema import PROJECT_ROOT
from tests.support.ci import require_client
from tests.support.endpoints import ENDPOINTS, USAGE_KEYS, session_script
from tests.support.endpoints.base import KEEP_GOING_WORDS

# What the agent itself can see of its environment, written where the run keeps it.
SEE_ENV = "env > $HOME/seen-env.txt && "
# A change to the frozen zone: the judge answers REJECT (frozen_zone) in seconds.
EDIT_FROZEN = (
    "printf '\\n' >> engine/config.py && git commit -qam 'scripted: touch the frozen zone' && "
    "git rev-parse HEAD"
)


def _runner(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=PROJECT_ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _files_holding(root: Path, secret: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


def _sum(rows: list[dict[str, int]]) -> dict[str, int]:
    return {k: sum(r.get(k, 0) for r in rows) for k in USAGE_KEYS}


# The vendor's endpoint, what its base URL ends with, and the resume mechanism.
SEATS = {
    "claude_code": ("anthropic", "", "claude -p --continue"),
    "codex": ("openai", "/v1", "codex exec resume --last"),
    "gemini": ("gemini", "", "gemini -p --resume latest"),
    "mini_swe": (
        "openai_chat",
        "/v1",
        "fresh start with the prompt and the keep-going message (no session resume)",
    ),
}
# The run ends on its judge budget: the first session's submission and the resumed one's.
EVALUATIONS = 2


@pytest.mark.docker
@pytest.mark.parametrize("agent", sorted(SEATS))
def test_a_cli_seat_runs_resumes_and_is_accounted(
    agent, judge_private_dir, base_image, docker_client, tmp_path
):
    vendor, base_path, mechanism = SEATS[agent]
    client = require_client(agent)
    key = f"sk-swarmlab-test-{secrets.token_hex(16)}"
    run_dir = tmp_path / "run"
    # The endpoint listens on the host's loopback, which no container reaches: every call must
    # come through the run's model proxy (agent.network=proxy, the default). Its first two model
    # calls are rate-limited (429, Retry-After: 1); the CLI's retries go through the proxy too.
    endpoint = ENDPOINTS[vendor](
        session_script(vendor, edit=SEE_ENV + EDIT_FROZEN), port=0, api_key=key, failures=2
    )
    env = {k: v for k, v in os.environ.items() if k != client.key_env}
    with endpoint:
        env.update({client.key_env: key, client.base_url_env: endpoint.url + base_path})
        started = time.monotonic()
        result = _runner(
            [
                "arm=solo", f"agent={agent}",
                # The judge budget ends the run; the minutes are a ceiling for a broken CLI only.
                f"budget.evaluations={EVALUATIONS}", "budget.minutes=4",
                "budget.drain_minutes=0.3", "judge.preflight=skip",
                "rejudge.runs=0", "rejudge.baseline_runs=0", "progress_every_s=0",
                f"judge.private_dir={judge_private_dir}", f"hydra.run.dir={run_dir}",
            ],
            env,
            timeout=420,
        )  # fmt: skip
        seconds = time.monotonic() - started
    report = f"exit {result.returncode} after {seconds:.0f}s\n{result.stderr[-3000:]}"
    assert result.returncode == 0, report
    events = EventLog(run_dir / "events.sqlite")
    life = events.table("lifecycle")
    trail = [(e["event"], json.loads(e["detail"])) for e in life]
    report += f"\nlifecycle: {trail}\nreplies: {[(r.step, r.kind) for r in endpoint.replies]}"

    # Each session's commit reached the judge, which answered: the first session's and the
    # resumed one's (the keep-going message plays the script again), and the second verdict
    # spent the judge budget, which ended the run.
    fresh = not client.resumes_session
    submissions = events.table("submissions")
    verdicts = {e["commit_sha"]: e for e in events.table("evaluations")}
    assert len(submissions) == EVALUATIONS, report
    assert events.meta()["ended_by"] == "evaluations", report
    for submission in submissions:
        assert (submission["arm"], submission["agent"]) == ("solo", "w1"), report
        evaluation = verdicts[submission["commit_sha"]]
        assert (evaluation["verdict"], evaluation["reason"]) == ("REJECT", "frozen_zone"), report

    # The CLI exited early and was resumed with its own mechanism, each time recorded.
    restarts = [d for event, d in trail if event == "restarted"]
    assert restarts, report
    assert all(d["mechanism"] == mechanism for d in restarts), report
    assert sum(1 for event, _ in trail if event == "exited") >= len(restarts)
    # Each start played the script from its first step, after the keep-going message; a
    # resumed call carried the history (the model's replies before the keep-going message),
    # a fresh start did not.
    scripted = [r for r in endpoint.replies if r.kind != "side"]
    steps = [r.step for r in scripted]
    assert steps == [i % 3 for i in range(len(steps))] and len(steps) >= 5, report
    if fresh:  # its task the prompt and then the keep-going words
        assert [r.history for r in scripted] == steps, report
        tasks = endpoint.first_user
        assert all("You are w1" in task for task in tasks), report
        assert [KEEP_GOING_WORDS in t for t in tasks] == [i >= 3 for i in range(len(tasks))]
    else:
        assert [r.history == r.step for r in scripted] == [i < 3 for i in range(len(steps))]
    outputs = sorted((run_dir / "arms/solo/agents/w1/output").glob("start-*.jsonl"))
    assert len(outputs) == len(restarts) + 1, report

    # The tokens table: what the endpoint reported, per model, once.
    rows = events.table("tokens")
    got = {r["model"]: {k: r[k] for k in USAGE_KEYS} for r in rows}
    assert {r["source"] for r in rows} == {client.record_format}
    assert len(got) == len(rows)  # one row per agent and model
    want = endpoint.usage_by_model()
    # The deadline may kill the CLI between the endpoint's reply and the CLI's record of it
    # (or the proxy's reading of it): then exactly the last reply is missing, and it came in
    # the last seconds of the run.
    last = endpoint.replies[-1]
    stopped = max(e["at"] for e in life if e["event"] == "stopped")
    asked = max(r.at for r in endpoint.requests if r.step is not None)
    rest = {last.model: _sum([r.usage for r in endpoint.replies[:-1] if r.model == last.model])}
    if got != want:
        assert got == {**want, **rest} and asked > stopped - 10, (got, want, report)
    # The same totals as the vendor reported them on the wire, read by the model proxy.
    wire: dict[str, dict[str, int]] = {}
    for call in events.table("model_calls"):
        if call["output"] is not None:
            total = wire.setdefault(call["model"], dict.fromkeys(USAGE_KEYS, 0))
            for k in USAGE_KEYS:
                total[k] += call[k]
    if wire != want:
        assert wire == {**want, **rest} and asked > stopped - 10, (wire, want, report)
    (tokens_event,) = [d for event, d in trail if event == "tokens"]
    assert tokens_event["source"] == client.record_format and tokens_event["requests"] >= 3

    # The seat's prompt: the solo worker's, recorded by hash, its text beside the seat.
    meta = events.meta()
    prompt = meta["prompts"]["solo"]["w1"]
    text = (run_dir / prompt["file"]).read_text()
    assert "working alone" in text and "You are w1" in text
    assert prompt["role"] == "worker" and prompt["solo"] is True and len(prompt["sha256"]) == 64
    assert meta["client"]["version"] == client.version and meta["agent_kind"] == agent

    # The key never entered the container: the agent saw a seat token and the proxy's URL,
    # and the proxy put the key on every call (the endpoint saw it each time).
    seen = (run_dir / "arms/solo/agents/w1/notes/seen-env.txt").read_text()
    assert f"{client.key_env}={TOKEN_PREFIX}" in seen and key not in seen, report
    assert f"{client.base_url_env}=http://" in seen and endpoint.url not in seen, report
    assert all(r.authorized for r in endpoint.requests), report
    assert _files_holding(run_dir, key.encode()) == [], report
    assert meta["proxy"]["calls"] >= len(endpoint.requests) and not meta["proxy"]["record_errors"]
    assert "network_error" not in meta["proxy"], meta["proxy"]
    assert not docker_client.networks.list(names=[meta["proxy"]["network"]])

    # Every call the endpoint saw came through the proxy and is in model_calls, with the seat.
    # The two rate-limited calls are failures, and the seat's lost time is from the first of
    # them to the next answered call, as the endpoint's own clock saw it.
    calls = events.table("model_calls")
    assert {(c["arm"], c["agent"]) for c in calls} == {("solo", "w1")}, calls
    # The CLI needed nothing but its API's model routes (an upgrade refused is its probe).
    refused = [(c["method"], c["path"]) for c in calls if c["status"] == 403]
    assert refused == [], refused
    answered = sorted(c["upstream_status"] for c in calls if c["upstream_status"] is not None)
    assert answered == sorted(r.status for r in endpoint.requests), (calls, endpoint.requests)
    outage = seat_outages(calls)[("solo", "w1")]
    assert outage.statuses == {"429": 2} and outage.outages == 1, (outage, report)
    limited = [r for r in endpoint.requests if r.status == 429]
    recovered = next(r for r in endpoint.requests if r.at > limited[-1].at and r.status < 400)
    assert outage.lost_s == pytest.approx(recovered.at - limited[0].at, abs=0.5), (outage, report)
    assert outage.lost_s >= 1.0  # the CLI honoured Retry-After: 1 (or waited longer)
    (row,) = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert int(row["model_call_failures"]) == 2
    assert int(row["wire_output_tokens"]) == sum(t["output"] for t in wire.values())
    assert float(row["model_lost_s"]) == pytest.approx(outage.lost_s, abs=0.05)


# Per vendor: its model route, the tools a request offers, and its conversation's turns (a user
# text, a shell call of the model, that call's result, the model's final text).
_CALL_ID = "call_1"
PROTOCOLS: dict[str, dict[str, Any]] = {
    "anthropic": {
        "route": "/v1/messages",
        "body": {"model": "claude-x", "tools": [{"name": "Bash", "input_schema": {}}]},
        "list": "messages",
        "user": lambda t: {"role": "user", "content": [{"type": "text", "text": t}]},
        "call": {"role": "assistant", "content": [{"type": "tool_use", "id": _CALL_ID,
                                                   "name": "Bash", "input": {}}]},
        "result": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": _CALL_ID,
                                                "content": "ok"}]},
        "final": {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    },
    "openai": {
        "route": "/v1/responses",
        "body": {"model": "gpt-x", "tools": [{"type": "function", "name": "shell_command"}]},
        "list": "input",
        "user": lambda t: {"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": t}]},
        "call": {"type": "function_call", "name": "shell_command", "arguments": "{}",
                 "call_id": _CALL_ID},
        "result": {"type": "function_call_output", "call_id": _CALL_ID, "output": "ok"},
        "final": {"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": "done"}]},
    },
    "openai_chat": {
        "route": "/v1/chat/completions",
        "body": {"model": "gpt-x", "tools": [{"type": "function", "function": {"name": "bash"}}]},
        "list": "messages",
        "user": lambda t: {"role": "user", "content": t},
        "call": {"role": "assistant", "content": None, "tool_calls": [
            {"id": _CALL_ID, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ]},
        "result": {"role": "tool", "tool_call_id": _CALL_ID, "content": "ok"},
        "final": {"role": "assistant", "content": "done"},
    },
    "gemini": {
        "route": "/v1beta/models/gemini-y:generateContent",
        "body": {"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}]},
        "list": "contents",
        "user": lambda t: {"role": "user", "parts": [{"text": t}]},
        "call": {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command"}}]},
        "result": {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command"}}]},
        "final": {"role": "model", "parts": [{"text": "done"}]},
    },
}  # fmt: skip


@pytest.mark.parametrize("vendor", sorted(PROTOCOLS))
def test_an_endpoint_plays_its_script_again_after_the_keep_going_message(vendor):
    """A resumed session carries its whole history; the keep-going message after it starts the
    script again, and the replies before it are still counted in ``Reply.history``."""
    protocol = PROTOCOLS[vendor]
    user, call, result, final = (protocol[k] for k in ("user", "call", "result", "final"))
    session = [user("You are w1. Make it faster."), call, result, call, result, final]
    keep_going = user(f"{KEEP_GOING_WORDS}: it runs until the deadline.")
    conversations = [
        session,  # no keep-going message: the script's last step again
        [*session, keep_going],  # resumed: the first step
        [*session, keep_going, call, result],  # and on from there
        [*session, keep_going, call, result, call, result, final, keep_going],  # once more
    ]
    with ENDPOINTS[vendor](session_script(vendor), api_key="") as endpoint:
        for conversation in conversations:
            body = {**protocol["body"], protocol["list"]: conversation}
            request = urllib.request.Request(
                endpoint.url + protocol["route"], data=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=10) as reply:
                assert reply.status == 200
    # What the vendor counts as the model's replies: its messages (Anthropic, Chat
    # Completions: the final text too) or its tool calls (Responses, Gemini).
    before = 3 if vendor in ("anthropic", "openai_chat") else 2
    assert [(r.step, r.history) for r in endpoint.replies] == [
        (2, before), (0, before), (1, before + 1), (0, 2 * before)
    ]  # fmt: skip
    assert [r.step for r in endpoint.requests] == [2, 0, 1, 0]


def test_a_missing_key_is_one_line_and_exit_2_before_anything_starts(tmp_path):
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["DOCKER_HOST"] = "unix:///nonexistent.sock"  # any engine call would fail differently
    result = _runner(
        ["experiment=swarm_vs_solo", "agent=claude_code", f"hydra.run.dir={run_dir}",
         f"judge.private_dir={tmp_path / 'judge'}"],
        env,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("runner: agent=claude_code needs ANTHROPIC_API_KEY")
    # Nothing was set up: no judge folder, no workspaces, no judge service.
    assert not (tmp_path / "judge").exists()
    assert not (run_dir / "arms").exists() and not (run_dir / "judge-service.log").exists()
