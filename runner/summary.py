"""The per-arm summary a run prints at the end and writes as ``summary.csv``.

Every number is one of the run record's per-arm facts (``runrecord.facts``), the same the
analysis' ``arms`` table shows; ``summary.csv`` rounds some of them (``runrecord.SUMMARY_DIGITS``).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from judge import run_metric
from runner.events import EventLog
from runrecord import (
    CHAMPION,
    CommitGraph,
    Judged,
    Submitted,
    agent_kind_label,
    agent_name,
    agents_phase,
    arm_agent_kind,
    arm_facts,
    isolation_label,
    judge_noise,
    model_call_facts,
    relay_count,
    relay_pairs,
    run_config,
    seat_outages,
    seat_records,
    start_commit,
    summary_value,
)


@dataclass
class ArmSummary:
    """One row per arm. ``agent_kind`` says ``scripted (no model)`` for scripted agents."""

    arm: str
    agent_kind: str
    isolation: str
    agents: int
    evaluations: int
    # Of those, how many reused an earlier verdict of the same tree (judge.duplicates).
    duplicates: int
    pass_: int
    wrong: int
    reject: int
    error: int
    not_evaluated: int
    # The task kind's metric (judge.kinds.Metric: its name and unit) the scores are counted in.
    metric: str
    unit: str
    best_score: float | None
    x_baseline: float | None
    # A continuation: how many times better the best is than the starting champion,
    # re-measured in the same run.
    x_champion: float | None
    time_to_best_s: float | None
    # The best commit judged again after the deadline (the runner's re-judging): the median of
    # its PASSes, and every verdict it got (a best that fails when re-judged is a finding).
    rejudged_score: float | None
    rejudged_x_baseline: float | None
    rejudged_verdicts: str
    # Standard deviation of x_baseline over re-judgements of the unchanged starting commit,
    # pooled over all arms: the judge's own noise, the yardstick for "tie".
    judge_noise_x_sd: float | None
    relays: int
    judge_busy_pct: float
    mean_queue_wait_s: float | None
    restarts: int
    # Seats' calls through the model proxy (isolation/model_proxy.py; None without one): how many,
    # how many failed on the endpoint's side (429, 5xx, unreachable), and the seat-seconds lost
    # from each failure to the next answered call (analysis/model_calls.py), summed over seats.
    model_calls: int | None = None
    model_call_failures: int | None = None
    model_lost_s: float | None = None
    # Output tokens (reasoning included) the vendor reported in its responses, read on the wire
    # by the proxy: the check on the CLIs' own records, which token cost per gain uses.
    wire_output_tokens: int | None = None


def _judged(rows: list[dict[str, Any]], metric: Any) -> list[Judged]:
    """The event log's evaluations as the run record's facts read them."""
    out = []
    for e in rows:
        metrics = json.loads(e["metrics"])
        out.append(
            Judged(
                job_id=int(e["job_id"]),
                arm=e["arm"],
                agent=agent_name(e["agent"]),
                commit=e["commit_sha"],
                verdict=e["verdict"],
                score=metric.score(metrics),
                x_baseline=metrics.get("x_baseline"),
                started_at=float(e["started_at"]),
                finished_at=float(e["finished_at"]),
                queue_wait_s=float(e["queue_wait_s"]),
                duplicate_of=e.get("duplicate_of"),
            )
        )
    return out


def summarize(events: EventLog, run_dir: Path) -> list[ArmSummary]:
    """One row per arm of the run, from its event log and submission repositories.

    Args:
        events: The run's event log.
        run_dir: The run directory (holds ``arms/<arm>/submissions.git``).
    """
    meta = events.meta()
    metric = run_metric(meta)
    phase = agents_phase(meta)
    kind = str(meta.get("agent_kind", "unknown"))
    scripted = bool(meta.get("scripted"))
    seats = seat_records(meta, run_config(run_dir, meta), kind, scripted)
    judged = _judged(events.table("evaluations"), metric)
    submitted = [(s["arm"], Submitted(agent_name(s["agent"]), s["job_id"]))
                 for s in events.table("submissions")]  # fmt: skip
    lifecycle = events.table("lifecycle")
    arms = list(meta.get("arms", []))
    noise = judge_noise(j for j in judged if j.arm in arms)
    proxied = bool((meta.get("client") or {}).get("proxy"))
    calls = events.table("model_calls") if proxied else []
    outages = seat_outages(calls)
    rows = []
    for arm in arms:
        ours = [j for j in judged if j.arm == arm]
        facts = arm_facts(arm, ours, [s for a, s in submitted if a == arm], phase, metric)
        champion = [j.score for j in ours if j.agent == CHAMPION and j.verdict == "PASS"]
        best_score = facts.best_score
        repo = run_dir / "arms" / arm / "submissions.git"
        relays = 0
        if repo.exists():
            start = start_commit(run_dir, arm, meta)
            relays = relay_count(relay_pairs(CommitGraph.load(repo), ours, start))
        rows.append(
            ArmSummary(
                arm=arm,
                agent_kind=arm_agent_kind(
                    (s for s in seats if s.arm == arm), agent_kind_label(kind, scripted)
                ),
                isolation=isolation_label(str(meta.get("isolation", "unknown"))),
                agents=len(meta.get("seats", {}).get(arm, [])),
                evaluations=facts.evaluations,
                duplicates=facts.duplicates,
                pass_=facts.pass_,
                wrong=facts.wrong,
                reject=facts.reject,
                error=facts.error,
                not_evaluated=facts.not_evaluated,
                metric=metric.name,
                unit=metric.unit,
                best_score=best_score,
                x_baseline=facts.best_x_baseline,
                x_champion=summary_value("x_champion", metric.ratio(best_score, champion[0]))
                if champion and champion[0] and best_score
                else None,
                time_to_best_s=summary_value("time_to_best_s", facts.time_to_best_s),
                rejudged_score=summary_value("rejudged_score", facts.rejudged_score),
                rejudged_x_baseline=summary_value("rejudged_x_baseline", facts.rejudged_x_baseline),
                rejudged_verdicts=facts.rejudged_verdicts,
                judge_noise_x_sd=summary_value("judge_noise_x_sd", noise),
                relays=relays,
                judge_busy_pct=summary_value("judge_busy_pct", facts.judge_busy_pct),
                mean_queue_wait_s=summary_value("mean_queue_wait_s", facts.mean_queue_wait_s),
                restarts=sum(1 for r in lifecycle if r["arm"] == arm and r["event"] == "restarted"),
            )
        )
        if proxied:
            calls_facts = model_call_facts(arm, outages, calls)
            rows[-1].model_calls = calls_facts.calls
            rows[-1].model_call_failures = calls_facts.failures
            rows[-1].model_lost_s = summary_value("model_lost_s", calls_facts.lost_s)
            rows[-1].wire_output_tokens = calls_facts.wire_output_tokens
    return rows


COLUMNS = [f.name.rstrip("_") for f in fields(ArmSummary)]


def write_summary(rows: list[ArmSummary], path: Path) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(["" if v is None else v for v in asdict(row).values()])
    return path


def format_summary(rows: list[ArmSummary]) -> str:
    shown = ["arm", "agent_kind", "isolation", "agents", "evaluations", "pass", "wrong",
             "reject", "error", "best_score", "unit", "x_baseline", "rejudged_x_baseline",
             "time_to_best_s", "relays",
             "judge_busy_pct", "mean_queue_wait_s"]  # fmt: skip
    if any(r.x_champion is not None for r in rows):
        shown.insert(shown.index("x_baseline") + 1, "x_champion")
    table = [shown] + [
        [_cell(asdict(r)[c if c != "pass" else "pass_"]) for c in shown] for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(shown))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in table
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
