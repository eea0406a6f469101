"""The judge's timeline: the one serial judge over time, each evaluation a bar by arm and
verdict, with its busy share over the agents' phase."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.figures.draw import (
    VERDICT_COLOURS,
    VERDICT_MARKERS,
    FigureResult,
    arm_colours,
    arms_of,
    legend_below,
    new_figure,
    pixel,
    save,
    spans,
    thin,
)
from analysis.tables import Tables, phase_busy_s
from runrecord import REJUDGING_AGENTS


def judge_timeline(tables: Tables, path: Path) -> FigureResult:
    """The serial judge over time: each evaluation a bar from start to end, by arm and verdict."""
    title = "The judge's timeline"
    ev = tables.evaluations
    if ev.empty:
        return FigureResult("judge_timeline", title, None, "no evaluations: the judge never ran")
    colours = arm_colours(arms_of(tables))
    runs = [r.run_id for r in tables.runs]
    lane = {run_id: i for i, run_id in enumerate(runs)}
    fig, ax = new_figure(10, 1.8 + 0.7 * len(runs), left=1.0, bottom=0.8)
    start = ev["t_start_s"].to_numpy(dtype=float) / 60
    end = start + np.maximum(ev["duration_s"].to_numpy(dtype=float) / 60, 0)
    y = ev["run_id"].map(lane).to_numpy(dtype=np.int64)
    px = pixel(start, end)
    arm_index = {arm: i for i, arm in enumerate(colours)}
    verdict_index = {v: i for i, v in enumerate(VERDICT_COLOURS)}
    arm_key = ev["arm"].map(arm_index).fillna(-1).to_numpy(dtype=np.int64)
    verdict_key = ev["verdict"].map(verdict_index).fillna(-1).to_numpy(dtype=np.int64)
    # One collection per lane and colour, whatever the number of evaluations.
    for row in np.unique(y):
        sel = y == row
        s, e, k = spans(start[sel], end[sel], arm_key[sel], px)
        for arm, colour in colours.items():
            pick = k == arm_index[arm]
            if pick.any():
                ax.broken_barh(
                    np.column_stack([s[pick], e[pick] - s[pick]]),
                    (row - 0.3, 0.45),
                    facecolors=colour,
                    edgecolor="white",
                    linewidth=0.3,
                )
        s, e, k = spans(start[sel], end[sel], verdict_key[sel], px)
        mid, kind = thin((start[sel] + end[sel]) / 2, verdict_key[sel], px)
        for verdict, colour in VERDICT_COLOURS.items():
            pick = k == verdict_index[verdict]
            if pick.any():
                ax.broken_barh(
                    np.column_stack([s[pick], e[pick] - s[pick]]),
                    (row + 0.18, 0.14),
                    facecolors=colour,
                    linewidth=0,
                )
            # A bar too short to see (a REJECT in 50 ms) still gets its verdict mark.
            marks = mid[kind == verdict_index[verdict]]
            if len(marks):
                ax.plot(
                    marks,
                    np.full(len(marks), row + 0.42),
                    VERDICT_MARKERS[verdict],
                    color=colour,
                    ms=5,
                    mec="none",
                )
    # Busy over the agents' phase, as formula one counts it (the re-judging comes after it).
    phase = ev[~ev["agent"].isin(list(REJUDGING_AGENTS))]
    labels = []
    for run in tables.runs:
        busy = phase_busy_s(phase[phase["run_id"] == run.run_id], run.run_seconds)
        share = busy / run.run_seconds if run.run_seconds else 0.0
        labels.append(
            (f"seed {run.seed}\n" if len(runs) > 1 else "judge\n") + f"busy {100 * share:.0f}%"
        )
    ax.set_yticks(range(len(runs)), labels, fontsize=8)
    ax.set_ylim(-0.5, len(runs) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("minutes since the run started (white: the judge idle)")
    handles = [Patch(color=c, label=a) for a, c in colours.items()] + [
        Line2D([], [], color=VERDICT_COLOURS[v], marker=VERDICT_MARKERS[v], lw=4, label=v)
        for v in VERDICT_COLOURS
        if (ev["verdict"] == v).any()
    ]
    legend_below(fig, handles, ncols=len(handles))
    for run in tables.runs:
        if run.rejudging_at is not None:
            # After this line the judge re-judges each arm's best and start: the runner's work.
            at = (run.rejudging_at - run.started_at) / 60
            ax.axvline(at, color="black", lw=0.8, ls="--")
            ax.annotate(
                "re-judging",
                (at, 0),
                xycoords=("data", "axes fraction"),
                xytext=(3, 3),
                textcoords="offset points",
                fontsize=7,
            )
    ax.set_title(title + ": bar colour = arm; strip and mark below = verdict")
    ax.grid(axis="x", alpha=0.3)
    return FigureResult("judge_timeline", title, save(fig, path), "")
