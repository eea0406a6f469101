"""A real CLI that stalls (the "pending review" case): ``agent=claude_code`` in its real
container, through the run's model proxy, against the local Anthropic endpoint
(``tests/support/endpoints``) scripted so that the model's first reply runs a program that
sleeps 3000 s. The seat is alive and does nothing: with ``agent.stall_minutes=0.2`` the
supervisor records a ``stalled`` event naming the tool call it was last in, nudges it
(``claude -p --continue`` with the keep-going message, a ``restarted`` event with reason
``stalled``), and the seat calls the model again. Its ``trajectory.json`` validates against
the ``atif`` models, and its tool calls and tokens are what the endpoint served."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import atif
import pytest

from runner.events import EventLog
from tasks.schema import PROJECT_ROOT
from tests.support.ci import require_client
from tests.support.endpoints import ENDPOINTS, USAGE_KEYS
from tests.support.endpoints.base import shell, text

pytestmark = pytest.mark.docker

# Claude Code refuses a standalone `sleep N`: a program that sleeps is the same stall.
SLEEP = "python3 -c 'import time; time.sleep(3000)'"
FIRST = {"input": 1207, "cache_write": 2311, "cache_read": 0, "output": 83}
THEN = {"input": 233, "cache_write": 89, "cache_read": 3697, "output": 29}


def test_a_real_cli_that_sleeps_is_found_stalled_and_nudged(
    judge_private_dir, base_image, tmp_path
):
    client = require_client("claude_code")
    key = f"sk-swarmlab-test-{secrets.token_hex(16)}"
    run_dir = tmp_path / "run"
    script = [
        shell(SLEEP, FIRST, note="Pending review: I will wait for it."),
        text("Done waiting.", THEN),
    ]
    # The nudge is the keep-going message: here it must move the script on (the seat works
    # again), not start it over as a resumed seat's script does (restart_on's default).
    endpoint = ENDPOINTS["anthropic"](script, port=0, api_key=key, restart_on="")
    env = {k: v for k, v in os.environ.items() if k != client.key_env}
    with endpoint:
        env.update({client.key_env: key, client.base_url_env: endpoint.url})
        result = subprocess.run(
            [sys.executable, "-m", "runner", "arm=solo", "agent=claude_code",
             "agent.stall_minutes=0.2", "budget.minutes=1.25", "budget.drain_minutes=0.2",
             "judge.preflight=skip", "rejudge.runs=0", "rejudge.baseline_runs=0",
             "progress_every_s=0", f"judge.private_dir={judge_private_dir}",
             f"hydra.run.dir={run_dir}"],
            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    events = EventLog(run_dir / "events.sqlite")
    trail = [(e["event"], json.loads(e["detail"])) for e in events.table("lifecycle")]
    report = f"lifecycle: {trail}\nreplies: {[(r.step, r.kind) for r in endpoint.replies]}"

    stalled = [d for event, d in trail if event == "stalled"]
    assert stalled, report
    first = stalled[0]
    assert first["action"] == "nudge" and first["idle_s"] >= 12, report
    assert first["last"]["tool"] == "Bash", report
    nudges = [d for event, d in trail if event == "restarted" and d.get("reason") == "stalled"]
    assert nudges and nudges[0]["mechanism"] == "claude -p --continue", report
    # Working again: the model was called after the nudge (the script's second step).
    assert any(r.step == 1 for r in endpoint.replies), report

    # The trajectory: valid ATIF; its tool calls and tokens are what the endpoint served.
    path = run_dir / "arms" / "solo" / "agents" / "w1" / "trajectory.json"
    parsed = atif.Trajectory.model_validate_json(path.read_text())
    calls = [c for s in parsed.steps for c in s.tool_calls or []]
    served = [r for r in endpoint.replies if r.kind == "shell"]
    assert len(calls) == len(served) and all(c.arguments.get("command") == SLEEP for c in calls)
    tokens = sum(
        s.metrics.prompt_tokens + s.metrics.completion_tokens for s in parsed.steps if s.metrics
    )
    want = sum(r.usage.get(k, 0) for r in endpoint.replies for k in USAGE_KEYS if k != "reasoning")
    assert tokens == want, (tokens, want, report)
    steps = events.table("steps")
    assert [r["step"] for r in steps] == [s.step_id for s in parsed.steps]
