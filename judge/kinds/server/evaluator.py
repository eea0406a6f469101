"""One evaluation of the ``server`` kind: checkout, integrity, sandbox, build, readiness,
correctness, single-stream latency, timing at the task's concurrency levels.

The candidate's ``serve`` starts an OpenAI-compatible server in its sandbox (no network: its
loopback only); the judge's load generator (:mod:`judge.kinds.server.load`) reaches it from a
sidecar that shares only that network namespace (:mod:`judge.kinds.server.sidecar`). The
frozen baseline server runs the same way in its own sandbox, measured in the same evaluation,
interleaved, the candidate frozen while the baseline is timed; every limit is relative to it.

- Correctness: each case's stored prompts (``batch`` concurrent requests, ``new_tokens`` =
  ``max_tokens``), then its confirmation set: every request's generated ids must equal the
  baseline's recorded at set-up; a first divergence where the baseline's top-2 logprob margin
  is under ``judge.near_tie_margin`` is a near tie, as in the decode kind. With
  ``server.token_ids: text`` (a server without ids) the generated text is compared instead,
  as its code points, exactly (no margins, no near ties).
- ``server.endpoint``: ``completions`` or ``chat`` (the load generator's body and chunk
  parser; :mod:`judge.kinds.server.load`); drift is completions-only.
- Drift (``server.correctness: drift``, for servers that are not batch-invariant): per set,
  at least ``server.exact_fraction`` of the requests generate the baseline's ids exactly (else
  WRONG ``mismatch``) AND the candidate's teacher-forced mean per-token log-likelihood of the
  baseline's stored continuations, measured with the baseline's own in the same evaluation,
  drops by at most ``server.drift_tolerance`` (else WRONG ``quality``). Both, always: a
  teacher-forced score alone never looks at what the server generates. Fresh (timed) replies
  then need ``exact_fraction`` of the pair's baseline ids.
- Timing: at every concurrency of ``task.server.concurrency`` (and ``timing.batch``, the
  headline), ``timing.runs`` paired runs on prompts drawn for this evaluation, the order
  alternating; aggregate output tok/s counts the ids the judge received (never ``usage``);
  x is the median paired ratio at the headline concurrency. Every timed reply is checked
  against the baseline's reply in the same pair.
- Single stream: lone requests among concurrent bursts at drawn shapes, judged by the decode
  kind's test (:mod:`judge.b1`): WRONG ``b1_regression`` only when proven.
"""

from __future__ import annotations

import secrets
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from omegaconf import DictConfig

from judge.b1 import B1Plan, draw_lone, run_b1, unit_traffic
from judge.kinds.base import TaskKind
from judge.kinds.server.sidecar import LoadGen, ServerProcess
from judge.mutant import candidate_serve
from judge.pipeline import (
    SETUP_S,
    Run,
    attempt_tag,
    baseline_scale,
    checked_tree,
    pairs_bound_s,
    retry_limit,
)
from judge.private import (
    BaselineBuildFailed,
    InputSet,
    JudgeHome,
    Reference,
    build_baseline,
    derive_seed,
    draw_set,
    sandbox_runtime,
)
from judge.queue import Job
from judge.sandbox import (
    InfrastructureFault,
    Sandbox,
    SandboxContainer,
    answered_retry,
    open_sandbox,
)
from judge.verdict import Evaluation, Outcome, Verdict

# A load generator's call may take this long past its run's limit (its reply, the judge's own
# code's time): the watchdog's bound counts it once per run.
LOADGEN_SLACK_S = 60.0
HOST = "127.0.0.1"
PORT = 8000
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


TEXT_DRIFT = (
    "server.correctness: drift needs prompts of token ids (teacher forcing sends prompt +"
    " continuation as ids); the generator yielded text"
)


def serve_argv(sandbox: Sandbox, serve: list[str]) -> list[str]:
    """A server task's ``serve`` argv: ``{python}``/``{build}`` as for every kind, plus the
    address the judge gives it (``{host}``, ``{port}``)."""
    return [
        part.replace("{host}", HOST).replace("{port}", str(PORT))
        for part in sandbox.serve_argv(serve)
    ]


SERVER_ENV = {"SWARMLAB_SERVER_HOST": HOST, "SWARMLAB_SERVER_PORT": str(PORT)}


@dataclass
class RunResult:
    """One load-generator run: every request's ids and times, on the judge's clock."""

    wall_s: float
    ids: list[list[int]]
    ttft_s: list[float]
    itl_s: list[float]
    total_s: list[float]
    margins: list[list[float | None]] | None = None
    counts: list[int] | None = None  # tokens per request where they are not ``len(ids)``

    @property
    def tokens(self) -> int:
        """Output tokens received (counted from the ids, never from the server's usage; in
        ``token_ids: text`` mode, from the chunks that carried text, capped by the client)."""
        if self.counts is not None:
            return sum(self.counts)
        return sum(len(row) for row in self.ids)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def requests_s(self) -> float:
        return len(self.ids) / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class Side:
    """One server under test (the candidate's or the baseline's) and its load generator."""

    label: str
    box: SandboxContainer
    server: ServerProcess
    loadgen: LoadGen
    path: str
    stats: dict[str, Any] = field(default_factory=dict)


PAD = -1  # pads the rows of a ``token_ids: text`` reference (code points) to one length


def ref_rows(ref: np.ndarray) -> list[list[int]]:
    """A reference's rows, the padding of a text reference dropped (ids are never negative)."""
    rows = ref.tolist()
    if ref.size and int(ref.min()) < 0:
        rows = [[v for v in row if v != PAD] for row in rows]
    return rows


def padded(rows: list[list[int]]) -> np.ndarray:
    """Rows of different lengths (a text reference's code points) as one array, ``PAD`` after."""
    width = max((len(r) for r in rows), default=0)
    return np.asarray([list(r) + [PAD] * (width - len(r)) for r in rows], dtype=np.int64)


