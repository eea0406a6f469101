"""The kernel kind's evaluation: checkout, integrity, sandbox, build, load, then calls of the
candidate's function and the baseline's, in pairs on the same inputs drawn for this
evaluation alone, each timed on the judge's clock and every output checked.

Each side runs :mod:`judge.kinds.kernel.harness` (the judge's program, passed as ``-c``) in a
container of its own; the other side's container is frozen while one side's call is timed.
Inputs are drawn on the host by the task's generator from a seed new to every call, sent
masked and unmasked inside the timed call (see the harness), and every result comes back to
the judge, which checks it (docs/kinds-kernel.md):

* ``WRONG (not_array)``: the result is not a ``numpy.ndarray`` (a lazy object, a generator,
  a subclass computing on access);
* ``WRONG (aliased)``: it shares memory with an argument or with the previous call's result;
* ``WRONG (input_mutated)``: an argument's bytes changed;
* ``WRONG (late)``: the result's bytes changed after the digest read inside the timed call
  (a thread still writing when the clock stopped);
* ``WRONG (mismatch)``: dtype, shape or values differ from the baseline's on the same inputs
  (equal bytes, or within the task's ``rtol``/``atol``);
* ``WRONG (timeout)``, ``WRONG (crash)``, ``WRONG (protocol)``, ``WRONG (build)``.

A PASS scores the median of the candidate's timed calls (``call_ms``, lower is better) against
the baseline's median in the same evaluation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import statistics
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from judge.evaluation import checked_tree
from judge.kinds.base import Metric
from judge.kinds.kernel.config import KernelConfig, KernelTaskError, draw_inputs, kernel_config
from judge.kinds.kernel.harness import CHUNK, fold, keystream
from judge.private import JudgeHome, derive_seed, sandbox_runtime
from judge.protocol import EngineFailure
from judge.queue import Job
from judge.sandbox import (
    EngineProcess,
    InfrastructureFault,
    Sandbox,
    SandboxContainer,
    fault_reason,
)
from judge.verdict import Evaluation, Outcome, Verdict

HARNESS = Path(__file__).with_name("harness.py")
# How long a baseline call may take before the judge gives up on its own side (ERROR).
BASELINE_CALL_S = 300.0


def masked(arrays: list[np.ndarray], key: int) -> list[dict[str, Any]]:
    """The ``put`` payload of ``arrays``: their bytes XOR the keystream of ``key``."""
    stream = keystream(key, sum(a.nbytes for a in arrays))  # the harness's own stream
    out, at = [], 0
    for a in arrays:
        raw = np.frombuffer(np.ascontiguousarray(a).tobytes(), dtype=np.uint8)
        data = np.bitwise_xor(raw, stream[at : at + raw.size])
        at += raw.size
        out.append(
            {
                "dtype": a.dtype.str,
                "shape": list(a.shape),
                "data": base64.b64encode(data.tobytes()).decode("ascii"),
            }
        )
    return out


def digest(array: np.ndarray) -> str:
    """sha256 of an array's C-order bytes (the harness's digest, computed by the judge)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# The largest result the judge reads back (a task's result is the judge's memory too).
MAX_RESULT_BYTES = 256 << 20


def result_layout(got: dict[str, Any]) -> tuple[np.dtype, list[int], int]:
    """The dtype, shape and size in bytes a ``get`` reply says the result has.

    Raises:
        EngineFailure: ``protocol`` for anything but a numeric dtype and a shape that make
            ``nbytes`` (at most :data:`MAX_RESULT_BYTES`).
    """
    try:
        dtype = np.dtype(str(got["dtype"]))
        shape = [int(n) for n in got["shape"]]
        nbytes = int(got["nbytes"])
        if (
            dtype.kind not in "biufc"
            or any(n < 0 for n in shape)
            or dtype.itemsize * int(np.prod(shape)) != nbytes
            or nbytes > MAX_RESULT_BYTES
        ):
            raise ValueError("layout")
    except (KeyError, TypeError, ValueError) as exc:
        raise EngineFailure(
            "protocol",
            "reply to get: dtype, shape and nbytes must describe a numeric array of at most"
            f" {MAX_RESULT_BYTES >> 20} MiB",
        ) from exc
    return dtype, shape, nbytes


