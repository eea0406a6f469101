"""The per-arm summary a run prints at the end and writes as ``summary.csv``."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from analysis.model_calls import seat_outages
from judge.kinds import run_metric
from runner.confirm import BASELINE, CHAMPION, CONFIRM, PSEUDO_AGENTS, best_pass, rechecked
from runner.events import EventLog


@dataclass
class ArmSummary:
    """One row per arm. ``agent_kind`` says ``scripted (no model)`` for scripted agents."""

    arm: str
    agent_kind: str
    isolation: str
    agents: int
    evaluations: int
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
    # The best commit judged again after the deadline (runner/confirm.py): the median of its
    # PASSes, and every verdict it got (a best that fails when re-judged is a finding).
    confirmed_score: float | None
    confirmed_x_baseline: float | None
    confirm_verdicts: str
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


def is_ancestor(repo: Path, ancestor: str, commit: str) -> bool:
    result = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", ancestor, commit],
        capture_output=True,
    )
    return result.returncode == 0


def relay_edges(repo: Path, passes: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """(earlier PASS, later PASS) pairs where the later one, by another agent, contains the
    earlier one's commit: one agent built on another's result."""
    edges = []
    ordered = sorted(passes, key=lambda e: e["finished_at"])
    for i, later in enumerate(ordered):
        for earlier in ordered[:i]:
            if earlier["agent"] == later["agent"] or earlier["commit_sha"] == later["commit_sha"]:
                continue
            if is_ancestor(repo, earlier["commit_sha"], later["commit_sha"]):
                edges.append((earlier, later))
                break
    return edges


def summarize(events: EventLog, run_dir: Path) -> list[ArmSummary]:
    meta = events.meta()
    metric = run_metric(meta)
    started = float(meta.get("started_at", 0.0))
    ended = float(meta.get("ended_at") or meta.get("deadline") or started)
    kind = meta.get("agent_kind", "unknown")
    if meta.get("scripted"):
        kind = "scripted (no model)" if kind == "scripted" else f"{kind} (scripted, no model)"
    isolation = meta.get("isolation", "unknown")
    if isolation == "local":
        isolation = "local (NOT isolated)"
    evaluations = events.table("evaluations")
    submissions = events.table("submissions")
    lifecycle = events.table("lifecycle")
    pooled = [
        x for arm in meta.get("arms", []) for x in rechecked(evaluations, arm, metric).baseline_x
    ]
    noise = round(statistics.stdev(pooled), 4) if len(pooled) >= 2 else None
    # The judge's busy share is over the agents' part of the run, before the re-judgements.
    agents_ended = float(meta.get("rechecks_started_at") or ended)
    agent_phase = max(agents_ended - started, 1e-9)
    proxied = bool((meta.get("client") or {}).get("proxy"))
    calls = events.table("model_calls") if proxied else []
    outages = seat_outages(calls)
    rows = []
    for arm in meta.get("arms", []):
        ours = [e for e in evaluations if e["arm"] == arm]
        # The runner's own re-measurements are not counted as the agents' work.
        mine = [e for e in ours if e["agent"] not in PSEUDO_AGENTS]
        champion = [
            metric.score(json.loads(e["metrics"]))
            for e in ours
            if e["agent"] == CHAMPION and e["verdict"] == "PASS"
        ]
        again = rechecked(evaluations, arm, metric)
        verdicts = [e["verdict"] for e in mine]
        passes = [e for e in mine if e["verdict"] == "PASS"]
        best = best_pass(evaluations, arm, metric)
        best_metrics = json.loads(best["metrics"]) if best else {}
        best_score = metric.score(best_metrics)
        evaluated = {e["job_id"] for e in mine}
        waits = [e["queue_wait_s"] for e in mine]
        repo = run_dir / "arms" / arm / "submissions.git"
        rows.append(
            ArmSummary(
                arm=arm,
                agent_kind=kind,
                isolation=isolation,
                agents=len(meta.get("seats", {}).get(arm, [])),
                evaluations=len(mine),
                pass_=verdicts.count("PASS"),
                wrong=verdicts.count("WRONG"),
                reject=verdicts.count("REJECT"),
                error=verdicts.count("ERROR"),
                not_evaluated=sum(
                    1
                    for s in submissions
                    if s["arm"] == arm
                    and s["agent"] not in PSEUDO_AGENTS
                    and s["job_id"] not in evaluated
                ),
                metric=metric.name,
                unit=metric.unit,
                best_score=best_score,
                x_baseline=best_metrics.get("x_baseline"),
                x_champion=(
                    round(metric.ratio(best_score, champion[0]), 3)
                    if champion and champion[0] and best_score
                    else None
                ),
                time_to_best_s=round(best["finished_at"] - started, 1) if best else None,
                confirmed_score=again.confirmed_score,
                confirmed_x_baseline=again.confirmed_x_baseline,
                confirm_verdicts=again.confirm_verdicts,
                judge_noise_x_sd=noise,
                relays=len(relay_edges(repo, passes)) if repo.exists() else 0,
                judge_busy_pct=round(
                    100
                    * sum(
                        # Only the part inside the agents' phase: an evaluation still running
                        # when the drain ended finishes during the re-judging.
                        max(
                            0.0, min(e["finished_at"], agents_ended) - max(e["started_at"], started)
                        )
                        for e in ours
                        if e["agent"] not in (CONFIRM, BASELINE)
                    )
                    / agent_phase,
                    1,
                ),
                mean_queue_wait_s=round(sum(waits) / len(waits), 1) if waits else None,
                restarts=sum(1 for r in lifecycle if r["arm"] == arm and r["event"] == "restarted"),
            )
        )
        if proxied:
            seats = [o for (a, _), o in outages.items() if a == arm]
            rows[-1].model_calls = sum(o.calls for o in seats)
            rows[-1].model_call_failures = sum(o.failed for o in seats)
            rows[-1].model_lost_s = round(sum(o.lost_s for o in seats), 1)
            rows[-1].wire_output_tokens = sum(
                c["output"] or 0 for c in calls if c["arm"] == arm and c["agent"]
            )
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
             "reject", "error", "best_score", "unit", "x_baseline", "confirmed_x_baseline",
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