def first_difference(got: list[list[int]], ref: np.ndarray) -> tuple[int, int, int] | None:
    """None if every request's ids equal its reference row; else (requests differing, first
    request, first step). A row of another length differs at the first step past the shorter."""
    rows = []
    for i, want in enumerate(ref_rows(ref)):
        have = got[i] if i < len(got) else []
        step = next((j for j, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), None)
        if step is None and len(have) != len(want):
            step = min(len(have), len(want))
        if step is not None:
            rows.append((i, step))
    if len(got) != len(ref) and not rows:
        rows.append((0, 0))
    if not rows:
        return None
    return len(rows), rows[0][0], rows[0][1]


def matching_rows(
    ids: list[list[int]], ref: np.ndarray, margins: np.ndarray, near_margin: float | None
) -> int:
    """How many requests' ids equal their reference row; with ``near_margin`` set, a row whose
    first divergence is a near tie (same length, baseline top-2 margin under it) counts too."""
    count = 0
    for i, want in enumerate(ref_rows(ref)):
        have = ids[i] if i < len(ids) else []
        if have == want:
            count += 1
            continue
        if near_margin is None or len(have) != len(want):
            continue
        step = next(j for j, (a, b) in enumerate(zip(have, want, strict=True)) if a != b)
        count += bool(float(margins[i, step]) < near_margin)
    return count


def required_matches(rows: int, fraction: float) -> int:
    """The requests of a set of ``rows`` that must match exactly: ``fraction`` rounded up, at
    least one (a set where nothing generated matches is never judged by likelihood alone)."""
    return max(1, min(rows, int(np.ceil(fraction * rows - 1e-9))))


def mean_loglik(rows: list[list[float]]) -> float:
    """The mean per-token log-likelihood over every continuation token of a set."""
    values = [v for row in rows for v in row]
    return float(np.mean(values)) if values else 0.0


@dataclass(frozen=True)
class DriftCheck:
    """One set's drift-path numbers and what they decide (:func:`drift_decision`)."""

    rows: int
    matched: int
    needed: int
    loglik: float
    baseline_loglik: float
    tolerance: float

    @property
    def drop(self) -> float:
        """How far (nats per token) the candidate's likelihood lies below the baseline's."""
        return self.baseline_loglik - self.loglik


def drift_decision(check: DriftCheck, context: str) -> Outcome | None:
    """None if ``check`` passes the drift path; else the WRONG outcome.

    The generated-ids fraction is judged first and on its own: a server may score the
    baseline's continuations perfectly (teacher forcing feeds it the right tokens) while it
    generates garbage, so a likelihood within tolerance never excuses too few exact requests.
    """
    if check.matched < check.needed:
        return Outcome(
            Verdict.WRONG,
            "mismatch",
            f"{context}: {check.rows - check.matched} of {check.rows} requests differ from"
            f" the baseline's tokens; at least {check.needed} must match exactly"
            f" (drift correctness, exact_fraction)",
        )
    if check.drop > check.tolerance:
        return Outcome(
            Verdict.WRONG,
            "quality",
            f"{context}: the mean log-likelihood of the baseline's continuations is"
            f" {check.loglik:.4f} nats per token, {check.drop:.4f} below the baseline's"
            f" {check.baseline_loglik:.4f} (tolerance {check.tolerance:g})",
            tokens_correct=check.matched == check.rows,
        )
    return None


def check_correctness_settings(server: Any) -> None:
    """The task's ``server.correctness`` settings are usable.

    Raises:
        InfrastructureFault: they are not (the task's fault: ERROR, never the candidate's).
    """
    mode = str(server.get("correctness", "tokens"))
    if mode not in ("tokens", "drift"):
        raise InfrastructureFault(f"server.correctness is {mode!r}: tokens or drift")
    endpoint = str(server.get("endpoint", "completions"))
    if endpoint not in ENDPOINTS:
        raise InfrastructureFault(f"server.endpoint is {endpoint!r}: completions or chat")
    source = str(server.get("token_ids", "token_ids"))
    if source not in ("token_ids", "logprobs", "text"):
        raise InfrastructureFault(f"server.token_ids is {source!r}: token_ids, logprobs or text")
    chat_prompt = str(server.get("chat_prompt", "ids"))
    if chat_prompt != "ids":
        raise InfrastructureFault(
            f"server.chat_prompt is {chat_prompt!r}: ids (the prompt ids as decimal numbers"
            " separated by spaces)"
        )
    if mode == "drift" and (endpoint == "chat" or source == "text"):
        raise InfrastructureFault(
            "server.correctness: drift needs endpoint: completions and token ids (teacher"
            " forcing uses echo/prompt_logprobs, a completions feature)"
        )
    if mode == "drift":
        fraction = float(server.exact_fraction)
        tolerance = float(server.drift_tolerance)
        forcing = str(server.get("teacher_forcing", "echo"))
        if not 0.0 < fraction <= 1.0 or not tolerance >= 0.0:
            raise InfrastructureFault(
                f"server.exact_fraction {fraction:g} must be in (0, 1] and"
                f" server.drift_tolerance {tolerance:g} >= 0"
            )
        if forcing not in ("echo", "prompt_logprobs"):
            raise InfrastructureFault(
                f"server.teacher_forcing is {forcing!r}: echo or prompt_logprobs"
            )


def margins_array(margins: list[list[float | None]] | None, shape: tuple[int, int]) -> np.ndarray:
    """The baseline's top-2 margins as an array of ``shape`` (missing entries: infinity, so
    no divergence there reads as a near tie)."""
    out = np.full(shape, np.inf)
    for i, row in enumerate(margins or []):
        for j, value in enumerate(row[: shape[1]]):
            if value is not None and i < shape[0]:
                out[i, j] = float(value)
    return out


class ServerEvaluator:
    """Scores jobs of a server task for one judge home. One evaluation at a time."""

    def __init__(self, cfg: DictConfig, home: JudgeHome, kind: TaskKind) -> None:
        self.cfg = cfg
        self.home = home
        self.kind = kind  # the kind passes itself: its metric names the score

    def evaluate(self, job: Job) -> Evaluation:
        return _ServerRun(self, job).execute()


