"""Agent activity: each seat's lane of submissions by verdict, board posts, exits and restarts
(single runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figures.draw import (
    VERDICT_COLOURS,
    VERDICT_MARKERS,
    FigureResult,
    legend_below,
    new_figure,
    pixel,
    save,
    thin,
)
from analysis.tables import Tables


def agent_activity(tables: Tables, path: Path) -> FigureResult:
    """Each agent's submissions over time by verdict, with exits and restarts (single runs)."""
    title = "Agent activity"
    if len(tables.runs) != 1:
        return FigureResult("agent_activity", title, None, "per-agent lanes are drawn per run")
    run = tables.runs[0]
    seats = [(s.arm, s.agent) for s in run.seats]
    if not seats:
        return FigureResult("agent_activity", title, None, "the run recorded no seats")
    fig, ax = new_figure(10, 1.5 + 0.35 * len(seats), left=1.1, bottom=0.8)
    lanes = pd.Series(range(len(seats)), index=[f"{a}/{g}" for a, g in seats], dtype=float)

    def lanes_of(df: pd.DataFrame, who: str) -> np.ndarray:
        return (df["arm"] + "/" + df[who]).map(lanes).to_numpy(dtype=float)

    subs = tables.submissions
    t_subs, y_subs = subs["t_s"].to_numpy(dtype=float) / 60, lanes_of(subs, "agent")
    px = pixel(t_subs, np.array([run.run_seconds / 60]))
    for verdict, colour in VERDICT_COLOURS.items():
        sel = (subs["verdict"] == verdict).to_numpy() & ~np.isnan(y_subs)
        if sel.any():
            x, lane_y = thin(t_subs[sel], y_subs[sel].astype(np.int64), px)
            ax.plot(
                x,
                lane_y,
                VERDICT_MARKERS[verdict],
                color=colour,
                ms=6,
                label=verdict,
                alpha=0.85,
                mec="none",
            )
    posts = tables.messages
    y_posts = lanes_of(posts, "author")
    sel = ~np.isnan(y_posts)
    if sel.any():
        x, lane_y = thin(
            posts["t_s"].to_numpy(dtype=float)[sel] / 60, y_posts[sel].astype(np.int64), px
        )
        ax.plot(x, lane_y + 0.25, "|", color="#1f77b4", ms=5, label="board post", alpha=0.6)
    life = tables.lifecycle
    y_life = lanes_of(life, "agent")
    for event, marker, colour in (
        ("exited", "x", "black"),
        ("restarted", "^", "purple"),
        ("resumed", "s", "brown"),
    ):
        sel = (life["event"] == event).to_numpy() & ~np.isnan(y_life)
        if sel.any():
            x, lane_y = thin(
                life["t_s"].to_numpy(dtype=float)[sel] / 60, y_life[sel].astype(np.int64), px
            )
            ax.plot(x, lane_y, marker, color=colour, ms=7, label=event)
    ax.set_yticks(range(len(seats)), [f"{a}/{g}" for a, g in seats], fontsize=8)
    ax.invert_yaxis()
    if run.budget_minutes:
        ax.axvline(run.budget_minutes, color="grey", lw=0.8, alpha=0.6)
    ax.set_xlim(left=0)
    ax.set_xlabel("minutes since the run started (submission time)")
    ax.grid(alpha=0.3)
    legend_below(fig, ncols=8)
    ax.set_title(title + ": submissions by verdict, board posts, exits and restarts")
    return FigureResult("agent_activity", title, save(fig, path), "")