def chunk_bytes(reply: dict[str, Any], expected: int) -> bytes:
    """The bytes of one ``read`` reply, which must be ``expected`` long.

    Raises:
        EngineFailure: ``protocol`` for anything but base64 of that many bytes.
    """
    try:
        raw = base64.b64decode(str(reply["data"]), validate=True)
    except (KeyError, ValueError) as exc:
        raise EngineFailure("protocol", "reply to read: data must be base64") from exc
    if len(raw) != expected:
        raise EngineFailure("protocol", f"reply to read: {len(raw)} bytes, not {expected}")
    return raw


def compare(out: np.ndarray, ref: np.ndarray, config: KernelConfig) -> str | None:
    """Why ``out`` is not the baseline's ``ref`` (judge-made words), or None."""
    if out.dtype != ref.dtype or out.shape != ref.shape:
        return (
            f"result is {out.dtype}{list(out.shape)}, the baseline's {ref.dtype}{list(ref.shape)}"
        )
    if config.exact:
        if out.tobytes() == ref.tobytes():
            return None
        return f"{int(np.count_nonzero(out != ref))} of {out.size} values differ (exact)"
    close = np.isclose(out, ref, rtol=config.rtol, atol=config.atol, equal_nan=True)
    if bool(close.all()):
        return None
    return (
        f"{int(np.count_nonzero(~close))} of {out.size} values differ beyond"
        f" rtol={config.rtol:g}, atol={config.atol:g}"
    )


class KernelEvaluator:
    """Scores jobs of one kernel task against ``home``'s baseline; one evaluation at a time."""

    def __init__(self, cfg: DictConfig, home: JudgeHome, metric: Metric) -> None:
        self.cfg = cfg
        self.home = home
        self.metric = metric

    def evaluate(self, job: Job) -> Evaluation:
        return _Run(self, job).execute()


class _Side:
    """One harness process and its container."""

    def __init__(self, name: str, box: SandboxContainer, proc: EngineProcess) -> None:
        self.name = name
        self.box = box
        self.proc = proc
        self.times: list[float] = []
        self.last_call: dict[str, Any] = {}


