"""The run of one evaluation, shared by every task kind: its stages, the judge-fault rule, the
redaction once hidden inputs were sent, and the private log.

A kind's evaluator makes one :class:`Run` subclass per job and calls :meth:`Run.execute`; the
subclass writes only :meth:`Run.pipeline` (the kind's stages and checks) and, where it holds
anything to release, :meth:`Run.teardown`. Everything that decides what an agent may be told
lives here, once:

- an :class:`~judge.verdict.Outcome` raised by a check is the verdict (WRONG/REJECT, with the
  check's judge-made detail);
- an :class:`~judge.sandbox.InfrastructureFault` is an ERROR (re-queued, never charged);
- any other exception is a judge fault: ERROR ``judge``, its traceback in the private log
  only, and its message shown only while :attr:`Run.hidden_sent` is False (after that, an
  exception's text could quote a hidden input).

A watchdog bounds every evaluation (:meth:`Run.wall_bound_s`, the sum of its plan's limits):
every send and read on a sandbox's process has a deadline, so it never fires unless the judge
waits somewhere without one (a judge bug; a candidate that stopped reading its stdin while
flooding its stderr once hung the whole serial judge so). Then it hangs up every process the
run holds (:meth:`Run.hang_up`), which fails the blocked wait at once, and the evaluation is an
ERROR ``judge`` whatever that failure looked like (re-queued, never charged).

Every stage's wall time is added up in ``Evaluation.stages`` (:meth:`Run.stage`); the record
of the evaluation and its log go to ``<home>/evals/<job>-<attempt>/log.json``, for the
operator only.
"""

from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from judge.checkout import extract_tree
from judge.integrity import check_integrity
from judge.sandbox import InfrastructureFault, fault_reason
from judge.verdict import Evaluation, Outcome, Verdict

if TYPE_CHECKING:
    from judge.kinds.base import TaskKind
    from judge.private import JudgeHome
    from judge.queue import Job


def retry_limit(first_s: float, base_now_s: float, factor: float, floor_s: float) -> float:
    """The limit of a timed-out candidate request's one retry: ``factor`` times the baseline's
    time on the same request measured just now, plus ``floor_s``, never below ``first_s`` (the
    limit from the baseline's set-up time). On a machine that became slower since set-up the
    baseline is slower now too, and so the limit grows with it."""
    return max(first_s, factor * base_now_s + floor_s)


def baseline_scale(judge: Any) -> float:
    """How many times the candidate's limit the judge's own baseline may take on the same
    requests (``baseline_timeout_factor / timeout_factor``, 4 by default, never below 1): a
    baseline timeout convicts nothing and costs the evaluation (ERROR, re-queued), so load
    alone must not reach it."""
    return max(1.0, float(judge.baseline_timeout_factor) / float(judge.timeout_factor))


def pairs_bound_s(
    pairs: int, cand_s: float, judge: Any, base_runs: int = 1, slack_s: float = 0.0
) -> float:
    """The longest ``pairs`` candidate-and-baseline pairs of runs may take when every limit is
    used whole (for :meth:`Run.wall_bound_s`): in each, the candidate's run at its limit
    ``cand_s`` and ``base_runs`` of the baseline's at :func:`baseline_scale` times it; once
    per evaluation (a confirmed or answered timeout ends it), a timeout's confirmation: the
    baseline once more and the candidate's retry at its :func:`retry_limit`. ``slack_s`` is
    added to every run (a reply's transfer past its limit)."""
    base_s = baseline_scale(judge) * cand_s
    retry_s = retry_limit(cand_s, base_s, float(judge.timeout_factor), float(judge.timeout_floor_s))
    each = cand_s + base_runs * base_s + (1 + base_runs) * slack_s
    return pairs * each + base_s + retry_s + 2 * slack_s


