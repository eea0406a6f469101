"""Findings on the judge's noise: is the gap between arms bigger than judging the same code twice
moves, and did each arm's best hold up when re-judged (see :mod:`analysis.report.findings`)."""

from __future__ import annotations

import math
from itertools import combinations

import pandas as pd

from analysis.report.markdown import num, pct, unit_suffix
from analysis.report.measures import baseline_noise
from analysis.tables import RunInfo, Tables, finite_or_none
from judge import Metric


def noise_findings(tables: Tables, run: RunInfo) -> list[str]:
    """Is the gap between arms bigger than what judging the same code twice moves?

    The yardstick is the start commit re-judged after the deadline (``judge_noise_x_sd``, in
    x_baseline) when the run did that; otherwise the spread of the baseline measurements every
    evaluation makes, scaled to the arms' speed.
    """
    arms = tables.arms.set_index("arm")
    out = []
    sd = arms["judge_noise_x_sd"].dropna()
    if len(sd):
        sigma = float(sd.iloc[0])
        column = (
            "rejudged_x_baseline"
            if arms["rejudged_x_baseline"].notna().all()
            else ("best_x_baseline")
        )
        best = arms[column].dropna()
        out.append(
            f"Timing noise: the start commit re-judged gives σ = {sigma:.3f}× the "
            "baseline (standard deviation over its re-judgements)."
        )
        show = "{:.3f}×".format
    else:
        noise = baseline_noise(tables)
        if noise is None:
            return ["The judge's noise cannot be measured: fewer than two baseline measurements."]
        sigma_tok, median = noise
        rel = sigma_tok / median if median else math.nan
        values = tables.evaluations["baseline_score"].dropna()
        unit = unit_suffix(run.metric)
        out.append(
            f"Timing noise: the same frozen baseline measured {len(values)} times gave "
            f"{num(values.min())} to {num(values.max())}{unit} (σ = {num(sigma_tok)}, "
            f"{pct(rel)} of its median {num(median)})."
        )
        column = "best_score"
        show = ("{:,.1f}" + unit).format
        best = arms[column].dropna()
        sigma = rel * float(best.min()) if len(best) else math.nan
    for a, b in combinations([x for x in run.arms if x in best.index], 2):
        gap = abs(best[a] - best[b])
        if gap < 2 * sigma:
            out.append(
                f"Noise is larger than the gap between {a} and {b}: {column} {show(best[a])} vs "
                f"{show(best[b])} differ by {show(gap)}, under 2σ = {show(2 * sigma)}: call it "
                "a tie."
            )
    out += winners_curse(arms, run.metric)
    return out


def winners_curse(arms: pd.DataFrame, metric: Metric) -> list[str]:
    """The best of many noisy measurements is biased upward, more for arms that drew more."""
    rejudged = arms[arms["rejudged_verdicts"].fillna("") != ""]
    out = []
    for arm, row in rejudged.iterrows():
        verdicts = row["rejudged_verdicts"].split(",")
        line = (
            f"{arm}'s best ({num(row['best_score'])}{unit_suffix(metric)}, "
            f"{num(row['best_x_baseline'], 2)}×) re-judged {len(verdicts)} time(s): "
            f"{', '.join(verdicts)}"
        )
        if finite_or_none(row["rejudged_score"]) is not None:
            line += (
                f"; median {num(row['rejudged_score'])}{unit_suffix(metric)} "
                f"({num(row['rejudged_x_baseline'], 2)}×)"
            )
        if any(v != "PASS" for v in verdicts):
            line += ": the best did not hold up when judged again"
        out.append(line + ".")
    passes = arms["pass"]
    if len(passes) > 1 and passes.max() > passes.min() and len(rejudged) < len(arms):
        shown = ", ".join(f"{a} {int(n)}" for a, n in passes.items())
        out.append(
            f"Each best is the maximum of noisy single measurements, and arms with more "
            f"PASSes draw more often ({shown}): the max is biased upward for them; "
            "re-judge each arm's best before comparing."
        )
    return out
