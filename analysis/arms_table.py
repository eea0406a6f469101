"""The ``arms`` table: one row per arm of a run, the per-arm row (``runrecord.row``, where its
columns are defined and documented) projected on the ``arms`` surface.

The run record's per-arm facts give the columns ``summary.csv`` also holds
(``runrecord.row.fact_values``); this module adds the values only the analysis has (the judge
formulas, tokens, messages, the seats' make-up).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import pandas as pd

from analysis import formulas
from runrecord import (
    JUDGED_FIELDS,
    ROW,
    ArmFacts,
    Judged,
    SeatOutage,
    SeatRecord,
    Submitted,
    arm_agent_kind,
    arm_facts,
    arm_scripted,
    call_values,
    fact_values,
    isolation_label,
    judge_noise,
    model_call_facts,
)
from runrecord.row import ARMS, columns, project

if TYPE_CHECKING:
    from analysis.tables import RunInfo

__all__ = ["ARMS_COLUMNS", "arms_table", "judged"]


#: The ``arms`` table's columns, in order (``runrecord.row``).
ARMS_COLUMNS = columns(ARMS)


def judged(ev: pd.DataFrame) -> list[Judged]:
    """Rows of the ``evaluations`` table as the run record's facts read them.

    Column by column (a large log has ~10^5 evaluations): the table's dtypes are already the
    record's, and a missing score (NaN) becomes None as ``runrecord.judged_rows`` makes it.
    """
    columns = []
    for name in JUDGED_FIELDS:
        col = ev[name]
        if name in ("score", "x_baseline", "duplicate_of"):
            col = col.astype(object).where(col.notna(), None)
        columns.append(col.tolist())
    # tuple.__new__ straight: Judged._make's own frame is a third of the cost at this size.
    return list(map(partial(tuple.__new__, Judged), zip(*columns, strict=True)))


def _median(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.median()) if len(values) else None


def _submitted(sub: pd.DataFrame | None) -> list[Submitted]:
    if sub is None:
        return []
    jobs = sub["job_id"].astype(object).where(sub["job_id"].notna(), None)
    rows = zip(sub["agent"].tolist(), jobs.tolist(), strict=True)
    return list(map(partial(tuple.__new__, Submitted), rows))


def _who(info: RunInfo, arm: str, seats: list[SeatRecord]) -> dict[str, Any]:
    """The run and the arm's make-up."""
    arms_cfg = info.config.get("arms") or {}
    return {
        "run_id": info.run_id,
        "seed": info.seed,
        "task": info.task,
        "status": info.status,
        "arm": arm,
        "agent_kind": arm_agent_kind(seats, info.agent_kind),
        "scripted": arm_scripted(seats, info.scripted),
        "isolation": isolation_label(info.isolation),
        "start": str((arms_cfg.get(arm) or {}).get("start") or "master"),
        "seats": len(seats),
        "workers": sum(s.role == "worker" for s in seats),
        "critics": sum(s.role == "critic" for s in seats),
        "budget_minutes": info.budget_minutes,
        "run_seconds": info.run_seconds,
    }


def _judge(facts: ArmFacts, run_seconds: float) -> dict[str, Any]:
    """The judge formulas' capacity (the judge's other columns are the run record's facts)."""
    per_eval = facts.judge_seconds / facts.judge_evaluations if facts.judge_evaluations else None
    capacity = None
    if per_eval and run_seconds > 0:
        capacity = formulas.judge_capacity(run_seconds, per_eval)
    return {"judge_capacity": capacity}


def _tokens(
    info: RunInfo, facts: ArmFacts, tok: pd.DataFrame, baseline: float | None
) -> dict[str, Any]:
    """The CLIs' token records, and the output tokens each unit of gain cost."""
    output_tokens = int(tok["output"].sum()) if len(tok) else None
    cost = None
    if output_tokens is not None and facts.best_score is not None and baseline is not None:
        # The formula's gain is best - baseline: for a lower-is-better metric, the reverse.
        ends = (facts.best_score, baseline)
        cost = formulas.token_cost_per_gain(
            output_tokens, *(ends if info.metric.higher_is_better else ends[::-1])
        )
    return {"token_records": len(tok), "output_tokens": output_tokens, "token_cost_per_gain": cost}


def arms_table(
    info: RunInfo,
    evaluations: pd.DataFrame,
    submissions: pd.DataFrame,
    messages: pd.DataFrame,
    tokens: pd.DataFrame,
    lifecycle: pd.DataFrame,
    relays: dict[str, int] | None,
    outages: dict[tuple[str, str], SeatOutage] | None = None,
    model_calls: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per arm of one run, from its other tables.

    Args:
        info: The run's facts (``analysis.tables.read_run_info``).
        evaluations: The run's ``evaluations`` table (and likewise the next four).
        submissions: The ``submissions`` table.
        messages: The ``messages`` table.
        tokens: The ``tokens`` table.
        lifecycle: The ``lifecycle`` table.
        relays: Relays per arm (None: git was not asked; an arm missing: no repository).
        outages: The seats' outages (``runrecord.seat_outages``); None without the proxy.
        model_calls: The ``model_calls`` table.

    Returns:
        The table, columns ``ARMS_COLUMNS``, in the run's arm order.
    """
    baseline = _median(evaluations["baseline_score"])
    calls = model_calls.to_dict("records") if model_calls is not None and outages else []
    records = judged(evaluations)
    # The judge's own noise: the start commit re-judged again and again, pooled over arms.
    noise = judge_noise(records)
    by_arm: dict[str, list[Judged]] = {}
    for j in records:
        by_arm.setdefault(j.arm, []).append(j)
    # Grouped once per table, then looked up per arm: the arm count is tiny, the tables are not.
    subs = dict(tuple(submissions.groupby("arm", sort=False)))
    toks = dict(tuple(tokens.groupby("arm", sort=False)))
    lives = dict(tuple(lifecycle.groupby("arm", sort=False)))
    message_counts = messages.groupby("arm", sort=False).size()
    rows = []
    for arm in info.arms:
        seats = [s for s in info.seats if s.arm == arm]
        facts = arm_facts(
            arm, by_arm.get(arm, []), _submitted(subs.get(arm)), info.phase, info.metric
        )
        life = lives.get(arm, lifecycle.iloc[0:0])
        endpoint = model_call_facts(arm, outages, calls) if outages is not None else None
        values = {
            **_who(info, arm, seats),
            **fact_values(facts, info.metric, noise),
            "baseline_score": baseline,
            **_judge(facts, info.run_seconds),
            "messages": int(message_counts.get(arm, 0)),
            "restarts": int((life["event"] == "restarted").sum()),
            "exits": int((life["event"] == "exited").sum()),
            **_tokens(info, facts, toks.get(arm, tokens.iloc[0:0]), baseline),
            "relays": relays.get(arm) if relays is not None else None,
            **call_values(endpoint),
        }
        rows.append(project(values, ARMS))
    df = pd.DataFrame(rows, columns=ARMS_COLUMNS)
    for column in ROW:
        if column.dtype is not None and column.name in df:
            df[column.name] = df[column.name].astype(column.dtype)
    return df