class _ServerRun(Run):
    def __init__(self, evaluator: ServerEvaluator, job: Job) -> None:
        super().__init__(evaluator.kind, evaluator.cfg, evaluator.home, job)
        self.server_cfg = self.task.server
        self.sandbox: Sandbox | None = None
        self.cand: Side | None = None
        self.base: Side | None = None
        self.source = str(self.server_cfg.token_ids)
        self.drift = str(self.server_cfg.get("correctness", "tokens")) == "drift"

    @property
    def text_mode(self) -> bool:
        """``token_ids: text``: the generated text is compared, as code points, exactly."""
        return self.source == "text"

    # -- talking to the servers ---------------------------------------------------------

    def start_side(self, box: SandboxContainer, serve: list[str], label: str) -> Side:
        assert self.sandbox is not None
        server = ServerProcess(box, serve, SERVER_ENV, f"{label} server")
        loadgen = LoadGen(self.sandbox, box, label)
        path = ENDPOINTS.get(str(self.server_cfg.endpoint), "/v1/completions")
        return Side(label, box, server, loadgen, path)

    def wait_ready(self, side: Side, candidate: bool) -> float:
        """Poll the readiness path until 200: WRONG ``crash`` if the server exits first,
        WRONG ``timeout`` past ``server.ready_timeout_s`` (for the baseline: ERROR)."""
        limit = float(self.server_cfg.ready_timeout_s)
        start = time.perf_counter()
        while True:
            left = limit - (time.perf_counter() - start)
            reply = side.loadgen.call(
                {
                    "op": "ready",
                    "host": HOST,
                    "port": PORT,
                    "path": str(self.server_cfg.ready_path),
                    "timeout_s": max(0.05, min(1.0, left)),
                },
                timeout=30.0,
            )
            if reply.get("ok"):
                return time.perf_counter() - start
            alive = side.server.running()
            if alive and time.perf_counter() - start < limit:
                continue
            self.log.append({"server": side.label, "output": side.server.output_tail})
            if not candidate:
                raise InfrastructureFault(
                    f"the baseline server did not come up ({'timeout' if alive else 'exited'})"
                )
            # Nothing hidden has reached the server yet: its own words are safe to show.
            said = side.server.output_tail[-1500:]
            if not alive:
                raise Outcome(
                    Verdict.WRONG,
                    "crash",
                    "the server exited before it answered "
                    f"GET {self.server_cfg.ready_path}" + (f"\n{said}" if said else ""),
                )
            raise Outcome(
                Verdict.WRONG,
                "timeout",
                f"GET {self.server_cfg.ready_path} did not answer 200 within {limit:.0f} s"
                + (f"\n{said}" if said else ""),
            )

    def run_timeout(self, s: InputSet) -> float:
        """The limit of one run of ``s``: ``timeout_factor`` times the baseline's set-up wall
        time for that set (a stored set) or for the stored set of its shape (``shape:b1`` for
        a lone request, else ``shape:timing``), scaled up to ``s``'s tokens and requests as if
        served one at a time, plus ``timeout_floor_s``."""
        refs, inputs = self.home.references, self.home.inputs
        name = s.name if s.name in refs else ("shape:b1" if s.batch == 1 else "shape:timing")
        ref, like = refs.get(name), inputs.get(name)
        if ref is None or like is None:  # a home made without the shapes: the floor's worth
            return self.judge.timeout_factor * 60.0 + self.judge.timeout_floor_s
        scale = max(1.0, s.new_tokens / max(1, like.new_tokens)) * max(
            1.0, s.batch / max(1, like.batch)
        )
        return self.judge.timeout_factor * ref.decode_s * scale + self.judge.timeout_floor_s

    def limit(self, side: Side, s: InputSet, retry_s: float | None) -> float:
        """The deadline of one run of ``s`` on ``side``: the candidate's :meth:`run_timeout`
        (or ``retry_s``, a timeout's retry), the baseline's :func:`baseline_scale` times it."""
        limit = self.run_timeout(s) if retry_s is None else retry_s
        return limit if side is self.cand else limit * baseline_scale(self.judge)

    def load(
        self,
        side: Side,
        s: InputSet,
        concurrency: int,
        context: str,
        margins: bool = False,
        retry_s: float | None = None,
    ) -> RunResult:
        """Stream every prompt of ``s`` to ``side`` at ``concurrency``. A candidate's failed
        request is WRONG (``timeout``, ``crash``, ``protocol``); the baseline's is ERROR. A
        candidate's timeout is charged only once it holds against the baseline of the moment
        (:meth:`confirm_timeout`); ``retry_s`` is that retry's limit."""
        candidate = side is self.cand
        if candidate:
            self.hidden_sent = True
        timeout = self.limit(side, s, retry_s)
        command = {
            "op": "run",
            "host": HOST,
            "port": PORT,
            "path": side.path,
            "model": str(self.server_cfg.model),
            "requests": [{"prompt": p, "max_tokens": s.new_tokens} for p in s.prompts],
            "concurrency": concurrency,
            "logprobs": margins,
            "token_source": self.source,
            "endpoint": str(self.server_cfg.get("endpoint", "completions")),
            "timeout_s": timeout,
        }
        reply = side.loadgen.call(command, timeout=timeout + LOADGEN_SLACK_S)
        results = reply.get("results") or []
        failed = [r for r in results if not r.get("ok")]
        if failed or len(results) != s.batch:
            first = failed[0] if failed else {"kind": "protocol", "detail": "missing results"}
            kind = str(first.get("kind"))
            if kind not in ("timeout", "crash", "protocol"):
                kind = "protocol"
            self.log.append({"context": context, "side": side.label, "failed": failed[:4]})
            if not candidate:
                raise InfrastructureFault(f"the baseline server failed a request ({kind})")
            if kind != "crash" and not side.server.running():
                kind = "crash"
            detail = {
                "timeout": f"no complete answer within {timeout:.1f} s",
                "crash": "the server exited or dropped the connection",
                "protocol": "a reply that is not the contract's event stream",
            }[kind]
            # Judge-made text only: the load generator's own words name what the server sent
            # (its HTTP status, a number it chose after the hidden prompts arrived); they
            # stay in the private log above.
            outcome = Outcome(
                Verdict.WRONG,
                kind,
                f"{context}: {len(failed) or 1} of {s.batch} requests failed: {detail}",
            )
            if kind == "timeout" and retry_s is None and self.judge.confirm_timing_failures:
                self.confirm_timeout(
                    s,
                    context,
                    outcome.detail,
                    lambda: self.base_load(s, concurrency, f"{context} (baseline now)").wall_s,
                    lambda limit: self.load(
                        side, s, concurrency, f"{context}, retried", margins, retry_s=limit
                    ),
                )
            raise outcome
        ids = [list(r["ids"]) for r in results]
        itl = [g for r in results for g in r["itl_s"]]
        return RunResult(
            wall_s=float(reply["wall_s"]),
            ids=ids,
            ttft_s=[float(r["ttft_s"]) for r in results],
            itl_s=[float(g) for g in itl],
            total_s=[float(r["total_s"]) for r in results],
            margins=[list(r["margins"] or []) for r in results] if margins else None,
            counts=[int(r.get("tokens", 0)) for r in results] if self.text_mode else None,
        )

    def base_load(
        self, s: InputSet, concurrency: int, context: str, margins: bool = False
    ) -> RunResult:
        """:meth:`load` on the baseline with the candidate's container frozen throughout."""
        assert self.cand is not None and self.base is not None
        with self.cand.box.frozen():
            return self.load(self.base, s, concurrency, context, margins)

    def verify(
        self, ids: list[list[int]], ref: np.ndarray, margins: np.ndarray, context: str
    ) -> None:
        """WRONG ``mismatch`` unless every request's ids equal the reference (a near tie at
        the first divergence may pass, by ``judge.near_tie_policy``). The detail names only
        counts and positions."""
        found = first_difference(ids, ref)
        if found is None:
            return
        n, row, step = found
        rows = len(ref)
        steps = len(ref_rows(ref)[row])
        if self.text_mode:  # the "ids" are the text's code points: exact only, no margins
            detail = (
                f"{context}: {n} of {rows} requests' text differs from the baseline's"
                f" (token_ids: text); first: request {row} at character {step} of {steps}"
            )
            raise Outcome(Verdict.WRONG, "mismatch", detail)
        detail = (
            f"{context}: {n} of {rows} requests differ from the baseline's tokens;"
            f" first: request {row} at token {step} of {steps}"
        )
        same_length = row < len(ids) and len(ids[row]) == steps
        near = (
            same_length and step < steps and float(margins[row, step]) < self.judge.near_tie_margin
        )
        if not same_length:
            got = len(ids[row]) if row < len(ids) else 0
            detail += f" ({got} tokens where max_tokens asked for {steps})"
        if near:
            detail += (
                " (a near tie: the baseline's top-2 margin there is under"
                f" {self.judge.near_tie_margin:g})"
            )
            self.flags["near_tie"] = True
            if self.judge.near_tie_policy == "pass":
                return
        raise Outcome(Verdict.WRONG, "mismatch", detail, near_tie=near)

    def check_fresh(
        self, s: InputSet, cand: RunResult, base: RunResult, concurrency: int, context: str
    ) -> None:
        """The candidate's reply on prompts drawn now against the baseline's on the same; the
        baseline's margins are measured (untimed) only when they differ."""
        if self.text_mode:
            ref = padded(base.ids)
            if len(ref) != s.batch or not all(base.ids):
                raise InfrastructureFault(f"the baseline returned no text on {s.name}")
        else:
            ref = np.asarray(base.ids, dtype=np.int64)
            if ref.shape != (s.batch, s.new_tokens):
                raise InfrastructureFault(f"the baseline returned no valid tokens on {s.name}")
        if first_difference(cand.ids, ref) is None:
            return
        if self.text_mode:  # no margins without ids: the text compare is exact only
            self.verify(cand.ids, ref, np.full(ref.shape, np.inf), context)
            return
        if self.drift:
            self.check_fresh_drift(s, cand, ref, concurrency, context)
            return
        again = self.base_load(s, concurrency, f"{context} (margins)", margins=True)
        if first_difference(again.ids, ref) is not None:
            raise InfrastructureFault(f"the baseline is not deterministic on {s.name}")
        self.verify(cand.ids, ref, margins_array(again.margins, ref.shape), context)

    def near_margin(self) -> float | None:
        return float(self.judge.near_tie_margin) if self.judge.near_tie_policy == "pass" else None

    def needed(self, rows: int) -> int:
        return required_matches(rows, float(self.server_cfg.exact_fraction))

    def check_fresh_drift(
        self, s: InputSet, cand: RunResult, ref: np.ndarray, concurrency: int, context: str
    ) -> None:
        """Drift path on a fresh run: ``exact_fraction`` of the requests match the pair's
        baseline; near ties by the baseline's margins re-measured, on rows it reproduced (a
        baseline that is not batch-invariant is not at fault here)."""
        needed = self.needed(s.batch)
        if matching_rows(cand.ids, ref, np.full(ref.shape, np.inf), None) >= needed:
            return
        again = self.base_load(s, concurrency, f"{context} (margins)", margins=True)
        margins = margins_array(again.margins, ref.shape)
        for i, row in enumerate(again.ids):
            if i < len(ref) and row != ref[i].tolist():
                margins[i, :] = np.inf
        matched = matching_rows(cand.ids, ref, margins, self.near_margin())
        check = DriftCheck(s.batch, matched, needed, 0.0, 0.0, float("inf"))
        outcome = drift_decision(check, context)
        if outcome is not None:
            raise outcome

    def score(self, side: Side, s: InputSet, ref: np.ndarray, context: str) -> list[list[float]]:
        """Teacher-forced logprobs of the baseline's continuations ``ref`` after ``s``'s prompts
        on ``side`` (each set's requests concurrent, as when it generated them). A candidate's
        timeout is charged only once it holds against the baseline of the moment."""
        return self.timed_score(side, s, ref, context)[0]

    def timed_score(
        self,
        side: Side,
        s: InputSet,
        ref: np.ndarray,
        context: str,
        retry_s: float | None = None,
    ) -> tuple[list[list[float]], float]:
        """:meth:`score` and the run's wall time; ``retry_s``: a timeout's retry limit."""
        candidate = side is self.cand
        timeout = self.limit(side, s, retry_s)
        command = {
            "op": "score",
            "host": HOST,
            "port": PORT,
            "path": side.path,
            "model": str(self.server_cfg.model),
            "requests": [
                {"prompt": p, "continuation": row}
                for p, row in zip(s.prompts, ref.tolist(), strict=True)
            ],
            "concurrency": s.batch,
            "teacher_forcing": str(self.server_cfg.get("teacher_forcing", "echo")),
            "timeout_s": timeout,
        }
        reply = side.loadgen.call(command, timeout=timeout + LOADGEN_SLACK_S)
        results = reply.get("results") or []
        failed = [r for r in results if not r.get("ok")]
        if failed or len(results) != s.batch:
            first = failed[0] if failed else {"kind": "protocol", "detail": "missing results"}
            kind = str(first.get("kind"))
            kind = kind if kind in ("timeout", "crash", "protocol") else "protocol"
            self.log.append({"context": context, "side": side.label, "failed": failed[:4]})
            if not candidate:
                raise InfrastructureFault(f"the baseline server failed a scoring request ({kind})")
            if kind != "crash" and not side.server.running():
                kind = "crash"
            detail = {
                "timeout": f"no complete reply within {timeout:.1f} s",
                "crash": "the server exited or dropped the connection",
                "protocol": "a reply that is not the contract's scoring reply",
            }[kind]
            outcome = Outcome(  # judge-made text only, as for :meth:`load`
                Verdict.WRONG,
                kind,
                f"{context}: {len(failed) or 1} of {s.batch} teacher-forced scoring requests"
                f" failed: {detail}",
            )
            if kind == "timeout" and retry_s is None and self.judge.confirm_timing_failures:
                assert self.base is not None and self.cand is not None
                base, cand = self.base, self.cand

                def base_now() -> float:
                    with cand.box.frozen():
                        return self.timed_score(base, s, ref, f"{context} (baseline now)")[1]

                self.confirm_timeout(
                    s,
                    context,
                    outcome.detail,
                    base_now,
                    lambda limit: self.timed_score(
                        side, s, ref, f"{context}, retried", retry_s=limit
                    ),
                )
            raise outcome
        return [list(r["logprobs"]) for r in results], float(reply.get("wall_s", 0.0))

    def confirm_timeout(
        self,
        s: InputSet,
        context: str,
        first: str,
        base_now: Callable[[], float],
        retry: Callable[[float], object],
    ) -> NoReturn:
        """A candidate's run of ``s`` timed out: charge it only if it holds against the
        baseline now (the decode kind's rule, :func:`judge.kinds.decode.evaluator.retry_limit`).

        ``base_now`` runs the same requests on the baseline server now, the candidate frozen,
        and gives its wall time; ``retry`` runs them once more on the candidate under
        ``timeout_factor`` x that + the floor (never below the first limit). Over it again:
        WRONG ``timeout``, both limits and the baseline's time now in the detail. Answered:
        ERROR, re-queued, not a verdict: ``infrastructure`` when the baseline now raised the
        limit (the machine is slow), else ``timeout_answered``, charged WRONG ``timeout`` once
        every attempt ended so (:func:`judge.sandbox.answered_retry`).

        The retry goes to the same server process, not a fresh one: requests over HTTP carry
        no state from one to the next (the decode kind restarts its engine because a
        process's batch-size history is part of what it judges), a restart would cost the
        readiness wait again (a model's load) and need its own rule for failing it, and an
        answered retry yields no verdict, so a server gains nothing from answering late (and
        one that does so in every attempt is charged). What
        the abandoned first run still holds of the server is its own to release.
        """
        first_limit = self.run_timeout(s)
        now = base_now()
        factor, floor = float(self.judge.timeout_factor), float(self.judge.timeout_floor_s)
        limit = retry_limit(first_limit, now, factor, floor)
        self.log.append(
            {"timeout_retry": context, "baseline_now_s": round(now, 4), "retry_s": round(limit, 3)}
        )
        try:
            retry(limit)
        except Outcome as again:
            if again.reason == "timeout":
                again.detail += (
                    f"; first try: {first}; the retry's limit is {factor:g}x the baseline's"
                    f" {now:.3f} s on the same requests now + {floor:g} s (never below the"
                    f" first try's {first_limit:.1f} s)"
                )
            raise
        raise answered_retry(
            f"{context} timed out ({first}) but answered on a retry within {limit:.1f} s,"
            f" {factor:g}x the baseline's {now:.3f} s now + {floor:g} s",
            first_limit,
            limit,
        )

    def correctness_drift(self, name: str, s: InputSet, ref: Reference, context: str) -> None:
        """The drift path on one stored set: generated ids, then teacher-forced quality."""
        assert self.cand is not None and self.base is not None
        if any(isinstance(p, str) for p in s.prompts):
            raise InfrastructureFault(TEXT_DRIFT)
        got = self.load(self.cand, s, s.batch, context)
        margins = ref.margins if ref.margins is not None else np.full(ref.tokens.shape, np.inf)
        matched = matching_rows(got.ids, ref.tokens, margins, self.near_margin())
        check = DriftCheck(s.batch, matched, self.needed(s.batch), 0.0, 0.0, float("inf"))
        outcome = drift_decision(check, context)
        if outcome is not None:
            raise outcome
        cand_ll = mean_loglik(self.score(self.cand, s, ref.tokens, f"{context} (likelihood)"))
        with self.cand.box.frozen():
            base_ll = mean_loglik(
                self.score(self.base, s, ref.tokens, f"{context} (baseline likelihood)")
            )
        check = DriftCheck(
            s.batch,
            matched,
            check.needed,
            cand_ll,
            base_ll,
            float(self.server_cfg.drift_tolerance),
        )
        self.metrics.setdefault("drift", {})[name] = {
            "exact": round(matched / s.batch, 4),
            "loglik": round(cand_ll, 5),
            "baseline_loglik": round(base_ll, 5),
            "drop": round(check.drop, 5),
        }
        worst = max(v["drop"] for v in self.metrics["drift"].values())
        self.metrics["loglik_drop"] = worst
        outcome = drift_decision(check, context)
        if outcome is not None:
            raise outcome

    # -- stages -------------------------------------------------------------------------

    def wall_bound_s(self) -> float:
        """The watchdog's bound (:meth:`Run.wall_bound_s`): the sum of this plan's limits, each
        used whole. Every run (stored set or drawn) is bounded by :meth:`run_timeout` at the
        task's largest concurrency and output against every stored set; every pair as
        :func:`pairs_bound_s` (the baseline twice: a near tie's margins re-run) with the load
        generator's slack over each limit; both servers'
        readiness; two builds; the untimed set-up."""
        task, judge = self.task, self.judge
        groups = [*task.cases, task.timing, task.b1, task.alternating]
        rows = max([*self.concurrencies(), *(int(c.batch) for c in task.cases)])
        steps = max(int(g.new_tokens) for g in groups)
        factor, floor = float(judge.timeout_factor), float(judge.timeout_floor_s)
        run_s = factor * 60.0 + floor  # run_timeout's own, for a home without the shapes
        for name, ref in self.home.references.items():
            like = self.home.inputs.get(name)
            if like is None:  # a reference made in this evaluation only: sized from its like
                continue
            scale = max(1.0, steps / max(1, like.new_tokens)) * max(1.0, rows / max(1, like.batch))
            run_s = max(run_s, factor * ref.decode_s * scale + floor)
        plan = B1Plan.of(task.b1, float(judge.b1_alpha))
        pairs = (
            3 * 2 * len(task.cases)  # every case and its confirmation set (drift: 3 runs each)
            + plan.max_units * (plan.per_unit + 1)  # lone pairs and a burst per unit
            + len(self.concurrencies()) * int(task.timing.runs)
        )
        ready_s = 2 * (float(self.server_cfg.ready_timeout_s) + 2 * LOADGEN_SLACK_S)
        return (
            SETUP_S
            + 2 * float(judge.build_timeout_s)
            + ready_s
            + pairs_bound_s(pairs, run_s, judge, base_runs=2, slack_s=LOADGEN_SLACK_S)
        )

    def hang_up(self) -> None:
        """:meth:`Run.hang_up`, and both sides' servers and load generators (their processes
        are attached, not engines of a container): a call blocked on one fails at once."""
        super().hang_up()
        for side in (self.cand, self.base):
            if side is not None:
                for part in (side.loadgen, side.server):
                    with suppress(Exception):
                        part.hang_up()

    def teardown(self, evaluation: Evaluation) -> None:
        for side in (self.cand, self.base):
            if side is not None:
                side.loadgen.close()
                side.server.close()
        if self.sandbox is not None:
            self.sandbox.close()
        shutil.rmtree(self.workdir / "tree", ignore_errors=True)

    def pipeline(self) -> None:
        task, judge = self.task, self.judge
        check_correctness_settings(self.server_cfg)
        tree = checked_tree(self)
        with self.stage("sandbox"):
            self.sandbox = open_sandbox(
                judge.sandbox,
                judge.device,
                owner=self.home.owner,
                tag=attempt_tag(self.home.owner, self.job.id),
                runtime=sandbox_runtime(task, self.home),
            )
            cand_box = self.sandbox.container("candidate", tree)
            base_box = self.sandbox.container("baseline", self.home.baseline)
            serve = serve_argv(self.sandbox, list(task.serve))
            own = candidate_serve(self.home, self.job)
            cand_serve = serve_argv(self.sandbox, own) if own else serve
            with cand_box.frozen():
                if task.build:
                    try:
                        build_baseline(
                            self.sandbox, base_box, list(task.build), judge.build_timeout_s
                        )
                    except BaselineBuildFailed as exc:
                        raise InfrastructureFault(str(exc)) from None
                self.base = self.start_side(base_box, serve, "baseline")
                self.wait_ready(self.base, candidate=False)
        if task.build:
            with self.stage("build"):
                code, output = self.sandbox.build(cand_box, list(task.build), judge.build_timeout_s)
                if code is None:
                    raise Outcome(
                        Verdict.WRONG,
                        "timeout",
                        f"build did not finish within {judge.build_timeout_s:.0f} s",
                    )
                if code != 0:
                    raise Outcome(
                        Verdict.WRONG, "build", f"build exited with {code}\n{output[-1500:]}"
                    )
        with self.stage("ready"):
            self.cand = self.start_side(cand_box, cand_serve, "candidate")
            self.metrics["ready_s"] = round(self.wait_ready(self.cand, candidate=True), 3)
        with self.stage("correctness"):
            self.correctness()
        with self.stage("b1"):
            self.b1_pairs()
        with self.stage("timing"):
            self.timing()

    def correctness(self) -> None:
        assert self.cand is not None
        sanity = min(self.task.cases, key=lambda c: c.batch * c.new_tokens).name
        for case in self.task.cases:
            for prefix in ("case", "confirm"):
                name = f"{prefix}:{case.name}"
                s, ref = self.home.inputs[name], self.home.references[name]
                context = f"case {case.name}" + (" (confirmation set)" if prefix != "case" else "")
                if self.drift:
                    self.correctness_drift(name, s, ref, context)
                    if case.name == sanity and prefix == "case":
                        base = self.base_load(s, int(case.batch), f"{context} (baseline)")
                        inf = np.full(ref.tokens.shape, np.inf)
                        if matching_rows(base.ids, ref.tokens, inf, None) < self.needed(s.batch):
                            raise InfrastructureFault(
                                f"the baseline did not reproduce exact_fraction of its own"
                                f" reference on {name}"
                            )
                    continue
                got = self.load(self.cand, s, int(case.batch), context)
                margins = (
                    ref.margins if ref.margins is not None else np.full(ref.tokens.shape, np.inf)
                )
                self.verify(got.ids, ref.tokens, margins, context)
                if case.name == sanity and prefix == "case":
                    # A baseline that no longer reproduces its stored reference: this is not
                    # the machine set up, and every in-evaluation reference would be suspect.
                    base = self.base_load(s, int(case.batch), f"{context} (baseline)")
                    if first_difference(base.ids, ref.tokens) is not None:
                        raise InfrastructureFault(
                            f"the baseline did not reproduce its own reference on {name}"
                        )

    def draw(self, name: str, batch: int, prompt_len: Any, new_tokens: int) -> InputSet:
        return draw_set(self.task, self.eval_seed, f"fresh:{name}", batch, prompt_len, new_tokens)

    def pair(
        self, s: InputSet, concurrency: int, context: str, cand_first: bool
    ) -> tuple[RunResult, RunResult]:
        """Candidate and baseline on the same set, back to back in the order given, the
        candidate's reply checked against the baseline's (:meth:`check_fresh`)."""
        assert self.cand is not None
        if cand_first:
            cand = self.load(self.cand, s, concurrency, context)
            base = self.base_load(s, concurrency, context)
        else:
            base = self.base_load(s, concurrency, context)
            cand = self.load(self.cand, s, concurrency, context)
        self.check_fresh(s, cand, base, concurrency, context)
        return cand, base

    def b1_pairs(self) -> None:
        """Single-stream speed where traffic meets it (:mod:`judge.b1`): units of
        ``per_process`` lone requests with one concurrent burst placed among them (never after
        the last), each lone request at a drawn shape, candidate and baseline back to back on
        the same prompt, who goes first by a coin; WRONG ``b1_regression`` only when the
        sign-flip test over whole units proves the mean slowdown over the limit. The servers
        live through the whole evaluation, so every unit meets the history of the ones before
        (and both servers the same one)."""
        assert self.cand is not None
        limit = 1.0 + float(self.task.spec.b1_max_regression)
        alpha = float(self.judge.b1_alpha)
        plan = B1Plan.of(self.task.b1, alpha)
        level = int(self.task.timing.batch)
        alt = self.task.alternating
        ttft: list[float] = []

        def unit(i: int) -> list[tuple[float, float]]:
            rng = np.random.default_rng(derive_seed(self.eval_seed, f"b1:{i}"))
            [burst_at] = unit_traffic(rng, plan.per_unit, [level]) or {0: level}
            pairs: list[tuple[float, float]] = []
            for j in range(plan.per_unit):
                if j == burst_at:
                    s = self.draw(f"b1:{i}:burst", level, alt.prompt_len, int(alt.new_tokens))
                    self.pair(s, level, f"burst of {level} in single-stream unit {i + 1}", True)
                prompt_len, steps = draw_lone(self.task, rng)
                s = self.draw(f"b1:{i}:{j}", 1, prompt_len, steps)
                context = f"single-stream run {j + 1} of unit {i + 1}"
                cand, base = self.pair(s, 1, context, bool(rng.integers(2)))
                pairs.append((cand.total_s[0], base.total_s[0]))
                ttft.append(cand.ttft_s[0] / base.ttft_s[0] if base.ttft_s[0] > 0 else 1.0)
            return pairs

        result = run_b1(plan, limit, alpha, bool(self.judge.confirm_timing_failures), unit)
        self.metrics.update(result.metrics())
        self.metrics["b1_ttft_ratio"] = round(float(np.median(ttft)), 4)
        if result.proven:
            raise Outcome(
                Verdict.WRONG,
                "b1_regression",
                result.detail("single-stream requests"),
                tokens_correct=True,
            )
        if result.suspicious:
            self.flags["b1_unresolved"] = True

    def concurrencies(self) -> list[int]:
        headline = int(self.task.timing.batch)
        levels = {int(c) for c in self.server_cfg.concurrency} | {headline}
        return sorted(levels)

    def timing(self) -> None:
        """Paired runs at each concurrency level; the headline is ``timing.batch``'s."""
        assert self.cand is not None
        timing = self.task.timing
        headline = int(timing.batch)
        per_level: dict[str, dict[str, Any]] = {}
        for level in self.concurrencies():
            pairs: list[tuple[RunResult, RunResult]] = []
            for i in range(int(timing.runs)):
                s = self.draw(f"timing:{level}:{i}", level, timing.prompt_len, timing.new_tokens)
                context = f"timing run {i + 1} at concurrency {level}"
                cand, base = self.pair(s, level, context, cand_first=i % 2 == 0)
                if self.text_mode:
                    # Its text is the baseline's (just checked), so are its tokens: a server
                    # that splits the same text into more chunks does not produce more.
                    cand.counts = base.counts
                pairs.append((cand, base))
            per_level[str(level)] = summarize(pairs)
        self.metrics["server"] = per_level
        head = per_level[str(headline)]
        self.metrics.update(
            out_tok_s=head["tok_s"],
            score=head["tok_s"],
            baseline_out_tok_s=head["baseline_tok_s"],
            baseline_score=head["baseline_tok_s"],
            x_baseline=head["x"],
            x_baseline_pairs=head["x_pairs"],
            ttft_ms=head["ttft_ms"],
            itl_ms=head["itl_ms"],
            requests_s=head["requests_s"],
            baseline_ttft_ms=head["baseline_ttft_ms"],
            concurrency=headline,
            target_x_baseline=float(self.task.spec.target_x_baseline),
            hit_target=bool(head["x"] >= float(self.task.spec.target_x_baseline)),
        )


