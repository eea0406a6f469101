"""Figures (PNG, matplotlib's Agg backend) from the tidy tables.

Each figure is drawn from aggregated data (change points, per-arm counts, one collection per
colour), never one artist per event, so a million-event run draws in about the time a small one
does. A figure that has nothing to show is skipped with a note saying why, never drawn empty.

One module per kind of figure: :mod:`~analysis.figures.scores` (best so far, each seed's best),
:mod:`~analysis.figures.spend` (best so far against output tokens and evaluations used),
:mod:`~analysis.figures.timeline` (the judge's timeline), :mod:`~analysis.figures.counts`
(verdict mix, token cost), :mod:`~analysis.figures.activity` (agent activity); what they draw
with is in :mod:`~analysis.figures.draw`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

# Before any submodule imports pyplot: every import of one runs this package first.
matplotlib.use("Agg")

from analysis.figures.activity import agent_activity
from analysis.figures.counts import token_cost, verdict_mix
from analysis.figures.draw import VERDICT_COLOURS, FigureResult, arm_colours
from analysis.figures.scores import best_so_far, seeds_best
from analysis.figures.spend import best_vs_evaluations, best_vs_tokens
from analysis.figures.timeline import judge_timeline
from analysis.tables import Tables

__all__ = [
    "VERDICT_COLOURS",
    "FigureResult",
    "agent_activity",
    "arm_colours",
    "best_so_far",
    "best_vs_evaluations",
    "best_vs_tokens",
    "judge_timeline",
    "make_figures",
    "seeds_best",
    "token_cost",
    "verdict_mix",
]

_FIGURES: list[tuple[str, Callable[[Tables, Path], FigureResult]]] = [
    ("best_so_far", best_so_far),
    ("best_vs_tokens", best_vs_tokens),
    ("best_vs_evaluations", best_vs_evaluations),
    ("judge_timeline", judge_timeline),
    ("verdict_mix", verdict_mix),
    ("agent_activity", agent_activity),
    ("token_cost", token_cost),
    ("seeds_best", seeds_best),
]


def make_figures(tables: Tables, out_dir: Path) -> list[FigureResult]:
    """Draw every figure that has data into ``out_dir``; skipped ones come back with a note.

    Args:
        tables: The tables of a run or sweep.
        out_dir: Where the PNG files go (created if missing).

    Returns:
        One :class:`FigureResult` per figure, drawn or skipped, in a fixed order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for name, draw in _FIGURES:
        target = out_dir / f"{name}.png"
        result = draw(tables, target)
        if result.path is None and target.exists():
            target.unlink()  # a figure from an earlier build that no longer has data
        results.append(result)
    return results
