"""The server kind: a request timeout is charged only if it holds against the baseline of the
moment (the decode kind's rule, :func:`judge.kinds.decode.evaluator.retry_limit`).

Without Docker: toy servers on a toy machine behind a toy load generator. A run's (simulated)
wall time is its work times the machine's load of the moment; a run over its ``timeout_s``
answers every request as the real load generator does on a deadline (``kind: timeout``). A
machine loaded since set-up slows candidate and baseline alike: unmodified code must not be
WRONG ``timeout`` for it, a server slow against the baseline of the moment still is, and the
baseline server gets a limit that load alone does not reach. The Docker test runs the stub.
"""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from judge import compose_judge_config
from judge.kinds.decode.evaluator import retry_limit
from judge.kinds.server.evaluator import Side, _ServerRun, baseline_scale
from judge.private import InputSet, Reference, setup
from judge.queue import JudgeQueue
from judge.sandbox import InfrastructureFault, TimeoutAnswered, fault_reason
from judge.service import run_until_done
from judge.verdict import Outcome, Verdict
from tests.judge.test_server_docker import git_commit, make_task

SETUP_S = 1.0  # the baseline's set-up wall time for the toy set
FACTOR, FLOOR, BASE_FACTOR = 6.0, 0.5, 24.0
FIRST_LIMIT = FACTOR * SETUP_S + FLOOR


@dataclass
class Machine:
    load: float = 1.0


@dataclass
class ToyBox:
    """A container: only whether it is frozen matters here."""

    frozen_now: bool = False

    @contextmanager
    def frozen(self):
        self.frozen_now = True
        try:
            yield
        finally:
            self.frozen_now = False


@dataclass
class ToyServer:
    alive: bool = True

    def running(self) -> bool:
        return self.alive

    output_tail: str = ""


@dataclass
class ToyLoadGen:
    """A server's load generator: each run takes ``SETUP_S`` x load / speed, plus
    ``first_extra_s`` on its first run only; ``hang``: nothing ever answers."""

    machine: Machine
    other: ToyBox | None = None  # the other side's box: must be frozen while this one runs
    speed: float = 1.0
    first_extra_s: float = 0.0
    hang: bool = False
    calls: list[tuple[str, float, bool]] = field(default_factory=list)

    def call(self, command: dict, timeout: float) -> dict:
        op, limit = command["op"], float(command["timeout_s"])
        assert timeout > limit  # the sidecar's own wait outlasts the run's deadline
        self.calls.append((op, limit, bool(self.other and self.other.frozen_now)))
        wall = SETUP_S * self.machine.load / self.speed + self.first_extra_s
        self.first_extra_s = 0.0
        if self.hang:
            wall = float("inf")
        n = len(command["requests"])
        if wall > limit:
            failed = {"ok": False, "kind": "timeout", "detail": "no complete answer in time"}
            return {"ok": True, "wall_s": limit, "results": [failed] * n}
        if op == "score":
            rows = [{"ok": True, "logprobs": [-0.1] * 4, "total_s": wall}] * n
        else:
            one = {"ok": True, "ids": [1, 2], "ttft_s": 0.1, "itl_s": [0.1], "total_s": wall}
            rows = [one] * n
        return {"ok": True, "wall_s": wall, "results": rows}

    def close(self) -> None:
        pass


def toy_run(
    machine: Machine, confirm: bool = True, **candidate
) -> tuple[_ServerRun, ToyLoadGen, ToyLoadGen, InputSet]:
    """A server evaluation with only what a run of one stored set needs."""
    run = object.__new__(_ServerRun)
    s = InputSet("case:toy", [[1, 2, 3]] * 2, 2)
    ref = Reference(np.ones((2, 2), dtype=np.int64), None, 0.0, SETUP_S)
    run.home = SimpleNamespace(references={s.name: ref}, inputs={s.name: s})
    run.judge = SimpleNamespace(
        timeout_factor=FACTOR,
        timeout_floor_s=FLOOR,
        baseline_timeout_factor=BASE_FACTOR,
        confirm_timing_failures=confirm,
    )
    run.server_cfg = OmegaConf.create({"model": "toy", "teacher_forcing": "echo"})
    run.source, run.log, run.hidden_sent = "token_ids", [], False
    cand_box, base_box = ToyBox(), ToyBox()
    cand = ToyLoadGen(machine, other=base_box, **candidate)
    base = ToyLoadGen(machine, other=cand_box)
    run.cand = Side("candidate", cand_box, ToyServer(), cand, "/v1/completions")
    run.base = Side("baseline", base_box, ToyServer(), base, "/v1/completions")
    return run, cand, base, s


