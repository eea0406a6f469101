"""bench/judge_overlap_noise.py without the judge: its help and its per-condition summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from judge import Evaluation, Verdict
from tests.support.bench import load_bench

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "judge_overlap_noise.py"


def _load():
    return load_bench("judge_overlap_noise")


def _evaluation(x: float, b1: float, total: float) -> Evaluation:
    return Evaluation(
        job_id=1,
        arm="bench-overlap",
        agent="bench",
        commit="c",
        verdict=Verdict.PASS,
        metrics={"x_baseline": x, "b1_ratio": b1},
        stages={"total": total},
    )


def test_help_runs_without_a_judge():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    )
    assert "--runs" in out.stdout and "--stand-in" not in out.stdout


def test_a_condition_is_summarised_by_the_spread_and_level_of_x_and_b1():
    bench = _load()
    rows = [_evaluation(0.9, 1.01, 15.0), _evaluation(1.1, 0.99, 17.0), _evaluation(1.0, 1.0, 16)]
    assert bench.summary("busy", rows).split() == ["busy", "3", "0.100", "1.000", "1.000", "16.0"]
