"""The demo experiment end to end: swarm vs solo, scripted agents drawing real patches, the real
judge, real containers. What README's `make demo` promises is asserted here."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker


def test_swarm_vs_solo_demo(judge_private_dir, base_image, tmp_path):
    run_dir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "runner", "experiment=swarm_vs_solo", "budget.minutes=3",
         "budget.drain_minutes=1", f"judge.private_dir={judge_private_dir}",
         f"hydra.run.dir={run_dir}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"results: {run_dir}" in result.stdout
    rows = {r["arm"]: r for r in csv.DictReader((run_dir / "summary.csv").open())}
    report = result.stdout + "\n" + result.stderr[-2000:]
    assert set(rows) == {"swarm", "solo"}, report
    assert all(r["agent_kind"] == "scripted (no model)" for r in rows.values())
    assert sum(int(r["evaluations"]) for r in rows.values()) >= 10, report
    assert any(float(r["x_baseline"] or 0) > 1.0 for r in rows.values()), report
    assert int(rows["swarm"]["relays"]) >= 1, report
    assert 0 < sum(float(r["judge_busy_pct"]) for r in rows.values()) <= 100.0 + 1e-6
    events = EventLog(run_dir / "events.sqlite")
    evaluations = events.table("evaluations")
    verdicts = {e["verdict"] for e in evaluations}
    assert {"PASS", "WRONG", "REJECT"} <= verdicts, report
    # Every WRONG and REJECT comes from a commit a scripted agent made from a named move.
    moves = {
        m["name"]
        for m in json.loads((PROJECT_ROOT / "tasks/decode_cpu/moves/moves.json").read_text())[
            "moves"
        ]
    }
    for e in evaluations:
        if e["verdict"] in ("WRONG", "REJECT"):
            message = subprocess.run(
                ["git", "-C", str(run_dir / "arms" / e["arm"] / "submissions.git"), "log", "-1",
                 "--format=%B", e["commit_sha"]],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            assert any(name in message for name in moves), message