def test_the_retry_limit_grows_with_the_baseline_of_the_moment():
    # The decode kind's function, not a copy: never below the first limit.
    assert retry_limit(FIRST_LIMIT, 3.0, FACTOR, FLOOR) == FACTOR * 3.0 + FLOOR
    assert retry_limit(FIRST_LIMIT, 0.1, FACTOR, FLOOR) == FIRST_LIMIT
    judge = SimpleNamespace(timeout_factor=FACTOR, baseline_timeout_factor=BASE_FACTOR)
    assert baseline_scale(judge) == 4.0
    judge.baseline_timeout_factor = 1.0  # never below the candidate's own limit
    assert baseline_scale(judge) == 1.0


def test_unmodified_code_on_a_machine_loaded_since_setup_is_not_wrong_timeout():
    machine = Machine(load=FIRST_LIMIT / SETUP_S + 2)  # the candidate misses the set-up limit
    run, cand, base, s = toy_run(machine)
    with pytest.raises(InfrastructureFault, match="machine too slow to judge now") as fault:
        run.load(run.cand, s, 2, "case toy")
    assert "case toy timed out" in str(fault.value)
    assert fault_reason(fault.value) == "infrastructure"  # the limit grew: the machine's fault
    # First try, the baseline now (the candidate frozen), the retry on the same server.
    assert [(op, frozen) for op, _, frozen in cand.calls] == [("run", False), ("run", False)]
    assert [(op, frozen) for op, _, frozen in base.calls] == [("run", True)]
    first, retry = cand.calls[0][1], cand.calls[1][1]
    assert first == FIRST_LIMIT
    assert retry == retry_limit(FIRST_LIMIT, SETUP_S * machine.load, FACTOR, FLOOR) > first
    assert base.calls[0][1] == FIRST_LIMIT * 4  # the baseline's own scaled limit
    assert run.log[-1]["timeout_retry"] == "case toy"


def test_a_server_slow_against_the_baseline_now_is_still_wrong_timeout():
    run, cand, base, s = toy_run(Machine(load=1.0), speed=SETUP_S / (FIRST_LIMIT + 1))
    with pytest.raises(Outcome) as wrong:
        run.load(run.cand, s, 2, "case toy")
    assert (wrong.value.verdict, wrong.value.reason) == (Verdict.WRONG, "timeout")
    detail = wrong.value.detail
    assert detail.startswith("case toy, retried: 2 of 2 requests failed")
    first = (
        f"first try: case toy: 2 of 2 requests failed: no complete answer within {FIRST_LIMIT:.1f}"
    )
    assert first in detail
    assert f"{FACTOR:g}x the baseline's {SETUP_S:.3f} s on the same requests now" in detail
    assert len(cand.calls) == 2 and len(base.calls) == 1


def test_a_hanging_server_stays_wrong_timeout_and_a_slow_first_request_does_not():
    run, cand, _, s = toy_run(Machine(), hang=True)
    with pytest.raises(Outcome) as wrong:
        run.load(run.cand, s, 2, "case toy")
    assert wrong.value.reason == "timeout" and len(cand.calls) == 2
    run, cand, _, s = toy_run(Machine(), first_extra_s=FIRST_LIMIT * 10)
    with pytest.raises(TimeoutAnswered, match="answered on a retry") as fault:
        run.load(run.cand, s, 2, "case toy")
    assert len(cand.calls) == 2
    # The baseline now was not slow: re-queued, and charged if every attempt ends so.
    assert fault_reason(fault.value) == "timeout_answered"