def attempt_tag(owner: str, job_id: str) -> str:
    """The name part of one attempt's sandbox containers: ``{owner}-{job}-{6 hex}``, new to
    every attempt. A re-queued attempt must not reuse its last attempt's names: that attempt's
    deferred teardown may still be removing them, and Docker refuses a container of a name it
    is removing (409 "removal of container already in progress"), which turned a load-induced
    retry into an ERROR. Stale containers are found by their owner label, never by name."""
    return f"{owner}-{job_id}-{secrets.token_hex(3)}"


# The parts of an evaluation no plan limits (checkout, integrity, starting containers, the
# teardown): generous, as the watchdog must never cut a sound evaluation on a loaded machine.
SETUP_S = 600.0
# What a kind that does not say its plan's limits (:meth:`Run.wall_bound_s`) may spend in
# requests beyond its builds and loads.
DEFAULT_WORK_S = 3600.0


def checked_tree(run: Any) -> Path:
    """The job's tree, extracted into ``run.workdir/tree`` and checked against the frozen zone:
    every kind's first two stages (``checkout``, ``integrity``), timed in ``run.stage``. A run
    is any of the kinds' per-evaluation objects (``job``, ``task``, ``judge``, ``home``,
    ``workdir``, ``stage``)."""
    tree = run.workdir / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    with run.stage("checkout"):
        extract_tree(run.job.repo, run.job.commit, tree, run.judge.max_tree_mb << 20)
    with run.stage("integrity"):
        check_integrity(
            tree, list(run.task.frozen), run.home.frozen_hashes, list(run.task.package_names)
        )
    return tree


def hang_up_sandbox(sandbox: Any) -> None:
    """Hang up the engines of every container of ``sandbox`` (``Engine.hang_up``: its input
    ends and a blocked read of its output fails); the containers stay for the teardown."""
    for box in list(sandbox.containers):
        for process in list(getattr(box, "processes", ())):
            with suppress(Exception):
                process.hang_up()


