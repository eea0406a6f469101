"""One evaluation: checkout, integrity, sandbox, build, load, correctness, B=1 pairs,
alternating order, timing. Each stage is timed; every limit is relative to the baseline's
time for the same case in the same evaluation; every output is checked, timed runs included.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
import statistics
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
from omegaconf import DictConfig

from judge.checkout import extract_tree
from judge.integrity import check_integrity
from judge.private import JudgeHome, load_callable
from judge.queue import Job
from judge.sandbox import (
    EngineFailure,
    EngineProcess,
    InfrastructureFault,
    Sandbox,
    SandboxContainer,
)
from judge.verdict import Evaluation, Outcome, Verdict


def median_and_se(values: list[float]) -> tuple[float, float]:
    """The median and its standard error, from the median absolute deviation. Descriptive only
    (the B=1 verdict rests on :func:`sign_test_count`, which assumes no noise distribution)."""
    data = np.asarray(values, dtype=float)
    median = float(np.median(data))
    mad = float(np.median(np.abs(data - median)))
    # 1.4826 * MAD estimates sigma for normal data; the median's SE is 1.2533 sigma / sqrt(n).
    return median, 1.2533 * 1.4826 * mad / np.sqrt(len(data))


def sign_test_count(n: int, alpha: float) -> int:
    """The fewest of ``n`` pairs that must lie above a limit to reject "median <= limit" at
    one-sided level ``alpha``: the smallest k with P(Binomial(n, 1/2) >= k) <= alpha; ``n + 1``
    when no k qualifies (too few pairs for that level).

    Exact for any continuous noise distribution of independent pairs. This matters here: on
    these VMs one pair's ratio varies by 15-30% with heavy tails, and a normal-theory SE from
    the MAD understated it enough to convict the unmodified baseline (6.8% slower, "SE 2.3%").
    """
    tail = 0.0
    for k in range(n, -1, -1):
        tail += math.comb(n, k) / 2**n
        if tail > alpha:
            return k + 1
    return 0


def median_lower_bound(values: list[float], alpha: float) -> float:
    """A distribution-free lower confidence bound (level ``1 - alpha``) of the median: the
    order statistic that :func:`sign_test_count` compares with the limit. With too few values
    for that level, the smallest value (a weaker bound, never a stronger one)."""
    data = sorted(values)
    k = sign_test_count(len(data), alpha)
    return data[max(0, len(data) - k)]


class Evaluator:
    """Scores jobs for one judge home. Not thread-safe: one evaluation at a time."""

    def __init__(self, cfg: DictConfig, home: JudgeHome) -> None:
        self.cfg = cfg
        self.home = home

    def evaluate(self, job: Job) -> Evaluation:
        return _Run(self, job).execute()


class _Run:
    def __init__(self, evaluator: Evaluator, job: Job) -> None:
        self.cfg = evaluator.cfg
        self.task = evaluator.cfg.task
        self.judge = evaluator.cfg.judge
        self.home = evaluator.home
        self.job = job
        self.stages: dict[str, float] = {}
        self.stage_engine: dict[str, float] = {}
        self.metrics: dict[str, Any] = {}
        self.flags: dict[str, Any] = {}
        self.engine_s = 0.0
        self.log: list[dict[str, Any]] = []
        self.hidden_sent = False
        self.sandbox: Sandbox | None = None
        self.cand: SandboxContainer | None = None
        self.base: SandboxContainer | None = None
        self.base_engine: EngineProcess | None = None
        self.workdir = self.home.evals / f"{job.id}-{job.attempts}"

    # -- bookkeeping ---------------------------------------------------------------------

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start, engine_before = time.perf_counter(), self.engine_s
        try:
            yield
        finally:
            self.stages[name] = round(time.perf_counter() - start, 4)
            self.stage_engine[name] = round(self.engine_s - engine_before, 4)

    def timeout(self, set_name: str, op: str) -> float:
        ref = self.home.references[set_name]
        base = ref.prefill_s if op == "prefill" else ref.decode_s
        return self.judge.timeout_factor * base + self.judge.timeout_floor_s

    def call(
        self, engine: EngineProcess, payload: dict[str, Any], timeout: float, context: str
    ) -> tuple[dict[str, Any], float]:
        """A candidate request; failures become WRONG with a detail safe to show the agent."""
        try:
            reply, seconds = engine.request(payload, timeout)
        except EngineFailure as failure:
            self.log.append(
                {"engine": engine.label, "failure": str(failure), "stderr": engine.stderr_tail}
            )
            detail = f"{failure} ({context})"
            if failure.kind == "crash" and self.cand is not None and self.cand.oom_killed():
                detail += "; the sandbox was killed for memory"
            if not self.hidden_sent:
                # Nothing hidden has reached the engine yet: its own words are safe to show.
                detail += "\n" + engine.stderr_tail[-1500:]
            raise Outcome(Verdict.WRONG, failure.kind, detail) from None
        self.engine_s += seconds
        return reply, seconds

    def base_call(self, payload: dict[str, Any], timeout: float) -> tuple[dict[str, Any], float]:
        """A baseline request. Call it inside ``self.cand.frozen()``: the candidate's processes
        must not run while the baseline is timed. The baseline failing is the judge's fault."""
        assert self.base_engine is not None and self.cand is not None and self.cand.paused
        try:
            reply, seconds = self.base_engine.request(payload, timeout)
        except EngineFailure as failure:
            raise InfrastructureFault(f"baseline engine failed: {failure}") from None
        self.engine_s += seconds
        return reply, seconds

    # -- the pieces ----------------------------------------------------------------------

    def run_set(
        self, engine: EngineProcess, set_name: str, context: str
    ) -> tuple[float, float, Any]:
        """Prefill, decode, reset one hidden set on the candidate: (prefill s, decode s, tokens)."""
        s = self.home.inputs[set_name]
        self.hidden_sent = True
        _, prefill_s = self.call(
            engine,
            {"op": "prefill", "prompts": s.prompts},
            self.timeout(set_name, "prefill"),
            f"prefill of {context}",
        )
        reply, decode_s = self.call(
            engine,
            {"op": "decode", "steps": s.new_tokens, "margins": False},
            self.timeout(set_name, "decode"),
            f"decode of {context}",
        )
        self.call(engine, {"op": "reset"}, self.judge.timeout_floor_s, f"reset after {context}")
        return prefill_s, decode_s, reply.get("tokens")

    def base_set(self, set_name: str, decode: bool) -> tuple[float, float]:
        """Prefill (and decode) one hidden set on the baseline, the candidate frozen throughout."""
        assert self.cand is not None
        s = self.home.inputs[set_name]
        decode_s = 0.0
        with self.cand.frozen():
            _, prefill_s = self.base_call(
                {"op": "prefill", "prompts": s.prompts}, self.timeout(set_name, "prefill")
            )
            if decode:
                reply, decode_s = self.base_call(
                    {"op": "decode", "steps": s.new_tokens, "margins": False},
                    self.timeout(set_name, "decode"),
                )
            self.base_call({"op": "reset"}, self.judge.timeout_floor_s)
        if decode and self.differs(set_name, reply.get("tokens")) is not None:
            raise InfrastructureFault(
                f"the baseline did not reproduce its own reference on {set_name}"
            )
        return prefill_s, decode_s

    def differs(self, set_name: str, tokens: Any) -> tuple[int, int, int] | None:
        """None if ``tokens`` equal the reference; else (rows differing, first row, first step)."""
        ref = self.home.references[set_name].tokens
        try:
            got = np.asarray(tokens, dtype=np.int64)
        except (TypeError, ValueError):
            return (ref.shape[0], 0, 0)
        if got.shape != ref.shape:
            return (ref.shape[0], 0, 0)
        diff = got != ref
        if not diff.any():
            return None
        rows = np.flatnonzero(diff.any(axis=1))
        row = int(rows[0])
        return (len(rows), row, int(np.argmax(diff[row])))

    def verify(self, set_name: str, tokens: Any, reason: str, context: str) -> None:
        found = self.differs(set_name, tokens)
        if found is None:
            return
        n_rows, row, step = found
        ref = self.home.references[set_name]
        margin = float(ref.margins[row, step])
        near = margin < self.judge.near_tie_margin
        shape = np.shape(tokens) if isinstance(tokens, list) else ()
        if shape != ref.tokens.shape:
            detail = f"{context}: returned tokens of shape {shape}, want {ref.tokens.shape}"
            raise Outcome(Verdict.WRONG, reason, detail)
        detail = (
            f"{context}: {n_rows} of {ref.tokens.shape[0]} rows differ from the reference;"
            f" first: row {row} at step {step} of {ref.tokens.shape[1]}"
        )
        if near:
            detail += f" (reference top-2 margin {margin:.2g}: near tie)"
            self.flags["near_tie"] = True
            self.flags.setdefault("near_tie_margins", []).append(margin)
            if self.judge.near_tie_policy == "pass":
                return
        raise Outcome(Verdict.WRONG, reason, detail, near_tie=near)

    def prefill_cap(self, base_s: float) -> float:
        return self.judge.prefill_cap_factor * base_s + self.judge.prefill_cap_slack_ms / 1000

    def prefill_over_cap_again(
        self, engine: EngineProcess, like: str, prompt_len: Any, context: str
    ) -> list[float] | None:
        """Prefill ratios (candidate / baseline) on ``judge.prefill_recheck_runs`` fresh prompt
        sets of the given shape if every one is over the cap; None at the first under it
        (the ratios measured are kept in the metrics either way).

        A prefill over the cap is charged only if every re-check is over it too: one slow
        measurement on a loaded machine must not convict (it did, in a test of the unmodified
        baseline), while code that really does decode work in prefill is slow every time. The
        prompts are drawn now from a fresh seed, so no engine can have seen or cached them.
        """
        assert self.cand is not None
        make = load_callable(self.task.inputs)
        batch = self.home.inputs[like].batch
        timeout = self.timeout(like, "prefill")
        ratios = []
        for i in range(self.judge.prefill_recheck_runs):
            prompts = make(secrets.randbits(62), batch, tuple(prompt_len), self.task.vocab)
            prompts = [list(map(int, p)) for p in prompts]
            _, prefill_s = self.call(
                engine,
                {"op": "prefill", "prompts": prompts},
                timeout,
                f"prefill re-check {i + 1} ({context})",
            )
            self.call(engine, {"op": "reset"}, self.judge.timeout_floor_s, "reset")
            with self.cand.frozen():
                _, base_prefill = self.base_call({"op": "prefill", "prompts": prompts}, timeout)
                self.base_call({"op": "reset"}, self.judge.timeout_floor_s)
            ratios.append(round(prefill_s / base_prefill, 4))
            self.metrics.setdefault("prefill_rechecks", {})[context] = ratios
            if prefill_s <= self.prefill_cap(base_prefill):
                return None
        return ratios

    # -- stages --------------------------------------------------------------------------

    def execute(self) -> Evaluation:
        started = time.time()
        evaluation = Evaluation(
            job_id=self.job.id,
            arm=self.job.arm,
            agent=self.job.agent,
            commit=self.job.commit,
            verdict=Verdict.PASS,
            label=self.job.label,
            attempts=self.job.attempts,
            enqueued_at=self.job.enqueued_at,
            started_at=started,
        )
        total_start = time.perf_counter()
        try:
            self.pipeline()
        except Outcome as outcome:
            evaluation.verdict, evaluation.reason, evaluation.detail = (
                outcome.verdict,
                outcome.reason,
                outcome.detail,
            )
            self.flags.update(outcome.flags)
        except InfrastructureFault as fault:
            evaluation.verdict, evaluation.reason, evaluation.detail = (
                Verdict.ERROR,
                "infrastructure",
                str(fault),
            )
        except Exception as exc:  # a judge bug must never be charged to the agent
            self.log.append({"judge_exception": traceback.format_exc()})
            evaluation.verdict, evaluation.reason = Verdict.ERROR, "judge"
            evaluation.detail = f"judge fault: {type(exc).__name__}: {exc}"
        finally:
            with self.stage("teardown"):
                if self.sandbox is not None:
                    self.sandbox.close()
                shutil.rmtree(self.workdir / "tree", ignore_errors=True)
        total = time.perf_counter() - total_start
        self.stages["total"] = round(total, 4)
        self.metrics["engine_s"] = round(self.engine_s, 4)
        self.metrics["overhead_s"] = round(total - self.engine_s, 4)
        self.metrics["stage_engine_s"] = self.stage_engine
        evaluation.metrics, evaluation.stages, evaluation.flags = (
            self.metrics,
            self.stages,
            self.flags,
        )
        evaluation.finished_at = time.time()
        self.write_log(evaluation)
        return evaluation

    def write_log(self, evaluation: Evaluation) -> None:
        """The private record of this evaluation (engine stderr included): for the operator only."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        record = {"evaluation": evaluation.to_dict(), "log": self.log}
        (self.workdir / "log.json").write_text(json.dumps(record, indent=1, default=str))

    def pipeline(self) -> None:
        task, judge = self.task, self.judge
        tree = self.workdir / "tree"
        shutil.rmtree(tree, ignore_errors=True)
        with self.stage("checkout"):
            extract_tree(self.job.repo, self.job.commit, tree, judge.max_tree_mb << 20)
        with self.stage("integrity"):
            check_integrity(
                tree, list(task.frozen), self.home.frozen_hashes, list(task.package_names)
            )
        with self.stage("sandbox"):
            self.sandbox = Sandbox(
                judge.sandbox,
                judge.device,
                owner=self.home.owner,
                tag=f"{self.home.owner}-{self.job.id}",
            )
            # Both containers start at once: starting one takes ~0.3 s of the engine's time.
            with ThreadPoolExecutor(max_workers=2) as pool:
                cand = pool.submit(self.sandbox.container, "candidate", tree)
                base = pool.submit(self.sandbox.container, "baseline", self.home.baseline)
                self.cand, self.base = cand.result(), base.result()
            serve = self.sandbox.serve_argv(list(task.serve))
            self.base_engine = self.base.engine(serve, "baseline")
            with self.cand.frozen():
                self.base_call({"op": "load"}, judge.load_timeout_s)
        if task.build:
            with self.stage("build"):
                code, output = self.cand.run(
                    self.sandbox.serve_argv(list(task.build)), judge.build_timeout_s
                )
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
        with self.stage("load"):
            batched = self.cand.engine(serve, "batched")
            self.call(batched, {"op": "load"}, judge.load_timeout_s, "load")
        with self.stage("correctness"):
            self.correctness(batched)
        with self.stage("b1"):
            self.b1_pairs(serve)
        with self.stage("alternating"):
            self.alternating(serve)
        with self.stage("timing"):
            self.timing(batched)

    def correctness(self, engine: EngineProcess) -> None:
        ratios: dict[str, float] = {}
        for case in self.task.cases:
            start = time.perf_counter()
            ratio = None
            for attempt, prefix in enumerate(("case", "confirm")):
                set_name = f"{prefix}:{case.name}"
                context = f"case {case.name}" + (" (confirmation set)" if attempt else "")
                prefill_s, _, tokens = self.run_set(engine, set_name, context)
                self.verify(set_name, tokens, "mismatch", context)
                base_prefill, _ = self.base_set(set_name, decode=False)
                ratio = prefill_s / base_prefill
                if prefill_s <= self.prefill_cap(base_prefill):
                    break
                if attempt == 0 and self.judge.confirm_timing_failures:
                    continue
                rechecks = (
                    self.prefill_over_cap_again(
                        engine, set_name, case.prompt_len, f"case {case.name}"
                    )
                    if self.judge.confirm_timing_failures
                    else []
                )
                if rechecks is None:
                    break
                raise Outcome(
                    Verdict.WRONG,
                    "prefill_cap",
                    f"case {case.name}: prefill took {prefill_s:.3f} s, over the cap of "
                    f"{self.judge.prefill_cap_factor}x the baseline's {base_prefill:.3f} s"
                    " for the same case"
                    + (
                        f"; over it on both hidden sets and on all {len(rechecks)} re-checks"
                        f" with fresh prompts (ratios {', '.join(f'{r:.2f}' for r in rechecks)})"
                        if rechecks
                        else ""
                    ),
                    tokens_correct=True,
                )
            ratios[case.name] = round(float(ratio or 0.0), 4)
            self.stages[f"correctness:{case.name}"] = round(time.perf_counter() - start, 4)
        self.metrics["prefill_ratio"] = ratios

    def b1_pairs(self, serve: list[str]) -> None:
        """B=1 decode against the baseline, ABBA pairs in fresh processes, judged beyond noise.

        Each pair gives a ratio (candidate / baseline decode time). A median over the limit
        gets more pairs on fresh hidden prompts, up to ``max_pairs``; it is charged only on the
        full set, and only if an exact one-sided sign test rejects "median ratio <= limit" at
        ``judge.b1_alpha`` (at least :func:`sign_test_count` of the pairs above the limit). So
        an innocent candidate is convicted with probability below ``b1_alpha`` whatever the
        machine's noise; a suspicious but unproven regression passes, flagged ``b1_unresolved``.
        """
        assert self.cand is not None
        b1, limit = self.task.b1, 1.0 + self.task.spec.b1_max_regression
        alpha = self.judge.b1_alpha
        engine = self.cand.engine(serve, "single")
        self.call(
            engine, {"op": "load"}, self.judge.load_timeout_s, "load (single-sequence process)"
        )
        ratios: list[float] = []
        while True:
            first = len(ratios)
            for i in range(first, min(first + b1.pairs, b1.max_pairs)):
                set_name = f"b1:{i}"
                context = f"B=1 run {i + 1}"
                # ABBA: alternate who goes first so slow drift cancels out.
                times = {}
                for who in ("cand", "base") if i % 2 == 0 else ("base", "cand"):
                    if who == "cand":
                        _, times["cand"], tokens = self.run_set(engine, set_name, context)
                        self.verify(set_name, tokens, "mismatch", context)
                    else:
                        _, times["base"] = self.base_set(set_name, decode=True)
                ratios.append(times["cand"] / times["base"])
            median = float(np.median(ratios))
            suspicious = median > limit
            # A conviction always rests on every pair: the test is run once, at max_pairs.
            complete = len(ratios) >= b1.max_pairs or not self.judge.confirm_timing_failures
            if not suspicious or complete:
                break
        engine.close()
        above = sum(r > limit for r in ratios)
        needed = sign_test_count(len(ratios), alpha)
        proven = complete and above >= needed
        lower = median_lower_bound(ratios, alpha)
        _, se = median_and_se(ratios)
        q = np.quantile(ratios, [0.25, 0.75])
        self.metrics.update(
            b1_ratio=round(median, 4),
            b1_se=round(se, 4),
            b1_lower=round(lower, 4),
            # How far below the median the judge's (1 - alpha) bound sits: the smallest excess
            # over the limit this evaluation could have convicted.
            b1_resolution=round(median - lower, 4),
            b1_above_limit=above,
            b1_needed=needed,
            b1_ratio_q25=round(float(q[0]), 4),
            b1_ratio_q75=round(float(q[1]), 4),
            b1_ratio_min=round(min(ratios), 4),
            b1_ratio_max=round(max(ratios), 4),
            b1_pairs=len(ratios),
        )
        if proven:
            raise Outcome(
                Verdict.WRONG,
                "b1_regression",
                f"B=1 decode is {100 * (median - 1):.1f}% slower than the baseline: {above} of "
                f"{len(ratios)} interleaved pairs over the {100 * (limit - 1):.0f}% limit "
                f"(exact sign test, one-sided p <= {alpha:g}; a {100 * (1 - alpha):g}% lower "
                f"bound of the slowdown is {100 * (lower - 1):.1f}%)",
                tokens_correct=True,
            )
        if suspicious:
            self.flags["b1_unresolved"] = True

    def alternating(self, serve: list[str]) -> None:
        assert self.cand is not None
        engine = self.cand.engine(serve, "alternating")
        self.call(engine, {"op": "load"}, self.judge.load_timeout_s, "load (alternating process)")
        for r in range(self.task.alternating.rounds):
            for mode in ("batched", "single"):
                set_name = f"alt:{r}:{mode}"
                context = (
                    f"alternating check, round {r + 1}, {mode} decode after "
                    + (
                        "a single decode"
                        if mode == "batched" and r
                        else "a fresh start"
                        if mode == "batched"
                        else "a batched decode"
                    )
                    + " in the same process"
                )
                _, _, tokens = self.run_set(engine, set_name, context)
                self.verify(set_name, tokens, "alternating", context)
        engine.close()

    def timing(self, engine: EngineProcess) -> None:
        timing = self.task.timing
        tokens_per_run = timing.batch * timing.new_tokens
        cand: list[float] = []
        base: list[float] = []
        over_cap = 0
        prefill_ratios = []
        pair_ratios: list[float] = []
        for i in range(max(timing.runs, timing.baseline_runs)):
            set_name = f"timing:{i}"
            cand_tok_s = base_tok_s = None
            # Candidate and baseline on the same hidden set, back to back, the order alternating:
            # a pair shares the machine's state of the moment, so load bursts cancel in its ratio.
            for who in ("cand", "base") if i % 2 == 0 else ("base", "cand"):
                if who == "cand" and i < timing.runs:
                    prefill_s, decode_s, tokens = self.run_set(
                        engine, set_name, f"timing run {i + 1}"
                    )
                    self.verify(set_name, tokens, "mismatch", f"timing run {i + 1}")
                    cand_tok_s = tokens_per_run / decode_s
                    cand.append(cand_tok_s)
                elif who == "base":
                    base_prefill, base_decode = self.base_set(
                        set_name, decode=i < timing.baseline_runs
                    )
                    if base_decode:
                        base_tok_s = tokens_per_run / base_decode
                        base.append(base_tok_s)
            if cand_tok_s is not None and base_tok_s is not None:
                pair_ratios.append(cand_tok_s / base_tok_s)
            if i < timing.runs:
                prefill_ratios.append(prefill_s / base_prefill)
                over_cap += prefill_s > self.prefill_cap(base_prefill)
        self.metrics["timing_prefill_ratio"] = round(statistics.median(prefill_ratios), 4)
        if over_cap >= 2 or (over_cap and not self.judge.confirm_timing_failures):
            rechecks = (
                self.prefill_over_cap_again(engine, "timing:0", timing.prompt_len, "timing runs")
                if self.judge.confirm_timing_failures
                else []
            )
            if rechecks is not None:
                raise Outcome(
                    Verdict.WRONG,
                    "prefill_cap",
                    f"prefill over {self.judge.prefill_cap_factor}x the baseline's in {over_cap}"
                    f" of {len(prefill_ratios)} timing runs"
                    + (
                        f" and on all {len(rechecks)} re-checks with fresh prompts"
                        if rechecks
                        else ""
                    ),
                    tokens_correct=True,
                )
        tok_s, base_tok_s = statistics.median(cand), statistics.median(base)
        # x is the median of the paired ratios (not a ratio of medians of unpaired runs).
        x = statistics.median(pair_ratios) if pair_ratios else tok_s / base_tok_s
        self.metrics.update(
            tok_s=round(tok_s, 3),
            tok_s_runs=[round(v, 3) for v in cand],
            baseline_tok_s=round(base_tok_s, 3),
            baseline_tok_s_runs=[round(v, 3) for v in base],
            x_baseline=round(x, 4),
            x_baseline_pairs=[round(v, 4) for v in pair_ratios],
            target_x_baseline=self.task.spec.target_x_baseline,
            hit_target=bool(x >= self.task.spec.target_x_baseline),
        )