def test_without_confirmation_the_first_timeout_is_charged_and_the_baseline_not_asked():
    run, cand, base, s = toy_run(Machine(load=20.0), confirm=False)
    with pytest.raises(Outcome) as wrong:
        run.load(run.cand, s, 2, "case toy")
    assert wrong.value.reason == "timeout" and "first try" not in wrong.value.detail
    assert len(cand.calls) == 1 and base.calls == []


def test_the_baseline_server_gets_its_scaled_limit_and_load_alone_does_not_reach_it():
    machine = Machine(load=FIRST_LIMIT / SETUP_S + 2)  # over the candidate's limit, not 4x it
    run, _, base, s = toy_run(machine)
    got = run.base_load(s, 2, "timing run 1")
    assert got.wall_s == SETUP_S * machine.load
    assert base.calls == [("run", FIRST_LIMIT * 4, True)]
    machine.load = FIRST_LIMIT * 4 / SETUP_S + 1
    with pytest.raises(InfrastructureFault, match="baseline server failed a request"):
        run.base_load(s, 2, "timing run 1")


def test_a_teacher_forced_scoring_timeout_is_confirmed_the_same_way():
    machine = Machine(load=FIRST_LIMIT / SETUP_S + 2)
    run, cand, base, s = toy_run(machine)
    ref = np.ones((2, 2), dtype=np.int64)
    with pytest.raises(InfrastructureFault, match="machine too slow"):
        run.score(run.cand, s, ref, "case toy (likelihood)")
    assert [(op, frozen) for op, _, frozen in base.calls] == [("score", True)]
    assert [op for op, _, _ in cand.calls] == ["score", "score"]
    run, cand, _, s = toy_run(Machine(), hang=True)
    with pytest.raises(Outcome) as wrong:
        run.score(run.cand, s, ref, "case toy (likelihood)")
    assert wrong.value.reason == "timeout" and "first try" in wrong.value.detail


# -- the stub server on the real Docker engine ------------------------------------------------

# Sleeps before answering the headers of the evaluation's first completion only ("first"), or of
# every one ("always"); the sleep is outside the serial lock, so the retry is served.
SLOW = """
_FIRST = [True]


def _slow(always):
    try:
        _FIRST.pop()
    except IndexError:
        if not always:
            return
    time.sleep(120)

"""


def slow_server(text: str, always: bool) -> str:
    text = text.replace("\ndef main():", SLOW + "\ndef main():", 1)
    return text.replace(
        "        def do_POST(self):\n",
        f"        def do_POST(self):\n            _slow({always})\n",
        1,
    )


