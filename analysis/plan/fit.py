"""What the planner reads from a finished run: its judge jobs, its seats' pace and the judge's
service time per outcome.

Everything comes from the run's own record (``events.sqlite`` through ``analysis.tables`` and the
``stages`` column, read-only): nothing is assumed about the task. Times are seconds since the
run started (the agents' phase starts there: ``runrecord.agents_phase``).

Outcome classes (what an evaluation cost the judge): ``PASS`` (every stage ran), ``WRONG
<reason>`` (stopped at the check named by the reason: ``alternating``, ``mismatch``, ...),
``REJECT`` (integrity: seconds), ``ERROR``, and ``duplicate`` (an identical tree answered from
an earlier verdict, ``judge.duplicates``: no stage ran).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.tables import Tables, is_run_dir, load_run, sweep_jobs
from runrecord import PSEUDO_AGENTS, REJUDGING_AGENTS

__all__ = [
    "UNTIMED_STAGES",
    "ArmPace",
    "Fit",
    "Job",
    "RunRecord",
    "fit_runs",
    "outcome_class",
    "read_run",
    "run_dirs",
]

#: The stages that measure nothing (the candidate's checkout, integrity scan, container start,
#: build and model load): what a machine with spare CPUs could run beside the timed job.
UNTIMED_STAGES = ("checkout", "integrity", "sandbox", "build", "load")
#: Service time of a duplicate when a run recorded none (the verdict is copied: no stage runs).
DEFAULT_DUPLICATE_S = 0.05


def outcome_class(verdict: str, reason: str, duplicate_of: Any) -> str:
    """The outcome class of one evaluation (see the module's text)."""
    if duplicate_of is not None and not pd.isna(duplicate_of):
        return "duplicate"
    if verdict == "WRONG":
        return f"WRONG {reason}" if reason else "WRONG"
    return verdict


@dataclass(frozen=True)
class Job:
    """One submission as the judge saw it (or would have: ``judged`` False never was)."""

    arm: str
    agent: str
    # Whose turn it takes under the fair policy (its arm; ``run/arm`` across runs).
    fair_key: str
    enqueued_s: float
    # Judge seconds it took (``finished_at - started_at``); for a duplicate, its own few
    # milliseconds, with ``full_s`` the seconds of the evaluation it copied.
    service_s: float
    full_s: float
    untimed_s: float
    outcome: str
    verdict: str
    tree: str = ""
    job_id: int | None = None
    duplicate_of: int | None = None
    x_baseline: float | None = None
    judged: bool = True
    started_s: float | None = None
    finished_s: float | None = None
    pseudo: bool = False


@dataclass
class RunRecord:
    """One finished run, as the planner uses it."""

    run_id: str
    run_dir: Path
    policy: str
    devices: int
    dedupe: str
    # The agents' phase in seconds (start to the re-judging): the replay's horizon.
    phase_s: float
    # The budget the run was given (``budget.minutes``), else the phase.
    budget_s: float
    arms: list[str]
    seats: dict[str, list[str]]
    jobs: list[Job]
    # Per arm: the seats' waits between a verdict and their next submission, and their first.
    think_s: dict[str, list[float]]
    first_s: dict[str, list[float]]
    # What the run's own tables measured (analysis.tables' arms rows, summed over arms).
    measured: dict[str, float]
    tables: Tables | None = None
    # budget.evaluations when its scope is per arm (the run ends once they are judged).
    evaluations_per_arm: int | None = None
    # What ended the run (meta ``ended_by``: ``deadline``, ``evaluations``, ``interrupted``...).
    ended_by: str = ""


def run_dirs(paths: list[Path]) -> list[Path]:
    """The run folders of ``paths``: each a run, or a sweep whose jobs with an event log count."""
    found: list[Path] = []
    for path in map(Path, paths):
        if is_run_dir(path):
            found.append(path)
            continue
        jobs = [j for j in sweep_jobs(path) if is_run_dir(j)]
        if not jobs:
            raise ValueError(f"{path} is neither a run folder nor a sweep with runs in it")
        found.extend(jobs)
    return found


def _stages(run_dir: Path) -> dict[int, dict[str, float]]:
    """Each evaluation's recorded stage durations, by job id (read-only)."""
    uri = f"file:{run_dir / 'events.sqlite'}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute("SELECT job_id, stages FROM evaluations").fetchall()
    return {int(job): json.loads(text or "{}") for job, text in rows}


def _float(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _measured(tables: Tables, phase_s: float) -> dict[str, float]:
    """The run's own judge numbers, from the arms rows ``analysis.tables`` builds: evaluations
    in the agents' phase, judge utilisation (busy seconds ÷ phase) and the mean queue wait of
    the agents' jobs (each arm's mean weighted by its evaluations)."""
    arms = tables.arms
    evaluations = float(pd.to_numeric(arms["judge_evaluations"]).sum())
    busy = float(pd.to_numeric(arms["judge_seconds"]).sum())
    own = pd.to_numeric(arms["evaluations"]).fillna(0)
    waits = pd.to_numeric(arms["mean_queue_wait_s"]).fillna(0)
    mean_wait = float((own * waits).sum() / own.sum()) if own.sum() else 0.0
    return {
        "evaluations": evaluations,
        "utilisation": busy / phase_s if phase_s > 0 else 0.0,
        "mean_queue_wait_s": mean_wait,
    }


def read_run(run_dir: Path, *, multi: bool = False) -> RunRecord:
    """Read one finished run's judge jobs and seats' pace.

    Args:
        run_dir: The run folder (holding ``events.sqlite``).
        multi: True when several runs are read together: fair keys become ``run/arm``.

    Returns:
        The run's :class:`RunRecord`. Re-judgements after the deadline (``rejudge``,
        ``baseline``) are left out: they are not the agents' phase.
    """
    tables = load_run(Path(run_dir), git=False)
    info = tables.runs[0]
    judge_cfg = info.config.get("judge") or {}
    budget_cfg = info.config.get("budget") or {}
    stages = _stages(Path(run_dir))
    ev = tables.evaluations
    ev = ev[~ev["agent"].isin(REJUDGING_AGENTS)]
    by_job = {int(r.job_id): r for r in ev.itertuples()}
    jobs: list[Job] = []
    for r in ev.itertuples():
        st = stages.get(int(r.job_id), {})
        service = max(float(r.duration_s), 0.0)
        dup = None if pd.isna(r.duplicate_of) else int(r.duplicate_of)
        original = by_job.get(dup) if dup is not None else None
        full = max(float(original.duration_s), 0.0) if original is not None else service
        untimed = min(sum(float(st.get(s, 0.0)) for s in UNTIMED_STAGES), service)
        jobs.append(
            Job(
                arm=r.arm,
                agent=r.agent,
                fair_key=f"{info.run_id}/{r.arm}" if multi else r.arm,
                enqueued_s=float(r.t_enqueued_s),
                service_s=service,
                full_s=full,
                untimed_s=untimed,
                outcome=outcome_class(r.verdict, r.reason or "", r.duplicate_of),
                verdict=r.verdict,
                tree=r.tree if isinstance(r.tree, str) else "",
                job_id=int(r.job_id),
                duplicate_of=dup,
                x_baseline=_float(r.x_baseline) if r.verdict == "PASS" else None,
                started_s=float(r.t_start_s),
                finished_s=float(r.t_end_s),
                pseudo=r.agent in PSEUDO_AGENTS,
            )
        )
    subs = tables.submissions
    subs = subs[~subs["agent"].isin(PSEUDO_AGENTS)]
    judged_ids = set(by_job)
    for r in subs.itertuples():
        if pd.isna(r.job_id) or int(r.job_id) not in judged_ids:
            # Queued but never judged (withdrawn at the deadline): its cost is unknown, so it
            # takes its arm's median judge time (``_fill_unjudged``).
            jobs.append(
                Job(
                    arm=r.arm,
                    agent=r.agent,
                    fair_key=f"{info.run_id}/{r.arm}" if multi else r.arm,
                    enqueued_s=float(r.t_s),
                    service_s=float("nan"),
                    full_s=float("nan"),
                    untimed_s=0.0,
                    outcome="not evaluated",
                    verdict="",
                    judged=False,
                )
            )
    jobs = _fill_unjudged(jobs)
    jobs.sort(key=lambda j: (j.enqueued_s, j.job_id if j.job_id is not None else 1 << 60))
    think, first = _pace(subs, info.phase.seconds)
    seats: dict[str, list[str]] = defaultdict(list)
    for seat in info.seats:
        if seat.role != "critic":
            seats[seat.arm].append(seat.agent)
    budget_min = budget_cfg.get("minutes")
    phase_s = info.run_seconds
    return RunRecord(
        run_id=info.run_id,
        run_dir=Path(run_dir),
        policy=str(judge_cfg.get("queue_policy", "fifo")),
        devices=int(judge_cfg.get("devices", 1) or 1),
        dedupe=str(judge_cfg.get("duplicates", "off")),
        phase_s=phase_s,
        budget_s=float(budget_min) * 60 if budget_min else phase_s,
        arms=list(info.arms),
        seats={a: seats.get(a, []) for a in info.arms},
        jobs=jobs,
        think_s=think,
        first_s=first,
        measured=_measured(tables, phase_s),
        tables=tables,
        evaluations_per_arm=_per_arm_evaluations(budget_cfg),
        ended_by=str(info.meta.get("ended_by") or ""),
    )


def _per_arm_evaluations(budget: dict[str, Any]) -> int | None:
    limit = budget.get("evaluations")
    scope = (budget.get("scope") or {}).get("evaluations", "per_arm")
    return int(limit) if limit is not None and scope == "per_arm" else None


def _fill_unjudged(jobs: list[Job]) -> list[Job]:
    """A job never judged takes its arm's median judge seconds, else the run's (an arm with
    nothing judged yet), else 0."""
    judged = pd.Series([j.full_s for j in jobs if j.judged], dtype=float)
    overall = float(judged.median()) if len(judged) else 0.0
    medians = {}
    for arm in {j.arm for j in jobs}:
        mine = pd.Series([j.full_s for j in jobs if j.arm == arm and j.judged], dtype=float)
        medians[arm] = float(mine.median()) if len(mine) else overall
    return [j if j.judged else replace(j, service_s=medians[j.arm], full_s=medians[j.arm])
            for j in jobs]  # fmt: skip


def _pace(subs: pd.DataFrame, phase_s: float) -> tuple[dict[str, list[float]], dict]:
    """Per arm, each seat's wait from a verdict to its next submission (never negative: a seat
    that submitted before its verdict came counts 0) and each seat's first submission time."""
    think: dict[str, list[float]] = defaultdict(list)
    first: dict[str, list[float]] = defaultdict(list)
    for (arm, _agent), rows in subs.sort_values("t_s").groupby(["arm", "agent"], sort=True):
        times = rows["t_s"].astype(float).tolist()
        verdicts = pd.to_numeric(rows["t_verdict_s"], errors="coerce").tolist()
        first[arm].append(times[0])
        for prev_at, prev_verdict, at in zip(times, verdicts, times[1:], strict=False):
            ready = prev_at if pd.isna(prev_verdict) else prev_verdict
            think[arm].append(max(0.0, at - ready))
    return dict(think), dict(first)


@dataclass
class ArmPace:
    """One arm's fitted submission process and outcome mix."""

    arm: str
    seats: int
    submissions: int
    per_seat_hour: float
    think_s: list[float]
    first_s: list[float]
    # Outcome class -> share of the arm's submissions, and its (untimed, timed) samples.
    mix: dict[str, float] = field(default_factory=dict)
    service: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


@dataclass
class Fit:
    """Every run read, and per arm the fitted submission process and service times."""

    runs: list[RunRecord]
    arms: dict[str, ArmPace]
    duplicate_s: float

    @property
    def horizon_s(self) -> float:
        """The budget the runs were given (the longest), the table's default horizon."""
        return max(r.budget_s for r in self.runs)


def fit_runs(runs: list[RunRecord]) -> Fit:
    """Pool the runs per arm: think times, first-submission times, outcome mix and each
    outcome's (untimed, timed) service samples; seats counted per run and summed."""
    arms: dict[str, ArmPace] = {}
    dup_samples: list[float] = []
    for run in runs:
        for arm in run.arms:
            pace = arms.setdefault(arm, ArmPace(arm, 0, 0, 0.0, [], []))
            pace.seats += len(run.seats.get(arm, []))
            pace.think_s += run.think_s.get(arm, [])
            pace.first_s += run.first_s.get(arm, [])
        for job in run.jobs:
            if job.pseudo or not job.judged:
                continue
            pace = arms[job.arm]
            pace.submissions += 1
            pace.service.setdefault(job.outcome, []).append(
                (job.untimed_s, max(job.service_s - job.untimed_s, 0.0))
            )
            if job.outcome == "duplicate":
                dup_samples.append(job.service_s)
    seat_hours: dict[str, float] = defaultdict(float)
    for run in runs:
        for arm in run.arms:
            seat_hours[arm] += len(run.seats.get(arm, [])) * run.phase_s / 3600
    for pace in arms.values():
        total = sum(len(v) for v in pace.service.values())
        pace.mix = {k: len(v) / total for k, v in sorted(pace.service.items())} if total else {}
        pace.per_seat_hour = pace.submissions / seat_hours[pace.arm] if seat_hours[pace.arm] else 0
    dup = float(pd.Series(dup_samples).median()) if dup_samples else DEFAULT_DUPLICATE_S
    return Fit(runs=runs, arms=arms, duplicate_s=dup)
