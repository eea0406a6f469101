"""The per-arm facts of a run, computed once: ``runner.summary`` (``summary.csv``) and
``analysis.tables`` (the ``arms`` table) both take them from here, so they agree by construction.

Each reader turns its rows into ``Judged`` records (one per evaluation) and calls ``arm_facts``;
the values are unrounded. The per-arm row's columns (``runrecord.row``) are made from them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from runrecord.model_calls import SeatOutage
from runrecord.names import BASELINE, PSEUDO_AGENTS, REJUDGE, REJUDGING_AGENTS, rejudging_started_at


class _Metric(Protocol):  # judge.kinds.Metric, as far as the facts use it
    def better(self, a: float, b: float) -> bool: ...


class Judged(NamedTuple):
    """One evaluation as the facts need it (``score`` in the run's metric; None if it has none).

    A named tuple, not a dataclass: a large log has ~10^5 evaluations and the analysis makes one
    per row (``Judged._make`` is several times faster than a frozen dataclass's ``__init__``).
    """

    job_id: int
    arm: str
    agent: str
    commit: str
    verdict: str
    score: float | None
    x_baseline: float | None
    started_at: float
    finished_at: float
    queue_wait_s: float
    # The earlier job whose verdict this one reuses (judge.duplicates: the same tree); None:
    # judged itself. A duplicate is no new measurement and cost the judge no time.
    duplicate_of: int | None = None


#: ``Judged``'s fields in order: the ``evaluations`` table's column names.
JUDGED_FIELDS = (
    "job_id", "arm", "agent", "commit", "verdict", "score", "x_baseline", "started_at",
    "finished_at", "queue_wait_s", "duplicate_of",
)  # fmt: skip


def judged_rows(rows: Iterable[Sequence[Any]]) -> list[Judged]:
    """``Judged`` records from value rows in ``JUDGED_FIELDS`` order (missing scores: NaN or
    None, as pandas or SQLite give them)."""
    return [
        Judged(
            job_id=int(job),
            arm=str(arm),
            agent=str(agent),
            commit=str(commit),
            verdict=str(verdict),
            score=optional(score),
            x_baseline=optional(x),
            started_at=float(t0),
            finished_at=float(t1),
            queue_wait_s=float(wait),
            duplicate_of=None if optional(dup) is None else int(dup),
        )
        for job, arm, agent, commit, verdict, score, x, t0, t1, wait, dup in rows
    ]


class Submitted(NamedTuple):
    """One submission as the facts need it (``job_id`` None: never queued)."""

    agent: str
    job_id: int | None


@dataclass(frozen=True)
class Phase:
    """The agents' phase of a run: its start to the runner's re-judging (else to its end)."""

    started_at: float
    ended_at: float

    @property
    def seconds(self) -> float:
        return max(self.ended_at - self.started_at, 0.0)


def agents_phase(meta: Mapping[str, Any], last_event_at: float | None = None) -> Phase:
    """The agents' phase from a run's metadata.

    Args:
        meta: The run's metadata (``started_at``, ``rejudging_started_at``, ``ended_at``, ...).
        last_event_at: The last event's time, for a run that never recorded its end.

    Returns:
        From ``started_at`` to the re-judging, else ``ended_at``, else the last event, else the
        deadline.
    """
    started = float(meta.get("started_at") or last_event_at or 0.0)
    end = rejudging_started_at(meta)
    if end is None:
        for value in (meta.get("ended_at"), last_event_at, meta.get("deadline")):
            if value is not None:
                end = float(value)
                break
    return Phase(started, started if end is None else end)


def optional(value: Any) -> float | None:
    """A float, or None for None, NA and NaN (pandas' missing values)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def best_pass(judged: Iterable[Judged], metric: _Metric) -> Judged | None:
    """The agents' PASS with the best score (the first one on a tie)."""
    best = None
    for j in judged:
        if j.agent in PSEUDO_AGENTS or j.verdict != "PASS" or j.score is None:
            continue
        if best is None or metric.better(j.score, best.score):
            best = j
    return best


def judge_noise(judged: Iterable[Judged]) -> float | None:
    """The judge's own noise: the standard deviation of ``x_baseline`` over the start commit's
    re-judgements (PASSes), pooled over every arm given; None below two of them."""
    x = [j.x_baseline for j in judged if j.agent == BASELINE and j.verdict == "PASS"]
    x = [v for v in x if v is not None]
    return statistics.stdev(x) if len(x) >= 2 else None


def busy_seconds(spans: Iterable[tuple[float, float]], phase: Phase) -> float:
    """Judge seconds inside the agents' phase: each evaluation's ``(started_at, finished_at)``
    clipped to it (one still running when the drain ended finishes during the re-judging; only
    its part inside the phase is the agents')."""
    return sum(
        max(0.0, min(end, phase.ended_at) - max(start, phase.started_at)) for start, end in spans
    )


def _median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


@dataclass(frozen=True)
class ArmFacts:
    """What one arm's record says, every number unrounded (see the module's text)."""

    arm: str
    submissions: int  # the agents' (pseudo-agents' left out)
    evaluations: int  # the agents'
    # Of those, how many reused an earlier verdict of the same tree (no judge time).
    duplicates: int
    pass_: int
    wrong: int
    reject: int
    error: int
    not_evaluated: int
    best: Judged | None
    best_score: float | None
    best_x_baseline: float | None
    time_to_best_s: float | None
    # The best judged again after the deadline: every verdict, and the median of its PASSes.
    rejudged_verdicts: str
    rejudged_score: float | None
    rejudged_x_baseline: float | None
    # The agents' phase: their evaluations plus any champion re-measurement.
    judge_evaluations: int
    judge_seconds: float
    # judge_seconds / the phase's seconds (None for a phase of no length).
    judge_utilisation: float | None
    full_evaluation_s: float | None  # median duration of a PASS in the phase
    mean_queue_wait_s: float | None


def arm_facts(
    arm: str,
    judged: Sequence[Judged],
    submitted: Iterable[Submitted],
    phase: Phase,
    metric: _Metric,
) -> ArmFacts:
    """The facts of one arm.

    Args:
        arm: The arm's name.
        judged: The arm's evaluations, pseudo-agents' included, in job order.
        submitted: The arm's submissions, pseudo-agents' included.
        phase: The agents' phase (``agents_phase``).
        metric: The run's metric (``judge.kinds.run_metric``).
    """
    mine = [j for j in judged if j.agent not in PSEUDO_AGENTS]
    verdicts = [j.verdict for j in mine]
    evaluated = {j.job_id for j in mine}
    own = [s for s in submitted if s.agent not in PSEUDO_AGENTS]
    best = best_pass(mine, metric)
    rejudged = sorted((j for j in judged if j.agent == REJUDGE), key=lambda j: j.job_id)
    rejudged_pass = [j for j in rejudged if j.verdict == "PASS"]
    in_phase = [j for j in judged if j.agent not in REJUDGING_AGENTS]
    busy = busy_seconds(((j.started_at, j.finished_at) for j in in_phase), phase)
    waits = [j.queue_wait_s for j in mine]
    return ArmFacts(
        arm=arm,
        submissions=len(own),
        evaluations=len(mine),
        duplicates=sum(1 for j in mine if j.duplicate_of is not None),
        pass_=verdicts.count("PASS"),
        wrong=verdicts.count("WRONG"),
        reject=verdicts.count("REJECT"),
        error=verdicts.count("ERROR"),
        not_evaluated=sum(1 for s in own if s.job_id not in evaluated),
        best=best,
        best_score=best.score if best else None,
        best_x_baseline=best.x_baseline if best else None,
        time_to_best_s=best.finished_at - phase.started_at if best else None,
        rejudged_verdicts=",".join(j.verdict for j in rejudged),
        rejudged_score=_median(j.score for j in rejudged_pass),
        rejudged_x_baseline=_median(j.x_baseline for j in rejudged_pass),
        judge_evaluations=len(in_phase),
        judge_seconds=busy,
        judge_utilisation=busy / phase.seconds if phase.seconds > 0 else None,
        full_evaluation_s=_median(
            j.finished_at - j.started_at
            for j in in_phase
            if j.verdict == "PASS" and j.duplicate_of is None
        ),
        mean_queue_wait_s=sum(waits) / len(waits) if waits else None,
    )


@dataclass(frozen=True)
class ModelCallFacts:
    """An arm's seats' calls through the model proxy."""

    calls: int
    failures: int
    lost_s: float  # rounded to the millisecond, as the seats' outages are
    wire_output_tokens: int


def model_call_facts(
    arm: str, outages: Mapping[tuple[str, str], SeatOutage], calls: Iterable[Mapping[str, Any]]
) -> ModelCallFacts:
    """The arm's calls, failed calls and seat-seconds lost (``runrecord.model_calls``), and the
    output tokens the vendor reported for its seats' calls (read on the wire by the proxy)."""
    seats = [o for (a, _), o in outages.items() if a == arm]
    wire = 0
    for call in calls:
        if call.get("arm") == arm and call.get("agent"):
            output = optional(call.get("output"))
            wire += int(output) if output is not None else 0
    return ModelCallFacts(
        calls=sum(o.calls for o in seats),
        failures=sum(o.failed for o in seats),
        lost_s=round(sum(o.lost_s for o in seats), 3),
        wire_output_tokens=wire,
    )