def _ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 3) if values else 0.0


def summarize(pairs: list[tuple[RunResult, RunResult]]) -> dict[str, Any]:
    """One concurrency level's numbers: medians over its paired runs (x: of the ratios)."""
    ratios = [c.tok_s / b.tok_s if b.tok_s > 0 else 0.0 for c, b in pairs]
    cand = [c for c, _ in pairs]
    base = [b for _, b in pairs]
    return {
        "tok_s": round(statistics.median(r.tok_s for r in cand), 3),
        "baseline_tok_s": round(statistics.median(r.tok_s for r in base), 3),
        "x": round(statistics.median(ratios), 4),
        "x_pairs": [round(v, 4) for v in ratios],
        "requests_s": round(statistics.median(r.requests_s for r in cand), 3),
        "baseline_requests_s": round(statistics.median(r.requests_s for r in base), 3),
        "ttft_ms": _ms([t for r in cand for t in r.ttft_s]),
        "baseline_ttft_ms": _ms([t for r in base for t in r.ttft_s]),
        "itl_ms": _ms([g for r in cand for g in r.itl_s]),
        "baseline_itl_ms": _ms([g for r in base for g in r.itl_s]),
    }


def baseline_references(
    cfg: DictConfig, baseline: Path, sets: list[InputSet], progress: Any
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
    """The stored sets' references at set-up: the baseline server's ids and top-2 margins for
    every set (each set's prompts as concurrent requests), and per set (its slowest time to
    first token, its wall time), which size an evaluation's timeouts.

    Raises:
        BaselineBuildFailed: the baseline does not build, never comes up, or does not answer
            every request with ``new_tokens`` ids (the task's fault, exit 2 at set-up).
    """
    from isolation.taskenv import task_runtime
    from tasks.schema import task_root

    task, judge = cfg.task, cfg.judge
    try:
        check_correctness_settings(task.server)
    except InfrastructureFault as exc:
        raise BaselineBuildFailed(f"{exc} — fix task.yaml") from None
    sandbox = open_sandbox(
        judge.sandbox,
        judge.device,
        owner="setup",
        tag=f"setup-{secrets.token_hex(4)}",
        runtime=task_runtime(task, task_root(task)),
    )
    arrays: dict[str, np.ndarray] = {}
    times: dict[str, tuple[float, float]] = {}
    server = loadgen = None
    try:
        box = sandbox.container("baseline", baseline)
        if task.build:
            build_baseline(sandbox, box, list(task.build), judge.build_timeout_s)
        server = ServerProcess(box, serve_argv(sandbox, list(task.serve)), SERVER_ENV, "setup")
        loadgen = LoadGen(sandbox, box, "setup")
        limit = float(task.server.ready_timeout_s)
        deadline = time.perf_counter() + limit
        while True:  # in slices: a server that exits is said at once, not after the limit
            left = deadline - time.perf_counter()
            ready = loadgen.call(
                {
                    "op": "ready",
                    "host": HOST,
                    "port": PORT,
                    "path": str(task.server.ready_path),
                    "timeout_s": max(0.05, min(1.0, left)),
                },
                timeout=30.0,
            )
            alive = server.running()
            if ready.get("ok"):
                break
            if not alive or time.perf_counter() >= deadline:
                said = " | ".join(server.output_tail.strip().splitlines()[-3:])
                what = "exited" if not alive else f"did not answer within {limit:.0f} s"
                raise BaselineBuildFailed(
                    f"the baseline server {what} (GET {task.server.ready_path}):"
                    f" {said or 'no output'} — fix task.yaml's serve or the template"
                )
        path = ENDPOINTS.get(str(task.server.endpoint), "/v1/completions")
        text_mode = str(task.server.token_ids) == "text"
        for i, s in enumerate(sets):
            reply = loadgen.call(
                {
                    "op": "run",
                    "host": HOST,
                    "port": PORT,
                    "path": path,
                    "model": str(task.server.model),
                    "requests": [{"prompt": p, "max_tokens": s.new_tokens} for p in s.prompts],
                    "concurrency": s.batch,
                    "logprobs": not text_mode,
                    "token_source": str(task.server.token_ids),
                    "endpoint": str(task.server.endpoint),
                    "timeout_s": 600,
                },
                timeout=660,
            )
            results = reply.get("results") or []
            if text_mode:  # a text's length is the server's business; an empty one is not
                bad = [r for r in results if not r.get("ok") or not r["ids"]]
                want = "a non-empty text"
            else:
                bad = [r for r in results if not r.get("ok") or len(r["ids"]) != s.new_tokens]
                want = f"{s.new_tokens} ids"
            if bad or len(results) != s.batch:
                raise BaselineBuildFailed(
                    f"the baseline server did not answer {s.name} with {want} per"
                    f" request ({(bad or [{}])[0].get('detail', 'wrong count')}): fix the template"
                )
            if text_mode:
                tokens = padded([r["ids"] for r in results])
                arrays[f"tokens/{s.name}"] = tokens
                arrays[f"margins/{s.name}"] = np.full(tokens.shape, np.inf)
            else:
                arrays[f"tokens/{s.name}"] = np.asarray([r["ids"] for r in results], dtype=np.int64)
                arrays[f"margins/{s.name}"] = margins_array(
                    [r["margins"] for r in results], (s.batch, s.new_tokens)
                )
            times[s.name] = (max(r["ttft_s"] for r in results), float(reply["wall_s"]))
            if i % 8 == 7 or i == len(sets) - 1:
                progress(f"  references {i + 1}/{len(sets)}")
        if str(task.server.get("correctness", "tokens")) == "drift" and sets:
            if any(isinstance(p, str) for s in sets for p in s.prompts):
                raise BaselineBuildFailed(f"{TEXT_DRIFT} — fix task.yaml or the generator")
            # A baseline that cannot score given continuations is said once, here, not as an
            # ERROR in every evaluation.
            first = sets[0]
            forcing = str(task.server.get("teacher_forcing", "echo"))
            reply = loadgen.call(
                {
                    "op": "score",
                    "host": HOST,
                    "port": PORT,
                    "path": path,
                    "model": str(task.server.model),
                    "requests": [
                        {"prompt": p, "continuation": row}
                        for p, row in zip(
                            first.prompts, arrays[f"tokens/{first.name}"].tolist(), strict=True
                        )
                    ],
                    "concurrency": first.batch,
                    "teacher_forcing": forcing,
                    "timeout_s": 600,
                },
                timeout=660,
            )
            bad = [r for r in reply.get("results") or [{}] if not r.get("ok")]
            if bad:
                raise BaselineBuildFailed(
                    f"the baseline server does not answer teacher-forced scoring"
                    f" (teacher_forcing: {forcing}): {bad[0].get('detail', 'no reply')}"
                    " — correctness: drift needs it (docs/tasks.md)"
                )
    finally:
        for part in (loadgen, server):
            if part is not None:
                part.close()
        sandbox.close()
    return arrays, times


__all__ = ["Reference", "ServerEvaluator", "baseline_references"]
