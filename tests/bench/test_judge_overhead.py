"""bench/judge_overhead.py's report without the judge: the baseline's requests are counted
apart from the candidate's and from the judge's own work."""

from __future__ import annotations

import pytest

from judge import Evaluation, Verdict
from tests.support.bench import load_bench


def _load():
    return load_bench("judge_overhead")


def _evaluation(label: str, split: bool = True) -> Evaluation:
    # 20 s in all: timing 12 s wall of which 5 s candidate requests and 6 s baseline requests.
    metrics = {"engine_s": 11.0, "stage_engine_s": {"timing": 11.0, "sandbox": 0.0}}
    if split:
        metrics.update(baseline_engine_s=6.0, stage_baseline_s={"timing": 6.0, "sandbox": 0.0})
    return Evaluation(
        job_id=1,
        arm="bench",
        agent="bench",
        commit="c",
        verdict=Verdict.PASS,
        label=label,
        metrics=metrics,
        stages={"sandbox": 1.0, "timing": 12.0, "correctness:b2": 0.5, "total": 20.0},
    )


def test_the_baseline_is_its_own_column():
    bench = _load()
    assert bench.shares(_evaluation("baseline")) == (0.25, 0.3, 0.45)
    lines = bench.report([_evaluation("baseline"), _evaluation("reference")])
    timing = next(line for line in lines if line.startswith("timing"))
    assert timing.split() == ["timing", "12.000", "5.000", "6.000", "1.000", "5.0%"]
    assert not any(line.startswith("correctness:") for line in lines)
    assert lines[-1] == (
        "judge's own work / evaluation time: median 45.0% (goal < 10%);"
        " the baseline's requests: median 30.0%"
    )


def test_an_older_judge_without_the_split_says_so():
    lines = _load().report([_evaluation("baseline", split=False)])
    assert lines[-1].endswith("(this judge does not record the baseline's requests apart)")
    assert next(line for line in lines if line.startswith("timing")).split()[3] == "-"


def test_a_baseline_stage_is_all_the_baselines():
    bench = _load()
    e = _evaluation("baseline")
    # The staged pipeline's warm container and engine load: 2 s, 0.5 s of it the load request.
    e.stages["baseline"] = 2.0
    e.metrics["stage_engine_s"]["baseline"] = 0.5
    e.metrics["stage_baseline_s"]["baseline"] = 0.5
    e.metrics["engine_s"] += 0.5
    e.metrics["baseline_engine_s"] += 0.5
    assert bench.shares(e) == (0.25, 0.4, pytest.approx(0.35))
    row = next(line for line in bench.report([e]) if line.startswith("baseline "))
    assert row.split() == ["baseline", "2.000", "0.000", "2.000", "0.000", "0.0%"]
