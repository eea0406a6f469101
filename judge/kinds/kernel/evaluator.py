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
* ``WRONG (late)``: the bytes read back do not hash to what the timed call committed to (a
  thread still writing when the clock stopped, or a reply sent before the result existed);
* ``WRONG (mismatch)``: dtype, shape or values differ from the baseline's on the same inputs
  (equal bytes, or within the task's ``rtol``/``atol``);
* ``WRONG (timeout)``, ``WRONG (crash)``, ``WRONG (build)``;
* ``WRONG (protocol)``: a reply of the candidate's side that is not exactly what the request
  asked for (every field's type, length, dtype, shape and size is checked here): whatever the
  candidate's process sends is the candidate's, so it is charged, never a judge fault.

The candidate's code shares the harness's process and can rewrite it: the judge trusts only
its own clock, its own inputs and comparison, and the sha256 commitment of the timed call,
which it recomputes over the bytes it reads back. ``not_array``, ``aliased`` and
``input_mutated`` are the harness's word: they catch honest mistakes, not an adversary
(docs/kinds-kernel.md).

A PASS scores the median of the candidate's timed calls (``call_ms``, lower is better) against
the baseline's median in the same evaluation.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import secrets
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import numpy as np
from omegaconf import DictConfig

from judge.kinds.base import TaskKind
from judge.kinds.kernel.config import KernelConfig, KernelTaskError, draw_inputs, kernel_config
from judge.kinds.kernel.harness import CHUNK, commit, keystream
from judge.pipeline import SETUP_S, Run, checked_tree
from judge.private import JudgeHome, derive_seed, sandbox_runtime
from judge.protocol import EngineFailure
from judge.queue import Job
from judge.sandbox import (
    EngineProcess,
    InfrastructureFault,
    Sandbox,
    SandboxContainer,
)
from judge.verdict import Evaluation, Outcome, Verdict

T = TypeVar("T")

HARNESS = Path(__file__).with_name("harness.py")
# How long a baseline call may take before the judge gives up on its own side (ERROR).
BASELINE_CALL_S = 300.0
# The limit of every untimed request (put, get, read).
REQUEST_S = 60.0


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
# The most axes a result may have (numpy's own limit is 64).
MAX_NDIM = 32
# The dtypes a result may have: numeric numpy types of a fixed size, either byte order (numpy's
# own ``dtype.str``). Anything else (objects, strings, structured or platform-sized types, a
# name numpy would parse into something odd) is a protocol error before numpy sees it.
ALLOWED_DTYPES = frozenset(
    np.dtype(name).newbyteorder(order).str
    for name in (
        "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
    for order in "<>"
)  # fmt: skip
# A sha256 in hex, as the harness writes it.
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# The longest type name a reply may carry (it is quoted in a verdict's detail).
MAX_TYPE_CHARS = 100


def _is_int(value: Any) -> bool:
    """A JSON integer (``bool`` is an ``int`` in Python, never one here)."""
    return type(value) is int


def check_call(fields: dict[str, Any]) -> None:
    """Validate a ``call`` reply: ``type`` a short string and, for an ndarray, ``sha256``.

    Raises:
        EngineFailure: ``protocol`` for anything else.
    """
    kind = fields.get("type")
    if not isinstance(kind, str) or len(kind) > MAX_TYPE_CHARS:
        raise EngineFailure("protocol", "reply to call: type must be a short string")
    sha = fields.get("sha256")
    if kind == "ndarray" and not (isinstance(sha, str) and SHA256_HEX.fullmatch(sha)):
        raise EngineFailure("protocol", "reply to call: sha256 must be 64 hex digits")


def check_get(fields: dict[str, Any], arguments: int, called: str | None = None) -> None:
    """Validate a ``get`` reply: ``inputs`` one sha256 per argument, ``type`` a short string
    (the type the ``call`` reply named, when ``called`` is given), and for an ndarray
    ``aliased`` and ``reused`` booleans and a layout (:func:`result_layout`).

    Raises:
        EngineFailure: ``protocol`` for anything else.
    """
    inputs = fields.get("inputs")
    if not (
        isinstance(inputs, list)
        and len(inputs) == arguments
        and all(isinstance(d, str) and SHA256_HEX.fullmatch(d) for d in inputs)
    ):
        raise EngineFailure(
            "protocol", f"reply to get: inputs must be {arguments} sha256 hex digests"
        )
    kind = fields.get("type")
    if not isinstance(kind, str) or len(kind) > MAX_TYPE_CHARS:
        raise EngineFailure("protocol", "reply to get: type must be a short string")
    if called is not None and kind != called:
        # Both replies describe one result: a flip between them is a reply the judge cannot
        # read one way or the other, so it is the side's, never read on one of its words.
        raise EngineFailure("protocol", "reply to get: type is not the one the call named")
    if kind != "ndarray":
        return
    if type(fields.get("aliased")) is not bool or type(fields.get("reused")) is not bool:
        raise EngineFailure("protocol", "reply to get: aliased and reused must be true or false")
    result_layout(fields)


def result_layout(got: dict[str, Any]) -> tuple[np.dtype, list[int], int]:
    """The dtype, shape and size in bytes a ``get`` reply says the result has.

    Everything is checked on the reply's own JSON values before numpy sees any of it, the size
    in Python integers (``math.prod``: no int64 to wrap around).

    Raises:
        EngineFailure: ``protocol`` for anything but a dtype of :data:`ALLOWED_DTYPES` and a
            shape of at most :data:`MAX_NDIM` non-negative integers that make ``nbytes`` (at
            most :data:`MAX_RESULT_BYTES`), the shape's non-zero axes too: a size of 0 with an
            axis of 2**62 is no shape numpy can make.
    """
    dtype_name, shape, nbytes = got.get("dtype"), got.get("shape"), got.get("nbytes")
    if not (
        isinstance(dtype_name, str)
        and dtype_name in ALLOWED_DTYPES
        and isinstance(shape, list)
        and len(shape) <= MAX_NDIM
        and all(_is_int(n) and n >= 0 for n in shape)
        and _is_int(nbytes)
        and 0 <= nbytes <= MAX_RESULT_BYTES
    ):
        raise EngineFailure(
            "protocol",
            "reply to get: dtype, shape and nbytes must describe a numeric array of at most"
            f" {MAX_RESULT_BYTES >> 20} MiB",
        )
    dtype = np.dtype(dtype_name)
    if dtype.itemsize * math.prod(shape) != nbytes:
        raise EngineFailure("protocol", "reply to get: shape and dtype do not make nbytes")
    # Every axis bounded, an empty result's included (its other axes are no size at all).
    if dtype.itemsize * math.prod(max(n, 1) for n in shape) > MAX_RESULT_BYTES:
        raise EngineFailure(
            "protocol", f"reply to get: an axis past {MAX_RESULT_BYTES >> 20} MiB of values"
        )
    return dtype, list(shape), nbytes


def wall_bound_s(config: KernelConfig) -> float:
    """The longest the engines' part of an evaluation (load and calls) can take when every
    request takes its whole limit: the sum of the plan's limits. Past it the judge has waited
    on something with no deadline (a judge bug): the skeleton's watchdog hangs the engines up
    (:meth:`judge.pipeline.Run.overrun`).
    """
    reads = -(-MAX_RESULT_BYTES // CHUNK)  # a result's reads, at most
    candidate_call = config.timeout_factor * BASELINE_CALL_S + config.timeout_floor_s
    per_call = 2 * (1 + 1 + reads) * REQUEST_S + BASELINE_CALL_S + candidate_call
    return 2 * config.load_timeout_s + (config.warmup + config.calls) * per_call


def chunk_bytes(reply: dict[str, Any], expected: int) -> bytes:
    """The bytes of one ``read`` reply, which must be ``expected`` long.

    Raises:
        EngineFailure: ``protocol`` for anything but base64 of that many bytes.
    """
    data = reply.get("data")
    if not isinstance(data, str) or len(data) > 4 * (expected // 3 + 1):
        raise EngineFailure("protocol", "reply to read: data must be base64")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError as exc:
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

    def __init__(self, cfg: DictConfig, home: JudgeHome, kind: TaskKind) -> None:
        self.cfg = cfg
        self.home = home
        self.kind = kind  # the kind passes itself: its metric names the score
        self.metric = kind.metric(cfg.task)

    def evaluate(self, job: Job) -> Evaluation:
        return _Run(self, job).execute()


class _Side:
    """One harness process and its container."""

    def __init__(self, name: str, box: SandboxContainer, proc: EngineProcess) -> None:
        self.name = name
        self.box = box
        self.proc = proc
        self.times: list[float] = []
        # The judge's own time to hash each result read back (the harness's cost per call).
        self.commit_s: list[float] = []
        self.last_call: dict[str, Any] = {}


class _Run(Run):
    """One evaluation of a kernel task on the shared skeleton (:class:`judge.pipeline.Run`)."""

    def __init__(self, evaluator: KernelEvaluator, job: Job) -> None:
        # Every call's inputs come from the skeleton's eval_seed, new to every evaluation: no
        # input timed here was ever seen by any process before, so a cache of results never
        # answers.
        super().__init__(evaluator.kind, evaluator.cfg, evaluator.home, job)
        self.evaluator = evaluator
        self.sandbox: Sandbox | None = None

    def wall_bound_s(self) -> float:
        """The skeleton's watchdog bound (:meth:`Run.wall_bound_s`): the untimed set-up, the
        two builds at their limit, and the engines' part at its plan's limits
        (:func:`wall_bound_s`); a task whose plan cannot be read gets the default (its
        pipeline says why at once)."""
        try:
            config = kernel_config(self.task)
        except KernelTaskError:
            return super().wall_bound_s()
        builds = 2 * float(self.judge.build_timeout_s) if self.task.build else 0.0
        return SETUP_S + builds + wall_bound_s(config)

    def teardown(self, evaluation: Evaluation) -> None:
        if self.sandbox is not None:
            for box in self.sandbox.containers:
                for process in box.processes:
                    self.log.append({"stderr": process.label, "tail": process.stderr_tail})
            self.sandbox.close()

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
                # Both sides' timed calls include hashing their result (~the same work on
                # both, the judge's host-side measure of it here): x_baseline counts it.
                "commit_ms": round(1000 * statistics.median(candidate.commit_s), 4),
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
        self,
        side: _Side,
        payload: dict[str, Any],
        timeout: float,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[dict[str, Any], float]:
        """One request to ``side``, its reply validated by ``check`` too when given; a
        candidate's failure (a malformed reply included) is WRONG, the baseline's ERROR."""
        try:
            reply, seconds = side.proc.request(payload, timeout)
        except EngineFailure as failure:
            self.failed(side, payload["op"], failure)
        if check is not None:
            self.parsed(side, payload["op"], lambda: check(reply.fields))
        return reply.fields, seconds

    def parsed(self, side: _Side, op: str, parse: Callable[[], T]) -> T:
        """``parse()`` of what ``side`` sent (a reply, a layout derived from one, its bytes
        reshaped): every failure is ``side``'s ``protocol`` failure (WRONG for the candidate,
        ERROR for the baseline), never a judge fault. A judge fault is not charged and its
        job is run again: a candidate that could raise one on demand would re-roll its
        unlucky evaluations for free.
        """
        try:
            return parse()
        except EngineFailure as failure:
            self.failed(side, op, failure)
        except Exception as exc:  # whatever the side's data broke is the side's
            failure = EngineFailure(
                "protocol", f"reply to {op} cannot be read ({type(exc).__name__})", repr(exc)
            )
            self.failed(side, op, failure)

    def failed(self, side: _Side, op: str, failure: EngineFailure) -> NoReturn:
        """``side``'s failure on ``op``: the candidate's is WRONG (charged), the baseline's an
        ERROR; never an exception the judge would take for its own fault."""
        self.log.append({"failure": side.name, "op": op, "private": failure.private})
        if side.name == "baseline":
            raise InfrastructureFault(f"the baseline failed: {failure}") from None
        raise Outcome(Verdict.WRONG, failure.kind, str(failure)) from None

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
                self.request(side, put, REQUEST_S)
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
                    reply, seconds = self.request(
                        side, {"op": "call", "key": key}, limit, check_call
                    )
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
        call = side.last_call  # check_call's: ``type`` a short string, an ndarray's sha256
        called = call["type"]
        problem: tuple[str, str] | None = None
        if called != "ndarray":
            problem = (
                "not_array",
                f"the function returned a {called[:40]}, not a numpy.ndarray"
                " (a lazy or deferred result is refused: the clock stops once the result's"
                " bytes were read)",
            )
        got, _ = self.request(
            side, {"op": "get"}, REQUEST_S, lambda fields: check_get(fields, len(arrays), called)
        )
        out = None
        if problem is None:
            # check_get made got's type ``ndarray`` too, with a layout, booleans and digests.
            out = self.read_result(side, got)
            # The judge's own hash of the bytes it read, timed on the host: the same work the
            # harness did inside each timed call (reported, never subtracted: docs).
            start = time.perf_counter()
            committed = commit(out)
            side.commit_s.append(time.perf_counter() - start)
            pairs = zip(arrays, got["inputs"], strict=True)  # check_get made them as many
            mutated = [i for i, (a, d) in enumerate(pairs) if digest(a) != d]
            if got["aliased"]:
                problem = ("aliased", "the result shares memory with an argument")
            elif got["reused"]:
                problem = ("aliased", "the result shares memory with the previous call's result")
            elif mutated:
                problem = ("input_mutated", f"the call changed argument(s) {mutated} in place")
            elif committed != call["sha256"]:
                problem = (
                    "late",
                    "the result's bytes read back are not those the timed call committed to"
                    " (work left running, or done, after the clock stopped)",
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
        dtype, shape, nbytes = self.parsed(side, "get", lambda: result_layout(got))
        parts = []
        for at in range(0, nbytes, CHUNK):
            reply, _ = self.request(side, {"op": "read", "at": at}, REQUEST_S)
            expected = min(CHUNK, nbytes - at)
            parts.append(self.parsed(side, "read", lambda r=reply, n=expected: chunk_bytes(r, n)))
        data = b"".join(parts)
        return self.parsed(side, "read", lambda: np.frombuffer(data, dtype=dtype).reshape(shape))