class Run:
    """One evaluation of one job by one kind: the bookkeeping and the rules every kind shares.

    Attributes:
        kind: the task kind whose evaluation this is (its metric names the evaluation's score).
        stages: wall seconds per stage, added up over a stage's parts.
        metrics: what the evaluation measured (the kind's keys and the shared ones).
        flags: what the evaluation noticed without a verdict (near ties, unproven slowdowns).
        log: the private log (engine and server output included): the operator's only.
        hidden_sent: whether anything hidden has been sent to the candidate; from then on no
            text the candidate could have shaped (its stderr, an exception's message) is shown.
        eval_seed: the seed of every draw of this evaluation (in the private log for replay).
    """

    def __init__(self, kind: TaskKind, cfg: DictConfig, home: JudgeHome, job: Job) -> None:
        self.kind = kind
        self.cfg = cfg
        self.task = cfg.task
        self.judge = cfg.judge
        self.home = home
        self.job = job
        self.stages: dict[str, float] = {}
        self.metrics: dict[str, Any] = {}
        self.flags: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        self.hidden_sent = False
        self.overdue = False  # the watchdog fired (:meth:`overrun`)
        self._watchdog: threading.Timer | None = None
        self.workdir = home.evals / f"{job.id}-{job.attempts}"
        # Every draw of the evaluation (timing, B=1, re-check prompts, orders) comes from this
        # seed, new for every evaluation (kept in the private log so an operator can replay
        # them): no input that is timed was ever seen before, by any engine, in any evaluation.
        self.eval_seed = secrets.randbits(62)
        self.log.append({"eval_seed": self.eval_seed})

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name`` (added up: a pipeline may run a stage in parts)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = round(self.stages.get(name, 0.0) + time.perf_counter() - start, 4)

    def pipeline(self) -> None:
        """The kind's stages, in order: return for PASS, raise :class:`Outcome` for a verdict."""
        raise NotImplementedError

    def teardown(self, evaluation: Evaluation) -> None:
        """Release what the evaluation started (timed as the ``teardown`` stage); ``evaluation``
        holds its verdict so far. Never raises for a container that is already gone."""

    def wall_bound_s(self) -> float:
        """The longest this evaluation may take when every limit of its plan is used whole:
        past it the judge waits somewhere without a deadline (the watchdog's bound). A kind
        overrides it with its plan's limits; this default, from the judge's timeouts alone, is
        generous: :data:`SETUP_S`, two builds, both sides' loads at the baseline's limit, and
        :data:`DEFAULT_WORK_S` of requests."""
        judge = self.judge
        loads = 2 * baseline_scale(judge) * float(judge.load_timeout_s)
        return SETUP_S + 2 * float(judge.build_timeout_s) + loads + DEFAULT_WORK_S

    def watchdog_bound_s(self) -> float:
        """:meth:`wall_bound_s`; a backstop never fails an evaluation, so one the kind cannot
        compute (a judge bug, said in the private log) is the default, or failing that
        :data:`SETUP_S` + :data:`DEFAULT_WORK_S`."""
        for bound in (self.wall_bound_s, partial(Run.wall_bound_s, self)):
            try:
                return float(bound())
            except Exception:
                self.log.append({"watchdog_bound": traceback.format_exc()})
        return SETUP_S + DEFAULT_WORK_S

    def hang_up(self) -> None:
        """End every process this run holds (the watchdog's, from its own thread): a send or
        read blocked on one fails at once. This default hangs up the engines of
        ``self.sandbox``'s containers where the kind keeps one there; a kind holding more
        (servers, a load generator, another sandbox) overrides it. Never raises."""
        sandbox = getattr(self, "sandbox", None)
        if sandbox is not None:
            hang_up_sandbox(sandbox)

    def overrun(self) -> None:
        """The watchdog's: mark the evaluation a judge fault (:meth:`execute`), then hang up
        every process the run holds."""
        self.overdue = True
        self.log.append({"watchdog": "the evaluation overran its plan's limits"})
        try:
            self.hang_up()
        except Exception:  # the verdict is ERROR judge already; the log says what failed
            self.log.append({"watchdog_hang_up": traceback.format_exc()})

    def account(self, total_s: float) -> None:
        """Add the kind's own totals to :attr:`metrics` once the evaluation took ``total_s``."""

    def execute(self) -> Evaluation:
        """Run :meth:`pipeline` and make its verdict: the judge-fault rule and the redaction
        (module docstring), the stages timed, the private log written."""
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
            metric=self.kind.metric(self.task).to_dict(),
        )
        total_start = time.perf_counter()
        try:
            self._watchdog = threading.Timer(self.watchdog_bound_s(), self.overrun)
            self._watchdog.daemon = True
            self._watchdog.start()
            self.pipeline()
        except Outcome as outcome:
            evaluation.verdict, evaluation.reason, evaluation.detail = (
                outcome.verdict,
                outcome.reason,
                outcome.detail,
            )
            self.flags.update(outcome.flags)
        except InfrastructureFault as fault:
            evaluation.verdict, evaluation.reason = Verdict.ERROR, fault_reason(fault)
            evaluation.detail = str(fault)
            if getattr(fault, "private", None) is not None:  # e.g. a load generator's own words
                self.log.append({"fault": str(fault), "private": fault.private})  # type: ignore[attr-defined]
        except Exception as exc:  # a judge bug must never be charged to the agent
            self.log.append({"judge_exception": traceback.format_exc()})
            evaluation.verdict, evaluation.reason = Verdict.ERROR, "judge"
            evaluation.detail = f"judge fault: {type(exc).__name__}"
            if not self.hidden_sent:  # after that, its message could quote a hidden input
                evaluation.detail += f": {exc}"
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog.join()  # an overrun under way has finished: overdue is final
            if self.overdue:  # whatever failure the hang-up caused, it was the judge's wait
                evaluation.verdict, evaluation.reason = Verdict.ERROR, "judge"
                evaluation.detail = "judge fault: the evaluation overran its plan's limits"
            with self.stage("teardown"):
                self.teardown(evaluation)
        total = time.perf_counter() - total_start
        self.stages["total"] = round(total, 4)
        self.account(total)
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
