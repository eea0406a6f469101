"""A small sweep end to end through a real launcher (joblib, two jobs at a time), the real judge
and real containers: `python -m runner -m experiment=swarm_vs_solo seed=1,2 ...` where half the
jobs fail (a memory limit Docker refuses), and the sweep still ends with its aggregate."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker


def test_sweep_through_joblib(judge_private_dir, base_image, tmp_path, find_judge_services):
    sweep_dir = tmp_path / "sweep"
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "runner", "-m", "experiment=swarm_vs_solo", "seed=1,2",
             "isolation.memory=1g,1k", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
             "budget.minutes=0.3", "budget.drain_minutes=0.2", "rejudge.runs=1",
             "rejudge.baseline_runs=1", "rejudge.max_minutes=0.5",
             f"judge.private_dir={judge_private_dir}", f"hydra.sweep.dir={sweep_dir}"],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        wall = time.monotonic() - started
        # The sweep stops the judge services its jobs left running (runner.sweep). SIGTERM lets
        # the evaluation in progress finish (a re-judgement still running when a job's
        # re-judging phase timed out takes up to ~40 s here), so allow for one evaluation.
        deadline = time.monotonic() + 90
        while (left := find_judge_services(sweep_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        for pid in find_judge_services(sweep_dir):  # whatever a failure left behind
            os.kill(pid, signal.SIGTERM)
    report = f"{wall:.0f} s\n{result.stdout}\n{result.stderr[-4000:]}"
    print(report)
    assert result.returncode == 1, report  # two jobs failed
    assert "Joblib.Parallel(n_jobs=2" in result.stdout + result.stderr, report
    assert not left, f"judge services left running: {left}"

    rows = list(csv.DictReader((sweep_dir / "aggregate.csv").open()))
    assert len(rows) == 8, report  # 4 jobs x 2 arms
    by = {(r["seed"], r["job_dir"].split("isolation.memory=")[1][:2], r["arm"]): r for r in rows}
    for seed in ("1", "2"):
        for arm in ("swarm", "solo"):
            ok, failed = by[(seed, "1g", arm)], by[(seed, "1k", arm)]
            assert ok["status"] == "ok", report
            assert ok["agent_kind"] == "scripted (no model)"
            assert ok["evaluations"] != ""
            assert failed["status"] == "failed"
            assert "Minimum memory limit" in failed["job_error"], failed["job_error"]
            assert failed["evaluations"] == ""
    # every job in its own folder, named by its overrides, with its own event log and seed
    for r in rows:
        job = sweep_dir / r["job_dir"]
        assert job.parent == sweep_dir and (job / ".hydra" / "config.yaml").is_file()
        assert json.loads((job / "job.json").read_text())["seed"] == int(r["seed"])
        assert EventLog(job / "events.sqlite").meta()["seed"] == int(r["seed"])
        assert (job / "summary.csv").is_file() == (r["status"] == "ok")

    stats = list(csv.DictReader((sweep_dir / "aggregate_stats.csv").open()))
    arms = {r["arm"]: r for r in stats if r["row"] == "arm"}
    assert set(arms) == {"swarm", "solo"}
    for r in arms.values():
        assert (r["jobs"], r["failed"]) == ("4", "2")
        # With 18-second budgets and two jobs sharing the judge, an arm may get no evaluation
        # in a job: it is then "unjudged" and left out of the statistics, never counted as 1x.
        assert int(r["n"]) + int(r["unjudged"]) == 2, r
        if int(r["n"]):
            # A PASS may measure a little under 1x (noise); an arm with none counts as 1.0.
            assert float(r["median_x_baseline"]) > 0
    (comparison,) = [r for r in stats if r["row"] == "comparison"]
    assert (comparison["arm_a"], comparison["arm_b"]) == ("swarm", "solo")
    if all(r["n"] == "2" for r in arms.values()):
        assert comparison["outcome"] == "cannot_tell", comparison  # 2 vs 2 seeds never can
        assert "swarm vs solo on 2 seed(s)" in result.stdout
    else:
        assert comparison["outcome"] in ("cannot_tell", "unavailable"), comparison
    # the judge was set up and preflighted at most once, whatever job came first
    assert result.stderr.count("judge preflight: scoring the task's mutants") <= 1, report
