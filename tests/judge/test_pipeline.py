"""The evaluation skeleton every kind runs on (``judge.pipeline.Run``): the verdict a kind's
stages raise, the judge-fault rule (a judge bug is ERROR ``judge``, never charged), the
redaction of a judge fault's message once hidden inputs were sent, the stage times and the
private log. Real files; a toy kind whose stages are given per test."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from judge.kinds.base import Metric
from judge.pipeline import Run, baseline_scale, retry_limit
from judge.queue import Job
from judge.sandbox import InfrastructureFault, TimeoutAnswered
from judge.verdict import Outcome, Verdict

HIDDEN = "hidden-prompt-4711"


class ToyKind:
    name = "toy"

    def metric(self, task):
        return Metric(name="ops", unit="op/s", label="toy ops")


class ToyRun(Run):
    def __init__(self, home, job, stages: Callable[[Run], None]) -> None:
        cfg = OmegaConf.create({"task": {"name": "toy"}, "judge": {}})
        super().__init__(ToyKind(), cfg, home, job)  # type: ignore[arg-type]
        self.stages_of = stages
        self.torn_down: list[Verdict] = []

    def pipeline(self) -> None:
        with self.stage("work"):
            self.stages_of(self)

    def teardown(self, evaluation) -> None:
        self.torn_down.append(evaluation.verdict)

    def account(self, total_s: float) -> None:
        self.metrics["accounted"] = total_s >= 0


def _evaluate(tmp_path: Path, stages: Callable[[Run], None]):
    home = SimpleNamespace(evals=tmp_path / "evals")
    job = Job(id=7, arm="a", agent="w", label="", repo="", commit="c" * 40, attempts=2,
              enqueued_at=0.0)  # fmt: skip
    run = ToyRun(home, job, stages)
    evaluation = run.execute()
    log = json.loads((tmp_path / "evals" / "7-2" / "log.json").read_text())
    return run, evaluation, log


def test_a_pass_has_the_kinds_metric_its_stages_and_its_log(tmp_path):
    def stages(run: Run) -> None:
        run.metrics["score"] = 3.0

    run, evaluation, log = _evaluate(tmp_path, stages)
    assert evaluation.verdict is Verdict.PASS and evaluation.metric["name"] == "ops"
    assert {"work", "teardown", "total"} <= set(evaluation.stages)
    assert evaluation.metrics == {"score": 3.0, "accounted": True}
    assert run.torn_down == [Verdict.PASS]
    assert log["evaluation"]["verdict"] == "PASS" and log["log"][0] == {"eval_seed": run.eval_seed}


def test_an_outcome_is_the_verdict_with_its_flags(tmp_path):
    def stages(run: Run) -> None:
        raise Outcome(Verdict.WRONG, "mismatch", "case a: 1 of 2 rows differ", near_tie=True)

    run, evaluation, _ = _evaluate(tmp_path, stages)
    assert (evaluation.verdict, evaluation.reason) == (Verdict.WRONG, "mismatch")
    assert evaluation.detail == "case a: 1 of 2 rows differ" and evaluation.flags["near_tie"]
    assert run.torn_down == [Verdict.WRONG]


@pytest.mark.parametrize(
    ("fault", "reason"),
    [(InfrastructureFault("box gone"), "infrastructure"),
     (TimeoutAnswered("answered"), "timeout_answered")],
)  # fmt: skip
def test_an_infrastructure_fault_is_an_uncharged_error(tmp_path, fault, reason):
    fault.private = f"the load generator said {HIDDEN}"  # type: ignore[attr-defined]

    def stages(run: Run) -> None:
        raise fault

    run, evaluation, log = _evaluate(tmp_path, stages)
    assert (evaluation.verdict, evaluation.reason) == (Verdict.ERROR, reason)
    assert HIDDEN not in evaluation.detail  # its private words go to the private log only
    assert {"fault": str(fault), "private": fault.private} in log["log"]
    assert run.torn_down == [Verdict.ERROR]


@pytest.mark.parametrize("sent", [False, True])
def test_a_judge_bug_is_error_judge_and_quiet_once_hidden_inputs_were_sent(tmp_path, sent):
    def stages(run: Run) -> None:
        run.hidden_sent = sent
        raise KeyError(HIDDEN)

    _, evaluation, log = _evaluate(tmp_path, stages)
    assert (evaluation.verdict, evaluation.reason) == (Verdict.ERROR, "judge")
    assert evaluation.detail.startswith("judge fault: KeyError")
    assert (HIDDEN in evaluation.detail) is (not sent)
    assert any(HIDDEN in entry.get("judge_exception", "") for entry in log["log"])


def test_the_shared_limits():
    judge = SimpleNamespace(baseline_timeout_factor=24.0, timeout_factor=6.0)
    assert baseline_scale(judge) == 4.0
    assert baseline_scale(SimpleNamespace(baseline_timeout_factor=1.0, timeout_factor=6.0)) == 1
    assert retry_limit(10.0, 1.0, 6.0, 5.0) == 11.0 and retry_limit(20.0, 1.0, 6.0, 5.0) == 20.0
