"""After the deadline: each arm's best PASS and its starting commit are judged again.

An arm's best is the best of noisy measurements (on these VMs one evaluation's decode
throughput varies by ~20%), so the best number an arm saw is biased in its favour, the more so
the more it submitted: a winner's curse that favours the arm with more evaluations. The runner
therefore re-judges, after the agents have stopped and for every arm alike, the arm's best commit
(pseudo-agent ``rejudge``) and its starting commit (pseudo-agent ``baseline``), interleaved
across arms. The summary reports the median of the best's re-judgements next to the raw best,
and the spread of the starting commit's re-judgements is the judge's measured noise that the
analysis uses as its tie rule. None of these evaluations counts as an agent's. The names are the
run record's (``runrecord.names``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from isolation.workspace import ArmWorkspace
from judge import JudgeQueue, Metric, run_metric
from runner.events import EventLog
from runner.gateway import fair_key
from runrecord import BASELINE, PSEUDO_AGENTS, agent_name
from runrecord.names import rejudging_names


@dataclass(frozen=True)
class Rejudgement:
    """One re-judgement to queue."""

    arm: str
    agent: str
    repo: str
    commit: str
    round: int
    # The submission's request id: what a resumed run finds its queued rounds by.
    request_id: str


def best_pass(evaluations: list[dict[str, Any]], arm: str, metric: Metric) -> dict[str, Any] | None:
    """The arm's agent evaluation with the best score among PASSes (first one on a tie): the
    highest, or the lowest where ``metric`` is lower-is-better."""
    best, best_score = None, None
    for e in evaluations:
        if e["arm"] != arm or agent_name(e["agent"]) in PSEUDO_AGENTS or e["verdict"] != "PASS":
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
    best_agent, word = rejudging_names(meta)
    plan = []
    for r in range(max(runs, baseline_runs)):
        for arm in arms:
            best = best_pass(evaluations, arm.name, metric)
            if r < runs and best is not None:
                key = f"{arm.name}/{best_agent}/{word}-{r}"
                repo = str(arm.submissions)
                plan.append(Rejudgement(arm.name, best_agent, repo, best["commit_sha"], r, key))
            # The arm's starting point (the template, or a continuation's champion) is in its
            # origin; judged again and again it shows how far the same code's numbers spread.
            start = meta.get("start_commit")
            if r < baseline_runs and start:
                key = f"{arm.name}/{BASELINE}/{word}-{r}"
                plan.append(Rejudgement(arm.name, BASELINE, str(arm.origin), start, r, key))
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
            item.request_id,
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
