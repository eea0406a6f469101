"""A request timeout is charged only if it holds against the baseline of the moment, without
Docker.

Toy engines on a toy machine: every request's (simulated) time is its work times the machine's
load of the moment, and a request over its limit fails as the real engine process does
(``EngineFailure("timeout")``). A machine loaded since set-up slows the candidate and the
baseline alike: the unmodified baseline must not be convicted for it (the bug: "no reply to
decode within 17.2 s" on a B=16 case for code that passed minutes before), a candidate slow
against the baseline of the moment still is, and the judge's own baseline gets a limit that
load alone does not reach.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from judge import compose_judge_config
from judge.kinds.decode import DecodeKind
from judge.kinds.decode.evaluator import Evaluator, _Run, retry_limit
from judge.protocol import EngineFailure, Reply
from judge.sandbox import InfrastructureFault, TimeoutAnswered, fault_reason
from judge.verdict import Outcome, Verdict
from tests.judge.test_timing_rules import BASE_S, toy_home, toy_tokens

FLOOR_S = 1e-3  # the toy's floor: its requests take milliseconds


@dataclass
class Machine:
    """How much slower than at set-up every engine runs now; ``spike_s`` is added once, to the
    first decode any engine on the machine serves (a burst of load, then gone)."""

    load: float = 1.0
    spike_s: float = 0.0


@dataclass
class TimedToy:
    """Deterministic tokens; each request takes its work x the machine's load / ``speed``, and
    one over its limit times out. ``hang``: decode never answers."""

    machine: Machine
    label: str = "toy"
    speed: float = 1.0
    hang: bool = False
    calls: list[tuple[str, float]] = field(default_factory=list)
    prompts: list[list[int]] = field(default_factory=list)
    seen: list[list[list[int]]] = field(default_factory=list)
    stderr_tail: str = ""
    closed: bool = False

    def last_words(self, wait_s: float = 2.0) -> str:
        return self.stderr_tail

    def request(
        self, payload: dict, timeout: float, vocab: int | None = None
    ) -> tuple[Reply, float]:
        op = payload["op"]
        self.calls.append((op, timeout))
        per_token = BASE_S * self.machine.load / self.speed
        reply, seconds = Reply(op, {"ok": True}), 1e-5
        if op == "prefill":
            self.prompts = payload["prompts"]
            self.seen.append(self.prompts)
            seconds = sum(len(p) for p in self.prompts) * per_token
        elif op == "decode":
            steps = int(payload["steps"])
            seconds = len(self.prompts) * steps * per_token + self.machine.spike_s
            self.machine.spike_s = 0.0
            if self.hang:
                seconds = float("inf")
            tokens = toy_tokens(self.prompts, steps)
            reply = Reply(op, {"ok": True}, tokens=tokens)
        elif op == "reset":
            self.prompts = []
        if seconds > timeout:
            raise EngineFailure("timeout", f"no reply to {op} within {timeout:.1f} s")
        return reply, seconds

    def close(self) -> None:
        self.closed = True


@dataclass
class TimedBox:
    """A container whose ``engine()`` starts a :class:`TimedToy` of one kind."""

    machine: Machine
    kind: dict = field(default_factory=dict)
    paused: bool = False
    started: list[TimedToy] = field(default_factory=list)

    def engine(self, argv: list[str], label: str) -> TimedToy:
        engine = TimedToy(self.machine, label, **self.kind)
        self.started.append(engine)
        return engine

    @contextmanager
    def frozen(self):
        self.paused = True
        try:
            yield
        finally:
            self.paused = False

    def oom_killed(self) -> bool:
        return False


@pytest.fixture(scope="module")
def cfg():
    return compose_judge_config(["task=decode_cpu", f"judge.timeout_floor_s={FLOOR_S}"])


def make_run(cfg, tmp_path, machine: Machine, **kind) -> tuple[_Run, TimedBox, TimedBox]:
    evaluator = Evaluator(cfg, toy_home(cfg, tmp_path), DecodeKind())
    run = _Run(evaluator, SimpleNamespace(id=1, attempts=1))
    run.cand, run.base = TimedBox(machine, kind), TimedBox(machine)
    run.base_engine = run.base.engine([], "baseline")
    return run, run.cand, run.base


def judge_case(run: _Run, box: TimedBox, case: str = "b16a") -> None:
    run.correctness(box.engine([], "batched"), only=[case])


def test_the_retry_limit_follows_the_baseline_now_and_never_drops_below_the_first() -> None:
    assert retry_limit(17.2, 2.0, 6.0, 5.0) == pytest.approx(17.2)
    assert retry_limit(17.2, 4.0, 6.0, 5.0) == pytest.approx(29.0)
    assert retry_limit(5.6, 0.0, 6.0, 5.0) == pytest.approx(5.6)


def test_the_unmodified_baseline_on_a_machine_loaded_since_set_up_is_not_convicted(
    cfg, tmp_path
) -> None:
    # Ten times slower than at set-up: over the 6x set-up limit, under 6x the baseline now.
    run, cand, base = make_run(cfg, tmp_path, Machine(load=10.0))
    with pytest.raises(InfrastructureFault, match="machine too slow to judge now") as fault:
        judge_case(run, cand)
    # The baseline now raised the limit: the machine's fault, never charged however often.
    assert fault_reason(fault.value) == "infrastructure"
    first, retry = cand.started
    assert first.closed and retry.closed
    # Every phase is 10x slower: the prefill is the request that timed out, and was retried.
    assert [op for op, _ in first.calls] == ["prefill"]
    assert [op for op, _ in retry.calls] == ["load", "prefill"]
    # The baseline ran the very request that timed out, now.
    assert base.started[0].seen == [run.input_set("case:b16a").prompts]
    assert retry.calls[1][1] > 5 * first.calls[0][1]


def test_a_burst_of_load_on_the_first_decode_is_not_convicted(cfg, tmp_path) -> None:
    run, cand, _ = make_run(cfg, tmp_path, Machine(spike_s=60.0))
    with pytest.raises(TimeoutAnswered, match="answered in a fresh process") as fault:
        judge_case(run, cand)
    # The baseline now was not slow: re-queued once, charged if it happens in every attempt
    # (judge.service.charge_repeated_timeouts), as a hang on purpose would.
    assert fault_reason(fault.value) == "timeout_answered"
    assert "slow only on its first try" in str(fault.value)
    first, retry = cand.started
    assert [op for op, _ in first.calls] == ["prefill", "decode"]
    assert [op for op, _ in retry.calls] == ["load", "prefill", "decode"]


@pytest.mark.parametrize(("load", "kind"), [(10.0, {"speed": 0.01}), (1.0, {"hang": True})])
def test_a_candidate_slow_against_the_baseline_of_the_moment_is_wrong_timeout(
    cfg, tmp_path, load, kind
) -> None:
    run, cand, _ = make_run(cfg, tmp_path, Machine(load=load), **kind)
    with pytest.raises(Outcome) as caught:
        judge_case(run, cand)
    assert (caught.value.verdict, caught.value.reason) == (Verdict.WRONG, "timeout")
    detail = caught.value.detail
    assert "retried in a fresh process" in detail and "first try: no reply to" in detail
    assert "on the same request now" in detail
    assert len(cand.started) == 2


def test_without_confirmation_the_first_timeout_is_charged(cfg, tmp_path) -> None:
    run, cand, base = make_run(cfg, tmp_path, Machine(load=10.0))
    run.judge = SimpleNamespace(**{**dict(run.judge), "confirm_timing_failures": False})
    with pytest.raises(Outcome) as caught:
        judge_case(run, cand)
    assert caught.value.reason == "timeout" and len(cand.started) == 1
    assert base.started[0].calls == []


def test_the_baselines_own_limit_is_four_times_the_candidates(cfg, tmp_path) -> None:
    run, cand, base = make_run(cfg, tmp_path, Machine())
    run.correctness(cand.engine([], "batched"), only=["b2"])
    cand_limits = dict(cand.started[0].calls)
    base_limits = dict(base.started[0].calls)
    scale = cfg.judge.baseline_timeout_factor / cfg.judge.timeout_factor
    assert scale == 4.0
    for op in ("prefill", "decode", "reset"):
        assert base_limits[op] == pytest.approx(scale * cand_limits[op])
    # Twenty times slower than at set-up: the candidate's limit is crossed, the baseline's not.
    slow, cand, base = make_run(cfg, tmp_path, Machine(load=20.0))
    with pytest.raises(InfrastructureFault, match="machine too slow"):
        judge_case(slow, cand, "b2")


def test_a_timeout_before_the_staged_baseline_starts_starts_it(cfg, tmp_path) -> None:
    machine = Machine(load=10.0)
    run, cand, base = make_run(cfg, tmp_path, machine)
    run.base_engine = None  # the staged pipeline's first set runs before the baseline exists
    run.evaluator.warm.container = lambda _cand: base  # type: ignore[method-assign]
    with pytest.raises(InfrastructureFault, match="machine too slow"):
        run.run_set(cand.engine([], "batched"), "case:b2", "case b2")
    [started] = base.started[1:]
    assert [op for op, _ in started.calls] == ["load", "prefill", "reset"]
    assert run.warm_used and run.base_engine is started
