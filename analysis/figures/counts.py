"""The count figures: each arm's verdict mix, and its output tokens and token cost per gain."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis._git import PSEUDO_AGENTS
from analysis.figures.draw import (
    VERDICT_COLOURS,
    FigureResult,
    arm_colours,
    arms_of,
    legend_below,
    metric_of,
    new_figure,
    save,
)
from analysis.tables import Tables


def verdict_mix(tables: Tables, path: Path) -> FigureResult:
    """How each arm's evaluations ended: PASS, WRONG, REJECT, ERROR (and not evaluated)."""
    title = "Verdict mix per arm"
    subs = tables.submissions[~tables.submissions["agent"].isin(list(PSEUDO_AGENTS))]
    if subs.empty:
        return FigureResult("verdict_mix", title, None, "no submissions in any arm")
    arms = arms_of(tables)
    counts = (
        subs.groupby(["arm", "verdict"]).size().unstack(fill_value=0).reindex(arms, fill_value=0)
    )
    fig, ax = new_figure(8, 1.6 + 0.6 * len(arms), left=0.9, bottom=0.8)
    left = np.zeros(len(arms))
    for verdict, colour in VERDICT_COLOURS.items():
        if verdict not in counts:
            continue
        values = counts[verdict].to_numpy()
        ax.barh(arms, values, left=left, color=colour, label=verdict)
        for i, v in enumerate(values):
            if v:
                ax.text(left[i] + v / 2, i, str(v), ha="center", va="center", fontsize=8)
        left += values
    ax.invert_yaxis()
    ax.set_xlabel("submissions" + (" (all seeds)" if len(tables.runs) > 1 else ""))
    legend_below(fig, ncols=5)
    ax.set_title(title)
    return FigureResult("verdict_mix", title, save(fig, path), "")


def token_cost(tables: Tables, path: Path) -> FigureResult:
    """Output tokens per arm and what one unit of the metric gained cost; skipped without token
    records."""
    title = "Token cost per arm"
    if tables.tokens.empty:
        return FigureResult("token_cost", title, None, "no token records: nothing is invented")
    arms = [a for a in arms_of(tables) if a in set(tables.tokens["arm"])]
    colours = arm_colours(arms_of(tables))
    out = tables.tokens.groupby("arm")["output"].sum().reindex(arms, fill_value=0)
    cost = tables.arms.groupby("arm")["token_cost_per_gain"].median().reindex(arms)
    fig, axes = new_figure(9, 3.8, left=0.9, bottom=0.45, top=0.7, ncols=2)
    fig.subplots_adjust(wspace=0.35)
    axes[0].bar(arms, out.to_numpy(), color=[colours[a] for a in arms])
    axes[0].set_ylabel("output tokens")
    axes[0].set_title("output tokens" + (" (all seeds)" if len(tables.runs) > 1 else ""))
    finite = np.where(np.isfinite(cost.to_numpy(dtype=float)), cost.to_numpy(dtype=float), 0)
    axes[1].bar(arms, finite, color=[colours[a] for a in arms])
    for i, value in enumerate(cost.to_numpy(dtype=float)):
        label = "no gain" if np.isinf(value) else ("-" if np.isnan(value) else f"{value:,.0f}")
        axes[1].annotate(label, (i, finite[i]), ha="center", va="bottom", fontsize=8)
    axes[1].set_ylabel(f"output tokens per {metric_of(tables).unit or 'unit'} gained")
    axes[1].set_title("token cost per gain")
    fig.suptitle(title)
    return FigureResult("token_cost", title, save(fig, path), "")
