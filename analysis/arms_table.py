"""The ``arms`` table: one row per arm of a run, its columns documented in ``analysis.tables``.

Every number ``summary.csv`` also holds is the run record's per-arm fact (``runrecord.facts``);
this module adds what only the analysis shows (the judge formulas, tokens, messages, the seats'
make-up) and lays the row out.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import pandas as pd

from analysis import formulas
from runrecord import (
    JUDGED_FIELDS,
    ArmFacts,
    Judged,
    ModelCallFacts,
    SeatOutage,
    SeatRecord,
    Submitted,
    arm_agent_kind,
    arm_facts,
    arm_scripted,
    isolation_label,
    judge_noise,
    model_call_facts,
)

if TYPE_CHECKING:
    from analysis.tables import RunInfo

__all__ = ["ARMS_COLUMNS", "arms_table", "judged"]


def _names(text: str) -> list[str]:
    """Column names written as one space-separated string: long lists stay readable."""
    return text.split()


#: The ``arms`` table's columns, in order.
ARMS_COLUMNS = _names(
    "run_id seed task status arm agent_kind scripted isolation start seats workers critics "
    "budget_minutes run_seconds submissions evaluations duplicates pass wrong reject error "
    "not_evaluated metric unit best_score best_x_baseline best_commit best_agent "
    "time_to_best_s rejudged_score rejudged_x_baseline rejudged_verdicts judge_noise_x_sd "
    "baseline_score judge_evaluations judge_seconds seconds_per_evaluation "
    "full_evaluation_s judge_capacity judge_utilisation mean_queue_wait_s messages restarts "
    "exits token_records output_tokens token_cost_per_gain relays model_calls "
    "model_call_failures model_lost_s wire_output_tokens"
)
_INTEGERS = _names("seed output_tokens relays model_calls model_call_failures wire_output_tokens")
_FLOATS = _names(
    "best_score best_x_baseline time_to_best_s baseline_score rejudged_score "
    "rejudged_x_baseline judge_noise_x_sd seconds_per_evaluation full_evaluation_s "
    "judge_capacity judge_utilisation mean_queue_wait_s token_cost_per_gain budget_minutes "
    "model_lost_s judge_seconds"
)


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


def _results(info: RunInfo, facts: ArmFacts, noise: float | None) -> dict[str, Any]:
    """What the agents' work came to, and what the re-judging found."""
    best = facts.best
    return {
        "submissions": facts.submissions,
        "evaluations": facts.evaluations,
        "duplicates": facts.duplicates,
        "pass": facts.pass_,
        "wrong": facts.wrong,
        "reject": facts.reject,
        "error": facts.error,
        "not_evaluated": facts.not_evaluated,
        "metric": info.metric.name,
        "unit": info.metric.unit,
        "best_score": facts.best_score,
        "best_x_baseline": facts.best_x_baseline,
        "best_commit": best.commit if best is not None else None,
        "best_agent": best.agent if best is not None else None,
        "time_to_best_s": facts.time_to_best_s,
        "rejudged_score": facts.rejudged_score,
        "rejudged_x_baseline": facts.rejudged_x_baseline,
        "rejudged_verdicts": facts.rejudged_verdicts,
        "judge_noise_x_sd": noise,
    }


def _judge(facts: ArmFacts, run_seconds: float) -> dict[str, Any]:
    """The judge's side: its time in the agents' phase and the formulas' capacity."""
    judge_n = facts.judge_evaluations
    per_eval = facts.judge_seconds / judge_n if judge_n else None
    capacity = utilisation = None
    if per_eval and run_seconds > 0:
        capacity = formulas.judge_capacity(run_seconds, per_eval)
        utilisation = formulas.judge_utilisation(judge_n, per_eval, run_seconds)
    return {
        "judge_evaluations": judge_n,
        "judge_seconds": facts.judge_seconds,
        "seconds_per_evaluation": per_eval,
        "full_evaluation_s": facts.full_evaluation_s,
        "judge_capacity": capacity,
        "judge_utilisation": utilisation,
        "mean_queue_wait_s": facts.mean_queue_wait_s,
    }


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


def _calls(endpoint: ModelCallFacts | None) -> dict[str, Any]:
    """The seats' calls through the model proxy (all empty for a run without one)."""
    return {
        "model_calls": endpoint.calls if endpoint else None,
        "model_call_failures": endpoint.failures if endpoint else None,
        "model_lost_s": endpoint.lost_s if endpoint else None,
        "wire_output_tokens": endpoint.wire_output_tokens if endpoint else None,
    }


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
        rows.append(
            {
                **_who(info, arm, seats),
                **_results(info, facts, noise),
                "baseline_score": baseline,
                **_judge(facts, info.run_seconds),
                "messages": int(message_counts.get(arm, 0)),
                "restarts": int((life["event"] == "restarted").sum()),
                "exits": int((life["event"] == "exited").sum()),
                **_tokens(info, facts, toks.get(arm, tokens.iloc[0:0]), baseline),
                "relays": relays.get(arm) if relays is not None else None,
                **_calls(endpoint),
            }
        )
    df = pd.DataFrame(rows, columns=ARMS_COLUMNS)
    for col in _INTEGERS:
        df[col] = df[col].astype("Int64")
    for col in _FLOATS:
        df[col] = df[col].astype(float)
    return df