@pytest.mark.docker
def test_a_stub_slow_on_its_first_request_in_every_attempt_and_a_hanging_one_are_wrong(
    tmp_path, judge_private_dir, base_image
):
    """The first completion of each evaluation waits: re-queued once (ERROR
    ``timeout_answered``: the baseline was not slow), then charged WRONG ``timeout`` when the
    second attempt ends the same way; a server that always hangs is WRONG at once."""
    root = make_task(tmp_path / "task", name="serve_stub_timeouts")
    overrides = [
        f"task={root}",
        f"judge.private_dir={judge_private_dir}",
        "judge.timeout_floor_s=3",
        "judge.max_attempts=2",
    ]
    cfg = compose_judge_config(overrides)
    home = setup(cfg)
    repo = tmp_path / "cand"
    shutil.copytree(root / "template", repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    server = repo / "stub" / "server.py"
    template = server.read_text()
    server.write_text(slow_server(template, always=False))
    first = git_commit(repo, "the first completion waits")
    server.write_text(slow_server(template, always=True))
    hang = git_commit(repo, "every completion hangs")
    queue = JudgeQueue(home.queue_path)
    jobs = [queue.enqueue(arm="a", agent="w", repo=str(repo), commit=c) for c in (first, hang)]
    slow, hanging = run_until_done(cfg, home, jobs)
    assert (slow.verdict, slow.reason) == (Verdict.WRONG, "timeout"), slow.detail
    assert "in each of its 2 attempt(s)" in slow.detail and "answered on a retry" in slow.detail
    assert queue.requeue_reasons(jobs[0]) == ["timeout_answered"]
    assert queue.requeue_reasons(jobs[1]) == []
    assert (hanging.verdict, hanging.reason) == (Verdict.WRONG, "timeout"), hanging.detail
    assert "first try" in hanging.detail and "the baseline's" in hanging.detail


def test_the_watchdog_bound_covers_every_limit_of_the_plan(tmp_path):
    """The skeleton's watchdog (``Run.wall_bound_s``) must never cut a sound server evaluation:
    its bound is at least the sum of the plan's limits, every run at the deadline its load
    generator is given (the baseline's scaled), both servers' readiness and both builds."""
    from judge.b1 import B1Plan, lone_shapes
    from judge.kinds import get_kind
    from judge.kinds.server.evaluator import LOADGEN_SLACK_S, ServerEvaluator

    cfg = compose_judge_config(["task=serve_cpu"])
    task, judge = cfg.task, cfg.judge
    sets = {
        "shape:b1": InputSet("shape:b1", [[1, 2, 3]], 16),
        "shape:timing": InputSet("shape:timing", [[1, 2, 3]] * 4, 16),
    }
    for case in task.cases:
        for prefix in ("case", "confirm"):
            name = f"{prefix}:{case.name}"
            sets[name] = InputSet(name, [[1, 2, 3]] * int(case.batch), int(case.new_tokens))
    refs = {
        name: Reference(np.ones((s.batch, s.new_tokens), dtype=np.int64), None, 0.1, 0.5 * s.batch)
        for name, s in sets.items()
    }
    home = SimpleNamespace(references=refs, inputs=sets, evals=tmp_path)
    evaluator = ServerEvaluator(cfg, home, get_kind("server"))  # type: ignore[arg-type]
    run = _ServerRun(evaluator, SimpleNamespace(id=1, attempts=1))  # type: ignore[arg-type]
    scale = baseline_scale(judge)

    def pair(s: InputSet) -> float:  # the candidate's run and the baseline's, each called
        return (1 + scale) * run.run_timeout(s) + 2 * LOADGEN_SLACK_S

    runs = [pair(sets[f"{p}:{c.name}"]) for c in task.cases for p in ("case", "confirm")]
    plan = B1Plan.of(task.b1, float(judge.b1_alpha))
    level, hi = int(task.timing.batch), lone_shapes(task)[1][1]
    burst = InputSet("burst", [[1]] * level, int(task.alternating.new_tokens))
    unit = plan.per_unit * pair(InputSet("lone", [[1]], hi)) + pair(burst)
    runs += [unit] * plan.max_units
    for c in run.concurrencies():
        timed = InputSet("timing", [[1]] * c, int(task.timing.new_tokens))
        runs += [pair(timed)] * int(task.timing.runs)
    ready = 2 * float(task.server.ready_timeout_s)
    assert run.wall_bound_s() >= sum(runs) + ready + 2 * judge.build_timeout_s


def test_an_overrun_hangs_up_both_servers_and_load_generators(tmp_path):
    """The watchdog's hang-up reaches what a server evaluation holds beyond its sandbox's
    engines: a call blocked on a load generator (or a server's drain) fails at once."""
    hung: list[str] = []
    run, _, _, _ = toy_run(Machine())
    run.sandbox = None
    for side in (run.cand, run.base):
        assert side is not None
        side.server = SimpleNamespace(hang_up=lambda s=side: hung.append(f"{s.label} server"))
        side.loadgen = SimpleNamespace(hang_up=lambda s=side: hung.append(f"{s.label} loadgen"))
    run.overrun()
    assert run.overdue and sorted(hung) == [
        "baseline loadgen",
        "baseline server",
        "candidate loadgen",
        "candidate server",
    ]