class _Run:
    """One evaluation (the attributes :func:`judge.evaluation.checked_tree` reads)."""

    def __init__(self, evaluator: KernelEvaluator, job: Job) -> None:
        self.evaluator = evaluator
        self.cfg = evaluator.cfg
        self.task = evaluator.cfg.task
        self.judge = evaluator.cfg.judge
        self.home = evaluator.home
        self.job = job
        self.workdir = self.home.evals / f"{job.id}-{job.attempts}"
        self.stages: dict[str, float] = {}
        self.metrics: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        self.hidden_sent = False
        self.sandbox: Sandbox | None = None
        # Every call's inputs come from this seed, new to every evaluation: no input timed here
        # was ever seen by any process before, so a cache of results never answers.
        self.eval_seed = secrets.randbits(62)
        self.log.append({"eval_seed": self.eval_seed})

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = round(self.stages.get(name, 0.0) + time.perf_counter() - start, 4)

    def execute(self) -> Evaluation:
        evaluation = Evaluation(
            job_id=self.job.id,
            arm=self.job.arm,
            agent=self.job.agent,
            commit=self.job.commit,
            verdict=Verdict.PASS,
            label=self.job.label,
            attempts=self.job.attempts,
            enqueued_at=self.job.enqueued_at,
            started_at=time.time(),
            metric=self.evaluator.metric.to_dict(),
        )
        start = time.perf_counter()
        try:
            self.pipeline()
        except Outcome as outcome:
            evaluation.verdict, evaluation.reason = outcome.verdict, outcome.reason
            evaluation.detail = outcome.detail
        except InfrastructureFault as fault:
            evaluation.verdict, evaluation.reason = Verdict.ERROR, fault_reason(fault)
            evaluation.detail = str(fault)
        except Exception as exc:  # a judge bug (or a broken task) is never charged
            self.log.append({"judge_exception": traceback.format_exc()})
            evaluation.verdict, evaluation.reason = Verdict.ERROR, "judge"
            evaluation.detail = f"judge fault: {type(exc).__name__}"
            if not self.hidden_sent:  # after that, its message could quote a hidden input
                evaluation.detail += f": {exc}"
        finally:
            with self.stage("teardown"):
                if self.sandbox is not None:
                    for box in self.sandbox.containers:
                        for process in box.processes:
                            self.log.append({"stderr": process.label, "tail": process.stderr_tail})
                    self.sandbox.close()
        self.stages["total"] = round(time.perf_counter() - start, 4)
        evaluation.metrics, evaluation.stages = self.metrics, self.stages
        evaluation.finished_at = time.time()
        self.workdir.mkdir(parents=True, exist_ok=True)
        record = {"evaluation": evaluation.to_dict(), "log": self.log}
        (self.workdir / "log.json").write_text(json.dumps(record, indent=1, default=str))
        return evaluation

    # -- stages --------------------------------------------------------------------------

    def pipeline(self) -> None:
        try:
            config = kernel_config(self.task)
        except KernelTaskError as exc:
            raise InfrastructureFault(str(exc)) from None
        tree = checked_tree(self)
        with self.stage("sandbox"):
            self.sandbox = Sandbox(
                self.judge.sandbox,
                self.judge.device,
                owner=self.home.owner,
                tag=f"{self.home.owner}-{self.job.id}-{secrets.token_hex(3)}",
                runtime=sandbox_runtime(self.task, self.home),
            )
            with ThreadPoolExecutor(max_workers=2) as pool:
                cand_box = pool.submit(self.sandbox.container, "candidate", tree)
                base_box = pool.submit(self.sandbox.container, "baseline", self.home.baseline)
                cand, base = cand_box.result(), base_box.result()
        if self.task.build:
            with self.stage("build"):
                self.build(base, baseline=True)
                self.build(cand, baseline=False)
        argv = [self.sandbox.python, "-I", "-B", "-c", HARNESS.read_text(), config.function]
        with self.stage("load"):
            baseline = _Side("baseline", base, base.engine(argv, "baseline"))
            candidate = _Side("candidate", cand, cand.engine(argv, "candidate"))
            self.request(baseline, {"op": "load"}, config.load_timeout_s)
            self.request(candidate, {"op": "load"}, config.load_timeout_s)
        with self.stage("calls"):
            self.calls(config, baseline, candidate)
        cand_s = statistics.median(candidate.times)
        base_s = statistics.median(baseline.times)
        score, base_score = 1000 * cand_s, 1000 * base_s
        self.metrics.update(
            {
                "score": round(score, 6),
                "baseline_score": round(base_score, 6),
                self.evaluator.metric.name: round(score, 6),
                f"baseline_{self.evaluator.metric.name}": round(base_score, 6),
                "x_baseline": round(self.evaluator.metric.ratio(score, base_score), 4),
                "calls": len(candidate.times),
            }
        )
        self.log.append({"candidate_s": candidate.times, "baseline_s": baseline.times})

    def build(self, box: SandboxContainer, baseline: bool) -> None:
        assert self.sandbox is not None
        timeout = float(self.judge.build_timeout_s)
        code, output = self.sandbox.build(box, list(self.task.build), timeout)
        if code == 0:
            return
        if baseline:  # the judge's own side: never the candidate's fault
            raise InfrastructureFault(f"the baseline's build failed ({code}): {output[-300:]}")
        if code is None:
            raise Outcome(Verdict.WRONG, "timeout", f"build did not finish within {timeout:.0f} s")
        raise Outcome(Verdict.WRONG, "build", f"build exited with {code}\n{output[-1500:]}")

    def request(
        self, side: _Side, payload: dict[str, Any], timeout: float
    ) -> tuple[dict[str, Any], float]:
        """One request to ``side``; a candidate's failure is WRONG, the baseline's ERROR."""
        try:
            reply, seconds = side.proc.request(payload, timeout)
        except EngineFailure as failure:
            self.log.append({"failure": side.name, "op": payload["op"], "private": failure.private})
            if side.name == "baseline":
                raise InfrastructureFault(f"the baseline failed: {failure}") from None
            raise Outcome(Verdict.WRONG, failure.kind, str(failure)) from None
        return reply.fields, seconds

    def calls(self, config: KernelConfig, baseline: _Side, candidate: _Side) -> None:
        """Warm-up calls, then the timed pairs; every result checked."""
        plan = [(f"warmup:{i}", False) for i in range(config.warmup)]
        plan += [(f"call:{i}", True) for i in range(config.calls)]
        slowest_base = 0.0
        for i, (name, timed) in enumerate(plan):
            try:
                arrays = draw_inputs(self.task, derive_seed(self.eval_seed, name))
            except KernelTaskError as exc:
                raise InfrastructureFault(str(exc)) from None
            key = derive_seed(self.eval_seed, f"key:{name}")
            put = {"op": "put", "args": masked(arrays, key)}
            self.hidden_sent = True
            for side in (baseline, candidate):
                self.request(side, put, 60.0)
            # The baseline first on the first call (it sizes the candidate's limit), then the
            # order alternates, so neither side always runs on a cache the other warmed.
            order = (baseline, candidate) if i % 2 == 0 else (candidate, baseline)
            for side in order:
                other = candidate if side is baseline else baseline
                if side is baseline:
                    limit = BASELINE_CALL_S
                else:
                    limit = config.timeout_factor * slowest_base + config.timeout_floor_s
                with other.box.frozen():
                    reply, seconds = self.request(side, {"op": "call", "key": key}, limit)
                if side is baseline:
                    slowest_base = max(slowest_base, seconds)
                if timed:
                    side.times.append(seconds)
                side.last_call = reply
            ref = self.result(baseline, arrays, config, None)
            self.result(candidate, arrays, config, ref)

    def result(
        self, side: _Side, arrays: list[np.ndarray], config: KernelConfig, ref: np.ndarray | None
    ) -> np.ndarray:
        """Fetch ``side``'s last result and check it (against ``ref`` for the candidate)."""
        call = side.last_call
        problem: tuple[str, str] | None = None
        if call.get("type") != "ndarray":
            problem = (
                "not_array",
                f"the function returned a {str(call.get('type'))[:40]}, not a numpy.ndarray"
                " (a lazy or deferred result is refused: the clock stops once the result's"
                " bytes were read)",
            )
        got, _ = self.request(side, {"op": "get"}, 60.0)
        out = None
        if problem is None:
            out = self.read_result(side, got)
            mutated = [
                i
                for i, (a, d) in enumerate(zip(arrays, got.get("inputs") or [], strict=False))
                if digest(a) != d
            ]
            if got.get("aliased") is True:
                problem = ("aliased", "the result shares memory with an argument")
            elif got.get("reused") is True:
                problem = ("aliased", "the result shares memory with the previous call's result")
            elif mutated or len(got.get("inputs") or []) != len(arrays):
                problem = ("input_mutated", f"the call changed argument(s) {mutated} in place")
            elif fold(out) != call.get("fold"):
                problem = (
                    "late",
                    "the result's bytes changed after the call returned (work left running"
                    " after the clock stopped)",
                )
            elif ref is not None:
                differs = compare(out, ref, config)
                if differs:
                    problem = ("mismatch", differs)
        if problem is None:
            assert out is not None
            return out
        if side.name == "baseline":
            raise InfrastructureFault(f"the baseline's result fails the checks: {problem[1]}")
        raise Outcome(Verdict.WRONG, *problem)

    def read_result(self, side: _Side, got: dict[str, Any]) -> np.ndarray:
        """The result ``get`` described, read back a chunk at a time (as it is now)."""
        dtype, shape, nbytes = result_layout(got)
        parts = []
        for at in range(0, nbytes, CHUNK):
            reply, _ = self.request(side, {"op": "read", "at": at}, 60.0)
            parts.append(chunk_bytes(reply, min(CHUNK, nbytes - at)))
        return np.frombuffer(b"".join(parts), dtype=dtype).reshape(shape)
