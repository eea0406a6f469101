"""After the deadline: each arm's best PASS and its starting commit are judged again.

An arm's best is the best of noisy measurements (on these VMs one evaluation's decode
throughput varies by ~20%), so the best number an arm saw is biased in its favour, the more so
the more it submitted: a winner's curse that favours the arm with more evaluations. The runner
therefore re-judges, after the agents have stopped and for every arm alike, the arm's best commit
(pseudo-agent ``confirm``, the name runs record) and its starting commit (pseudo-agent
``baseline``), interleaved across arms. The summary reports the median of the re-judgements of
the best next to the raw best, and the
spread of the starting commit's re-judgements is the judge's measured noise that the analysis
uses as its tie rule. None of these evaluations counts as an agent's.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from isolation.workspace import ArmWorkspace
from judge import JudgeQueue, Metric, run_metric
from runner.events import EventLog
from runner.gateway import fair_key

# Pseudo-agents: evaluations the runner asks for, never an agent's work.
CHAMPION = "champion"
# The arm's best judged again (the name is on disk in every run: it stays).
REJUDGE = "confirm"
BASELINE = "baseline"
PSEUDO_AGENTS = frozenset({CHAMPION, REJUDGE, BASELINE})


@dataclass(frozen=True)
class Rejudgement:
    """One re-judgement to queue."""

    arm: str
    agent: str
    repo: str
    commit: str
    round: int


def best_pass(evaluations: list[dict[str, Any]], arm: str, metric: Metric) -> dict[str, Any] | None:
    """The arm's agent evaluation with the best score among PASSes (first one on a tie): the
    highest, or the lowest where ``metric`` is lower-is-better."""
    best, best_score = None, None
    for e in evaluations:
        if e["arm"] != arm or e["agent"] in PSEUDO_AGENTS or e["verdict"] != "PASS":
            continue
        score = metric.score(json.loads(e["metrics"]))
        if score is not None and (best_score is None or metric.better(score, best_score)):
            best, best_score = e, score
    return best


def plan_rejudgements(
    events: EventLog, arms: list[ArmWorkspace], runs: int, baseline_runs: int
) -> list[Rejudgement]:
    """Round by round, arm by arm: each arm's best PASS ``runs`` times and its starting commit
    ``baseline_runs`` times, so that drift over the phase hits every arm alike."""
    meta = events.meta()
    metric = run_metric(meta)
    evaluations = events.table("evaluations")
    plan = []
    for r in range(max(runs, baseline_runs)):
        for arm in arms:
            best = best_pass(evaluations, arm.name, metric)
            if r < runs and best is not None:
                plan.append(
                    Rejudgement(arm.name, REJUDGE, str(arm.submissions), best["commit_sha"], r)
                )
            # The arm's starting point (the template, or a continuation's champion) is in its
            # origin; judged again and again it shows how far the same code's numbers spread.
            start = meta.get("start_commit")
            if r < baseline_runs and start:
                plan.append(Rejudgement(arm.name, BASELINE, str(arm.origin), start, r))
    return plan


def queue_rejudgements(events: EventLog, queue: JudgeQueue, plan: list[Rejudgement]) -> int:
    """Record each re-judgement as a submission of its pseudo-agent and queue it (idempotent:
    a resumed run does not queue the same round twice). Returns how many were queued now."""
    queued = 0
    run_id = str(events.meta().get("run_id") or "")
    for item in plan:
        sid, job = events.add_submission(
            item.arm,
            item.agent,
            # The request id is the key a resumed run finds its queued rounds by: kept as runs
            # recorded it.
            f"{item.arm}/{item.agent}/recheck-{item.round}",
            item.commit,
            f"re-judged by the runner after the deadline ({item.agent}, round {item.round + 1})",
        )
        if job is None:
            job = queue.enqueue(
                arm=item.arm,
                agent=item.agent,
                repo=item.repo,
                commit=item.commit,
                label=item.agent,
                fair_key=fair_key(run_id, item.arm),
                rejudge=True,  # judged afresh, never an earlier evaluation of the same tree
            )
            events.set_job(sid, job)
            queued += 1
    return queued


@dataclass(frozen=True)
class Rejudged:
    """What the re-judgements of one arm found."""

    confirm_verdicts: str
    confirmed_score: float | None
    confirmed_x_baseline: float | None
    baseline_x: list[float]


def rejudged(evaluations: list[dict[str, Any]], arm: str, metric: Metric) -> Rejudged:
    """The medians of the re-judgements of an arm's best (PASSes only) and of its start."""
    confirms = [e for e in evaluations if e["arm"] == arm and e["agent"] == REJUDGE]
    passed = [json.loads(e["metrics"]) for e in confirms if e["verdict"] == "PASS"]
    scores = [v for v in map(metric.score, passed) if v is not None]
    x = [m["x_baseline"] for m in passed if "x_baseline" in m]
    baseline_x = [
        json.loads(e["metrics"])["x_baseline"]
        for e in evaluations
        if e["arm"] == arm
        and e["agent"] == BASELINE
        and e["verdict"] == "PASS"
        and "x_baseline" in json.loads(e["metrics"])
    ]
    return Rejudged(
        confirm_verdicts=",".join(e["verdict"] for e in confirms),
        confirmed_score=round(statistics.median(scores), 3) if scores else None,
        confirmed_x_baseline=round(statistics.median(x), 4) if x else None,
        baseline_x=baseline_x,
    )
