"""The score figures: each arm's best so far over the run, and a sweep's best per seed and arm."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.figures.draw import (
    FigureResult,
    arm_colours,
    arms_of,
    baseline_of,
    limit_line,
    metric_of,
    new_figure,
    save,
)
from analysis.tables import Tables


def best_so_far(tables: Tables, path: Path) -> FigureResult:
    """Best PASS score so far per arm (per seed in a sweep), with baseline and target lines;
    the best is the running minimum for a lower-is-better metric."""
    metric = metric_of(tables)
    title = f"Best {metric.unit or metric.name} so far per arm"
    ev = tables.evaluations
    passes = ev[(ev["verdict"] == "PASS") & ~ev["pseudo_agent"] & ev["score"].notna()]
    if passes.empty:
        return FigureResult("best_so_far", title, None, "no PASS in any arm: nothing to plot")
    colours = arm_colours(arms_of(tables))
    ends = {run.run_id: run.run_seconds / 60 for run in tables.runs}
    fig, ax = new_figure(8, 4.5, left=0.8, bottom=0.55)
    labelled: set[str] = set()
    passes = passes.sort_values(["run_id", "arm", "t_end_s", "job_id"])
    for (run_id, arm), group in passes.groupby(["run_id", "arm"], sort=True):
        scores = group["score"]
        best = (scores.cummax() if metric.higher_is_better else scores.cummin()).to_numpy()
        t = group["t_end_s"].to_numpy() / 60
        # Only the points where the best changed: the step line is exact and stays small.
        keep = np.r_[True, best[1:] != best[:-1]]
        x = np.r_[t[keep], max(ends.get(run_id, t[-1]), t[-1])]
        y = np.r_[best[keep], best[keep][-1]]
        ax.step(
            x,
            y,
            where="post",
            color=colours[arm],
            lw=2 if len(tables.runs) == 1 else 1.2,
            label=None if arm in labelled else arm,
        )
        ax.plot(x[:-1], y[:-1], "o", color=colours[arm], ms=4)
        labelled.add(arm)
    # Each arm's best judged again after the deadline (the runner's re-judging): the honest number.
    rejudged = tables.arms.dropna(subset=["rejudged_score"])
    for row in rejudged.itertuples(index=False):
        ax.plot(
            ends.get(row.run_id, 0.0),
            row.rejudged_score,
            "D",
            color=colours[row.arm],
            ms=8,
            mec="black",
            label=None if "re-judged" in labelled else "best re-judged",
        )
        labelled.add("re-judged")
    baseline = baseline_of(tables)
    target_x = tables.runs[0].target_x_baseline
    if baseline is not None:
        ax.axhline(baseline, color="black", ls="--", lw=1, label=f"baseline {baseline:.0f}")
        if target_x is not None:
            # x_baseline reads "times better": a lower-is-better target is baseline / x.
            target = baseline * target_x if metric.higher_is_better else baseline / target_x
            ax.axhline(
                target,
                color="black",
                ls=":",
                lw=1.8,
                label=f"target {target_x:g}× = {target:.0f}",
            )
    budget = tables.runs[0].budget_minutes
    if budget:
        limit_line(ax, budget, "deadline")
    ax.set_xlabel("minutes since the run started (verdict time)")
    ax.set_ylabel(metric.label + ("" if metric.higher_is_better else " (lower is better)"))
    ax.set_ylim(bottom=0)
    ax.set_title(title + (f" ({len(tables.runs)} seeds)" if len(tables.runs) > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    note = "baseline: median of the judge's baseline measurements in this run"
    return FigureResult("best_so_far", title, save(fig, path), note)


def seeds_best(tables: Tables, path: Path) -> FigureResult:
    """A sweep: each seed's best score per arm, seeds joined across arms."""
    title = "Each seed's best per arm"
    if len(tables.runs) < 2:
        return FigureResult("seeds_best", title, None, "one seed: nothing to compare across")
    arms = arms_of(tables)
    colours = arm_colours(arms)
    table = tables.arms.pivot_table(
        index="seed",
        columns="arm",
        values="best_score",
        aggfunc="max" if metric_of(tables).higher_is_better else "min",
    ).reindex(columns=arms)
    fig, ax = new_figure(6, 4.5, left=0.8, bottom=0.5, right=0.7)
    x = np.arange(len(arms))
    for seed, row in table.iterrows():
        ax.plot(x, row.to_numpy(dtype=float), "-", color="grey", alpha=0.5, lw=1)
        ax.annotate(
            f"seed {seed}",
            (x[-1], row.to_numpy(dtype=float)[-1]),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=7,
            va="center",
        )
    for i, arm in enumerate(arms):
        values = table[arm].to_numpy(dtype=float)
        ax.plot(np.full(len(values), i), values, "o", color=colours[arm], ms=8)
        med = np.nanmedian(values) if np.isfinite(values).any() else np.nan
        ax.plot([i - 0.2, i + 0.2], [med, med], color=colours[arm], lw=2)
    baseline = baseline_of(tables)
    if baseline is not None:
        ax.axhline(baseline, color="black", ls="--", lw=1, label=f"baseline {baseline:.0f}")
        ax.legend(fontsize=8)
    ax.set_xticks(x, arms)
    ax.set_xlim(-0.5, len(arms) - 0.3)
    ax.set_ylabel(f"best {metric_of(tables).label} (bar: median over seeds)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return FigureResult("seeds_best", title, save(fig, path), "")
