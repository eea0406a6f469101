"""The per-arm summary a run prints at the end and writes as ``summary.csv``.

Each row is the per-arm row (``runrecord.row``) projected on ``summary.csv``: the columns, their
names and digits are the row's, the numbers the run record's per-arm facts, the same the
analysis' ``arms`` table shows.
"""

from __future__ import annotations

import csv
import json
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
    call_values,
    fact_values,
    isolation_label,
    judge_noise,
    model_call_facts,
    relay_count,
    relay_pairs,
    run_config,
    seat_outages,
    seat_records,
    start_commit,
)
from runrecord.row import PRINTED, SUMMARY_CSV, columns, project


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


def summarize(events: EventLog, run_dir: Path) -> list[dict[str, Any]]:
    """One row per arm of the run, from its event log and submission repositories: the
    per-arm row's ``summary.csv`` columns (``runrecord.row``), rounded as it holds them.

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
        relays = None  # no repository: not known (as the arms table says)
        if repo.exists():
            start = start_commit(run_dir, arm, meta)
            relays = relay_count(relay_pairs(CommitGraph.load(repo), ours, start))
        values = {
            **fact_values(facts, metric, noise),
            "arm": arm,
            "agent_kind": arm_agent_kind(
                (s for s in seats if s.arm == arm), agent_kind_label(kind, scripted)
            ),
            "isolation": isolation_label(str(meta.get("isolation", "unknown"))),
            "seats": len(meta.get("seats", {}).get(arm, [])),
            "x_champion": metric.ratio(best_score, champion[0])
            if champion and champion[0] and best_score
            else None,
            "relays": relays,
            "restarts": sum(1 for r in lifecycle if r["arm"] == arm and r["event"] == "restarted"),
            **call_values(model_call_facts(arm, outages, calls) if proxied else None),
        }
        rows.append(project(values, SUMMARY_CSV))
    return rows


#: ``summary.csv``'s columns, in order (``runrecord.row``).
COLUMNS = columns(SUMMARY_CSV)


def write_summary(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write ``summary.csv``: a header of ``COLUMNS``, then one line per row (None: empty).

    Args:
        rows: Rows as ``summarize`` makes them.
        path: Where to write.
    """
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    return path


def format_summary(rows: list[dict[str, Any]]) -> str:
    """The table a run prints at its end: the row's printed columns (``x_champion`` only where
    some arm has one), floats with two decimals, a missing value as ``-``."""
    shown = [c for c in columns(PRINTED)
             if c != "x_champion" or any(r.get(c) is not None for r in rows)]  # fmt: skip
    table = [shown] + [[_cell(r[c]) for c in shown] for r in rows]
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
