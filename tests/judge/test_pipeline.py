"""The evaluation skeleton every kind runs on (``judge.pipeline.Run``): the verdict a kind's
stages raise, the judge-fault rule (a judge bug is ERROR ``judge``, never charged), the
redaction of a judge fault's message once hidden inputs were sent, the stage times and the
private log. Real files; a toy kind whose stages are given per test."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from judge.config import JudgeConfig
from judge.kinds.base import Metric
from judge.pipeline import SETUP_S, Run, baseline_scale, retry_limit
from judge.queue import Job
from judge.sandbox import InfrastructureFault, TimeoutAnswered
from judge.sandbox._streams import _Stream
from judge.verdict import Outcome, Verdict

HIDDEN = "hidden-prompt-4711"


class ToyKind:
    name = "toy"

    def metric(self, task):
        return Metric(name="ops", unit="op/s", label="toy ops")


class ToyRun(Run):
    def __init__(self, home, job, stages: Callable[[Run], None]) -> None:
        judge = OmegaConf.structured(JudgeConfig)  # the judge's own defaults (its timeouts)
        cfg = OmegaConf.create({"task": {"name": "toy"}, "judge": judge})
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


def _evaluate(tmp_path: Path, stages: Callable[[Run], None], run_class: type[ToyRun] = ToyRun):
    home = SimpleNamespace(evals=tmp_path / "evals")
    job = Job(id=7, arm="a", agent="w", label="", repo="", commit="c" * 40, attempts=2,
              enqueued_at=0.0)  # fmt: skip
    run = run_class(home, job, stages)
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


class TinyBoundRun(ToyRun):
    def wall_bound_s(self) -> float:
        return 0.2  # a tiny plan: the test must not wait for the judge's real bound


def test_a_wait_with_no_deadline_is_cut_by_the_watchdog_as_a_judge_fault(tmp_path):
    """The red team's hang: the judge blocked in a send with no deadline to a process that
    stopped reading. The watchdog hangs up every process the run holds (here a real stream on
    a socket pair, in the sandbox the default hang-up walks), which releases the send, and
    the evaluation is ERROR judge, uncharged, whatever that failure looked like."""
    judge_end, engine_end = socket.socketpair()
    released: list[str] = []

    def stages(run: Run) -> None:
        run.sandbox = SimpleNamespace(  # type: ignore[attr-defined]
            containers=[SimpleNamespace(processes=[_Stream(judge_end)])]
        )
        run.hidden_sent = True
        try:
            judge_end.sendall(HIDDEN.encode() * (16 << 20))  # never read: blocks, no deadline
        except OSError as exc:
            released.append(type(exc).__name__)
            raise

    try:
        run, evaluation, log = _evaluate(tmp_path, stages, TinyBoundRun)
    finally:
        judge_end.close()
        engine_end.close()
    assert released == ["BrokenPipeError"]  # the blocked thread was let go by the hang-up
    assert (evaluation.verdict, evaluation.reason) == (Verdict.ERROR, "judge")
    assert evaluation.detail == "judge fault: the evaluation overran its plan's limits"
    assert run.overdue and run.torn_down == [Verdict.ERROR]
    assert {"watchdog": "the evaluation overran its plan's limits"} in log["log"]


def test_the_watchdog_is_cancelled_with_the_evaluation(tmp_path):
    run, evaluation, _ = _evaluate(tmp_path, lambda run: None)
    assert evaluation.verdict is Verdict.PASS and not run.overdue
    assert run._watchdog is not None and not run._watchdog.is_alive()


def test_the_default_bound_covers_the_judges_timeouts(tmp_path):
    run, _, _ = _evaluate(tmp_path, lambda run: None)
    judge = JudgeConfig()
    limits = 2 * judge.build_timeout_s + 2 * baseline_scale(judge) * judge.load_timeout_s
    assert run.wall_bound_s() >= SETUP_S + limits


def test_a_bound_the_kind_cannot_compute_falls_back_and_fails_nothing(tmp_path):
    class BrokenBound(ToyRun):
        def wall_bound_s(self) -> float:
            raise KeyError("case:fake")  # e.g. a home without the set the bound looks up

    run, evaluation, log = _evaluate(tmp_path, lambda run: None, BrokenBound)
    assert evaluation.verdict is Verdict.PASS and run.watchdog_bound_s() == Run.wall_bound_s(run)
    assert any("case:fake" in entry.get("watchdog_bound", "") for entry in log["log"])
