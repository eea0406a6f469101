"""A matched token budget ends a real run: ``python -m runner experiment=swarm_vs_solo
agent=claude_code match=output_tokens budget.output_tokens=N`` with Claude Code in every seat
(the swarm cut to two workers), against the local endpoint of Anthropic's protocol
(``tests/support/endpoints``) through the run's model proxy.

Each arm gets N output tokens in all, counted by the proxy from the endpoint's own usage: the
swarm's two seats share theirs, the solo seat has its own. Once an arm's N is spent its seats
get Anthropic's 429 ``rate_limit_error`` from the proxy, are stopped and never restarted (a
``budget_spent`` event each), and the run ends on its budget long before its deadline, drains
and is finished (``ended_by: budget``). The test checks the events, the meta's ``budgets``, that
nothing of an arm reached the endpoint after its first refusal, and that what the proxy counted
is what the endpoint reported.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import pytest

from runner.events import EventLog
from tasks.schema import PROJECT_ROOT
from tests.support.ci import require_client
from tests.support.endpoints import ENDPOINTS, session_script

# A change to the frozen zone: the judge answers REJECT (frozen_zone) in seconds.
EDIT_FROZEN = (
    "printf '\\n' >> engine/config.py && git commit -qam 'scripted: touch the frozen zone' && "
    "git rev-parse HEAD"
)
LIMIT = 120  # output tokens per arm: the endpoint's replies report 83, 61 and 29
MINUTES = 4.0


@pytest.mark.docker
def test_a_matched_output_token_budget_ends_the_run(judge_private_dir, base_image, tmp_path):
    client = require_client("claude_code")
    key = f"sk-swarmlab-test-{secrets.token_hex(16)}"
    run_dir = tmp_path / "run"
    endpoint = ENDPOINTS["anthropic"](session_script("anthropic", edit=EDIT_FROZEN), api_key=key)
    env = {k: v for k, v in os.environ.items() if k != client.key_env}
    with endpoint:
        env.update({client.key_env: key, client.base_url_env: endpoint.url})
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable, "-m", "runner", "experiment=swarm_vs_solo", "agent=claude_code",
                "match=output_tokens", f"budget.output_tokens={LIMIT}",
                "arms.swarm.seats=[{name: w1, role: worker}, {name: w2, role: worker}]",
                f"budget.minutes={MINUTES}", "budget.drain_minutes=1", "judge.preflight=skip",
                "rejudge.runs=0", "rejudge.baseline_runs=0", "progress_every_s=0",
                f"judge.private_dir={judge_private_dir}", f"hydra.run.dir={run_dir}",
            ],
            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        seconds = time.monotonic() - started
    report = f"exit {result.returncode} after {seconds:.0f}s\n{result.stderr[-3000:]}"
    assert result.returncode == 0, report
    events = EventLog(run_dir / "events.sqlite")
    meta = events.meta()
    life = events.table("lifecycle")
    trail = [(e["arm"], e["agent"], e["event"], json.loads(e["detail"]), e["at"]) for e in life]
    report += f"\nlifecycle: {[(a, s, ev, d) for a, s, ev, d, _ in trail if ev != 'exited']}"

    # The run ended on its budget, before its deadline, and counts as finished.
    assert meta["ended_by"] == "budget" and meta["status"] == "finished", report
    assert max(at for *_, at in trail) < meta["deadline"], report
    assert meta["budgets"] == {
        "minutes": MINUTES,
        "output_tokens": {"limit": LIMIT, "scope": "per_arm"},
        "match": "output_tokens",
    }, meta["budgets"]

    # Every seat was ended by the budget, once, and never started again after it.
    seats = {("swarm", "w1"), ("swarm", "w2"), ("solo", "w1")}
    spent = {(a, s): (d, at) for a, s, ev, d, at in trail if ev == "budget_spent"}
    assert set(spent) == seats, report
    for (arm, agent), (detail, at) in spent.items():
        assert detail["budget"] == "output_tokens" and detail["limit"] == LIMIT, detail
        assert isinstance(detail["limit"], int) and isinstance(detail["spent"], int), detail
        assert detail["spent"] >= LIMIT and detail["scope"] == "per_arm", detail
        later = [ev for a, s, ev, _, t in trail if (a, s) == (arm, agent) and t > at]
        assert not {"started", "restarted"} & set(later), (arm, agent, later)
    assert [ev for *_, ev, _, _ in trail].count("budget_spent") == len(seats), report

    # What the proxy counted is what the endpoint reported, and an arm's pool is its seats'.
    calls = events.table("model_calls")
    answered = [c for c in calls if c["upstream_status"] is not None]
    assert sum(c["output"] or 0 for c in answered) == sum(
        r.usage.get("output", 0) for r in endpoint.replies
    ), report
    totals = meta["proxy"]["spending"]["arms"]
    for arm in ("swarm", "solo"):
        mine = [c for c in calls if c["arm"] == arm]
        assert totals[arm]["output_tokens"] == sum(c["output"] or 0 for c in mine) >= LIMIT
        refused = [c for c in mine if c["error"] == "refused: budget output_tokens spent"]
        assert refused, (arm, report)
        assert all(c["status"] == 429 and c["upstream_status"] is None for c in refused)
        # Nothing of the arm reached the endpoint once one of its seats had been refused.
        first = min(c["started_at"] for c in refused)
        after = [c for c in mine if c["started_at"] > first and c["upstream_status"] is not None]
        assert after == [], (arm, after)
    assert all(r.authorized for r in endpoint.requests)
