"""``## The formulas, measured``: the judge as the ceiling (capacity and utilisation) and token
cost per gain, each with the numbers of this run (:mod:`analysis.formulas`)."""

from __future__ import annotations

from itertools import combinations

import pandas as pd

from analysis import formulas
from analysis.model_calls import is_generation
from analysis.report.markdown import num, pct
from analysis.tables import RunInfo, Tables, finite_or_none, phase_busy_s
from runrecord import REJUDGING_AGENTS


def formulas_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## The formulas, measured``: formula one per arm and for the shared judge, formula
    two per arm and per pair of arms, and the output tokens seen on the wire."""
    out = [
        "### Formula one: the judge is the ceiling",
        "",
        "judge capacity = run time ÷ seconds per evaluation; judge utilisation = "
        "evaluations × seconds per evaluation ÷ run time. Run time is the agents' phase (the "
        "runner's re-judging after the deadline, if any, is left out). Seconds per evaluation "
        "is measured: "
        "the arm's judge time over its evaluations (quick REJECTs included), and a full "
        "evaluation is the median PASS (every stage ran).",
        "",
    ]
    run_s = run.run_seconds
    for r in tables.arms.itertuples(index=False):
        if not r.judge_evaluations:
            out.append(f"- **{r.arm}**: no evaluations, nothing to measure.")
            continue
        per = r.seconds_per_evaluation
        line = (
            f"- **{r.arm}**: judge capacity = {num(run_s)} s / {num(per, 2)} s per "
            f"evaluation = {num(r.judge_capacity)} evaluations; {r.judge_evaluations} "
            f"actual; judge utilisation = {r.judge_evaluations} × {num(per, 2)} s / "
            f"{num(run_s)} s = {pct(r.judge_utilisation)}."
        )
        full = finite_or_none(r.full_evaluation_s)
        if full:
            line += (
                f" A full evaluation took {num(full)} s: at that pace capacity = "
                f"{num(run_s)} s / {num(full)} s = "
                f"{num(formulas.judge_capacity(run_s, full))}."
            )
        out.append(line)
    ev = tables.evaluations
    ev = ev[~ev["agent"].isin(list(REJUDGING_AGENTS))]  # the agents' phase only
    if len(ev) and run_s > 0:
        busy = phase_busy_s(ev, run_s)
        per = busy / len(ev)
        share = formulas.judge_utilisation(len(ev), per, run_s)
        verdict = (
            "saturated: more agents would only have lengthened the queue"
            if share >= 0.9
            else f"idle {pct(1 - share)} of the run: it could have absorbed more work"
        )
        out.append(
            f"- **the one shared judge**: {len(ev)} evaluations × {num(per, 2)} s = "
            f"{num(busy)} s busy of {num(run_s)} s = {pct(share)}; capacity "
            f"{num(formulas.judge_capacity(run_s, per))} evaluations. The judge was "
            f"{verdict}."
        )
    out += [
        "",
        "### Formula two: token cost per gain",
        "",
        "token cost per gain = output tokens ÷ (best − baseline); marginal cost = "
        "(tokens_a − tokens_b) ÷ (best_a − best_b). Baseline: the median of the judge's "
        "baseline measurements in this run.",
        "",
    ]
    arms = tables.arms
    metric = run.metric
    per = metric.unit or "unit"
    if arms["output_tokens"].isna().all():
        out.append(
            "No token records: token cost per gain is not computed (scripted agents and "
            "seats without session records have none; nothing is invented)."
        )
        return out
    for r in arms.itertuples(index=False):
        if pd.isna(r.output_tokens):
            out.append(f"- **{r.arm}**: no token records.")
        elif finite_or_none(r.best_score) is None:
            out.append(f"- **{r.arm}**: {r.output_tokens:,} output tokens, no PASS: no gain.")
        else:
            # The gain is best − baseline, or baseline − best for a lower-is-better metric.
            ends = (num(r.best_score, 2), num(r.baseline_score, 2))
            first, second = ends if metric.higher_is_better else ends[::-1]
            out.append(
                f"- **{r.arm}**: {r.output_tokens:,} ÷ ({first} − {second}) = "
                f"{num(r.token_cost_per_gain, 0)} output tokens per {per}."
            )
    priced = arms.dropna(subset=["output_tokens", "best_score"])
    for a, b in combinations(priced.itertuples(index=False), 2):
        if metric.better(b.best_score, a.best_score):
            a, b = b, a
        cost = formulas.marginal_token_cost(
            a.output_tokens,
            metric.gain(a.best_score, 0.0),
            b.output_tokens,
            metric.gain(b.best_score, 0.0),
        )
        first, second = (a, b) if metric.higher_is_better else (b, a)
        out.append(
            f"- **marginal, {a.arm} over {b.arm}**: ({a.output_tokens:,} − "
            f"{b.output_tokens:,}) ÷ ({num(first.best_score, 2)} − "
            f"{num(second.best_score, 2)}) = {num(cost, 0)} output tokens per extra {per}."
        )
    wire = arms.dropna(subset=["wire_output_tokens"])
    if len(wire):
        shown = ", ".join(f"{r.arm} {int(r.wire_output_tokens):,}" for r in wire.itertuples())
        calls = tables.model_calls
        answered = calls[
            (calls["status"] == 200)
            & ~calls["failed"].astype(bool)
            & calls["path"].map(is_generation).astype(bool)
        ]
        silent = int(answered["output"].isna().sum())
        lower = (
            f"; {silent} answered model call(s) reported no usage (a stream without its usage "
            "chunk, or a body too large to read), so these totals are a lower bound"
            if silent
            else ""
        )
        out.append(
            f"- on the wire (output tokens the vendor's responses reported, read by the model "
            f"proxy; the check on the records above): {shown}{lower}."
        )
    return out
