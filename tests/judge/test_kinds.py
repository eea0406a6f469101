"""The task-kind registry and the metric every kind scores by."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig, OmegaConf

from judge.kinds import Metric, get_kind, kind_names, run_metric, task_kind
from judge.kinds.registry import KINDS


@pytest.fixture
def dummy_kind():
    """A kind registered by this test alone (nothing of judge/kinds names it)."""

    @task_kind("dummy_latency")
    class DummyKind:
        name = "dummy_latency"

        def metric(self, task: DictConfig) -> Metric:
            return Metric("latency_ms", "ms", f"{task.name} p50 latency", higher_is_better=False)

        def evaluator(self, cfg, home):
            raise NotImplementedError

        def generated_mutants(self, cfg):
            return []

        def required_reasons(self, task):
            return ["WRONG (mismatch)"]

    yield DummyKind
    KINDS.unregister("dummy_latency")


def test_a_kind_registered_from_a_test_is_found_by_name(dummy_kind) -> None:
    kind = get_kind("dummy_latency")
    assert isinstance(kind, dummy_kind) and "dummy_latency" in kind_names()
    metric = kind.metric(OmegaConf.create({"name": "echo"}))
    assert metric.label == "echo p50 latency" and not metric.higher_is_better


def test_an_unknown_kind_names_the_known_ones(dummy_kind) -> None:
    with pytest.raises(KeyError) as raised:
        get_kind("nope")
    assert "'nope'" in str(raised.value)
    assert "decode" in str(raised.value) and "dummy_latency" in str(raised.value)


def test_lower_is_better_best_gain_and_ratio() -> None:
    latency = Metric("latency_ms", "ms", "p50 latency", higher_is_better=False)
    assert latency.best([50.0, None, 40.0, float("nan"), 60.0]) == 40.0
    assert latency.gain(40.0, 100.0) == 60.0 and latency.ratio(40.0, 100.0) == 2.5
    assert latency.better(40.0, 50.0) and not latency.better(50.0, 40.0)
    throughput = Metric("tok_s", "tok/s", "B=16 aggregate decode tok/s")
    assert throughput.best([50.0, 40.0]) == 50.0 and throughput.ratio(300.0, 100.0) == 3.0
    assert throughput.best([None]) is None


def test_a_run_record_says_its_metric_and_an_old_one_reads_as_decode() -> None:
    latency = Metric("latency_ms", "ms", "p50 latency", higher_is_better=False)
    assert run_metric({"metric": latency.to_dict()}) == latency
    old = run_metric({"config": {"task": {"name": "decode_cpu", "timing": {"batch": 8}}}})
    assert (old.unit, old.higher_is_better) == ("tok/s", True)
    assert old.label == "B=8 aggregate decode tok/s"
    assert run_metric({}).label == "B=16 aggregate decode tok/s"
    # Old metrics held the value under the kind's own key only; new ones under "score" too.
    assert old.score({old.name: 12.5, f"baseline_{old.name}": 5.0}) == 12.5
    assert old.baseline_score({old.name: 12.5, f"baseline_{old.name}": 5.0}) == 5.0
    assert old.score({"score": 7.0, old.name: 7.0}) == 7.0 and old.score({}) is None


def test_the_decode_kind_owns_a_throughput_metric() -> None:
    metric = get_kind("decode").metric(OmegaConf.create({"timing": {"batch": 16}}))
    assert (metric.unit, metric.higher_is_better) == ("tok/s", True)
    assert metric.label == "B=16 aggregate decode tok/s"


def test_describe_says_the_score_in_the_kinds_unit() -> None:
    from judge.service import describe
    from judge.verdict import Evaluation, Verdict

    latency = Metric("latency_ms", "ms", "p50 latency", higher_is_better=False)
    metrics = {"score": 40.0, "baseline_score": 100.0, "x_baseline": 2.5}
    evaluation = Evaluation(1, "a", "w", "c" * 40, Verdict.PASS, metrics=metrics,
                            metric=latency.to_dict(), stages={"total": 3.0})  # fmt: skip
    assert describe(evaluation) == "PASS 40.0 ms = 2.50x baseline [3.0 s]"
    # A record without the kind's metric names no unit it cannot know.
    evaluation.metric = {}
    assert describe(evaluation) == "PASS [3.0 s]"
