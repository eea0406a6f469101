"""The report's tables of facts: the run's settings (``## Run``) and one row per arm (``## Arms``,
per seed in a sweep)."""

from __future__ import annotations

import pandas as pd

from analysis.report.budgets import budgets_text
from analysis.report.markdown import clock, num, pct, seconds, short, table
from analysis.tables import RunInfo
from judge import Metric
from runrecord.row import REPORT, columns


def facts_table(run: RunInfo) -> list[str]:
    """``## Run``: the run's settings and what it ran, as a two-column table."""
    judge = run.config.get("judge") or {}
    budget = run.config.get("budget") or {}
    seats = "; ".join(
        f"{arm}: "
        + ", ".join(
            f"{s.agent} ({s.role}" + (f", {s.direction})" if s.direction else ")")
            for s in run.seats
            if s.arm == arm
        )
        for arm in run.arms
    )
    rows = [
        ["run", f"`{run.run_id}`"],
        ["experiment", run.experiment],
        ["task", run.task],
        [
            "metric",
            f"{run.metric.label} ({'higher' if run.metric.higher_is_better else 'lower'} is "
            "better)",
        ],
        ["seed", run.seed],
        ["status", run.status if run.finished else f"**{run.status} (INCOMPLETE)**"],
        [
            "budget",
            f"{budgets_text(run)} (drain {budget.get('drain_minutes', '-')} "
            f"min); ran {num(run.run_seconds)} s",
        ],
        ["started / ended", f"{clock(run.started_at)} / {clock(run.ended_at)}"],
        ["agent kind", run.agent_kind],
        ["isolation", run.isolation],
        ["arms", ", ".join(run.arms)],
        ["seats", seats],
        [
            "judge",
            f"queue `{judge.get('queue_policy', '-')}`, near ties "
            f"`{judge.get('near_tie_policy', '-')}`, B=1 unresolved "
            f"`{judge.get('b1_unresolved', '-')}`, identical trees "
            + (f"`{judge['duplicates']}`" if judge.get("duplicates") else "judged each time"),
        ],
        ["target", f"{run.target_x_baseline}× the baseline" if run.target_x_baseline else "-"],
    ]
    return table(["fact", "value"], rows)


ARMS_HEAD = ["arm", "agent kind", "seats", "subm.", "evals", "PASS", "WRONG", "REJECT", "ERROR",
              "best {unit}", "× baseline"]  # fmt: skip


ARMS_TAIL = ["best by", "time to best", "relays", "judge busy", "queue wait", "restarts",
              "output tokens"]  # fmt: skip


def arms_table(arms: pd.DataFrame, sweep: bool, metric: Metric) -> list[str]:
    """``## Arms``: one row per arm (per seed and arm in a sweep: ``sweep``), with a
    re-judged column when any arm's best was re-judged.

    It reads only the per-arm row's columns the row says the report shows (``runrecord.row``).
    """
    arms = arms[[c for c in columns(REPORT) if c in arms]]  # an older table may lack some
    rejudged = bool((arms["rejudged_verdicts"].fillna("") != "").any())
    # Identical trees judged once (judge.duplicates): shown where any arm had one.
    dups = "duplicates" in arms and bool((arms["duplicates"].fillna(0) > 0).any())
    head = list(ARMS_HEAD)
    if dups:
        head.insert(head.index("evals") + 1, "of them dup.")
    header = (
        (["seed"] if sweep else [])
        + [h.format(unit=metric.unit or metric.name) for h in head]
        + (["re-judged ×"] if rejudged else [])
        + ARMS_TAIL
    )
    rows = []
    for r in arms.to_dict("records"):
        best_by = f"{r['best_agent']} `{short(r['best_commit'])}`" if r["best_agent"] else "-"
        again = f"{num(r['rejudged_x_baseline'], 2)} ({r['rejudged_verdicts'] or '-'})"
        tokens = r["output_tokens"]
        rows.append(
            ([r["seed"]] if sweep else [])
            + [r["arm"], r["agent_kind"], f"{r['seats']} ({r['workers']}w+{r['critics']}c)"]
            + [r[k] for k in ("submissions", "evaluations")]
            + ([r["duplicates"]] if dups else [])
            + [r[k] for k in ("pass", "wrong", "reject", "error")]
            + [num(r["best_score"]), num(r["best_x_baseline"], 2)]
            + ([again] if rejudged else [])
            + [
                best_by,
                seconds(r["time_to_best_s"]),
                "-" if pd.isna(r["relays"]) else r["relays"],
                pct(r["judge_utilisation"]),
                seconds(r["mean_queue_wait_s"]),
                r["restarts"],
                "no token records" if pd.isna(tokens) else f"{int(tokens):,}",
            ]
        )
    return table(header, rows)
