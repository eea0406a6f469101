"""Figures (PNG, matplotlib's Agg backend) from the tidy tables.

Each figure is drawn from aggregated data (change points, per-arm counts, one collection per
colour), never one artist per event, so a million-event run draws in about the time a small one
does. A figure that has nothing to show is skipped with a note saying why, never drawn empty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis._git import PSEUDO_AGENTS
from analysis.tables import Tables, phase_busy_s
from judge.kinds import Metric

__all__ = ["VERDICT_COLOURS", "FigureResult", "arm_colours", "make_figures"]

VERDICT_COLOURS = {
    "PASS": "#2ca02c",
    "WRONG": "#d62728",
    "REJECT": "#ff7f0e",
    "ERROR": "#7f7f7f",
    "not evaluated": "#c7c7c7",
}
# Arm colours stay clear of the verdict colours (green, red, orange, grey).
_ARM_PALETTE = ["#1f77b4", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22", "#393b79"]
_VERDICT_MARKERS = {"PASS": "o", "WRONG": "X", "REJECT": "s", "ERROR": "^", "not evaluated": "."}
_DPI = 110
# Horizontal resolution aggregation keeps (the widest figure is 1100 pixels), and the number of
# bars or markers below which every one is drawn as it is.
_PIXELS = 2000
_MERGE_ABOVE = 2000
# PNG metadata without a version string: the same tables give the same bytes on any install.
_META = {"Software": None}


@dataclass(frozen=True)
class FigureResult:
    """A drawn figure (``path`` set) or a skipped one (``path`` None, ``note`` says why)."""

    name: str
    title: str
    path: Path | None
    note: str


def arm_colours(arms: list[str]) -> dict[str, str]:
    """One stable colour per arm, in the order the run lists its arms."""
    return {arm: _ARM_PALETTE[i % len(_ARM_PALETTE)] for i, arm in enumerate(arms)}


def _arms(tables: Tables) -> list[str]:
    seen: dict[str, None] = {}
    for run in tables.runs:
        for arm in run.arms:
            seen.setdefault(arm, None)
    return list(seen)


def _figure(
    width: float,
    height: float,
    left: float,
    bottom: float,
    top: float = 0.45,
    right: float = 0.25,
    **kwargs: object,
) -> tuple[plt.Figure, Any]:
    """A figure with fixed margins in inches: a layout engine would cost a third of the time."""
    fig, ax = plt.subplots(figsize=(width, height), **kwargs)  # type: ignore[arg-type]
    fig.subplots_adjust(
        left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height
    )
    return fig, ax


def _legend_below(fig: plt.Figure, handles: list[Any] | None = None, ncols: int = 6) -> None:
    if handles is None:
        handles = [h for ax in fig.axes for h in ax.get_legend_handles_labels()[0]]
    if not handles:
        return
    fig.legend(
        handles=handles,
        loc="lower center",
        ncols=ncols,
        fontsize=7,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )


def _pixel(start: np.ndarray, end: np.ndarray) -> float:
    """The time one pixel column covers: finer detail than this cannot be seen anyway."""
    if not len(start):
        return 1.0
    span = float(np.nanmax(end) - min(0.0, float(np.nanmin(start))))
    return max(span, 1e-9) / _PIXELS


def _spans(
    start: np.ndarray, end: np.ndarray, key: np.ndarray, px: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bars as (start, end, key). Up to ``_MERGE_ABOVE`` bars each stays its own. Beyond, each
    pixel column keeps one bar, from its first start to its last end, in the key that had most
    of its time, and neighbouring columns of one key join: idle gaps of a pixel or more stay."""
    order = np.argsort(start, kind="stable")
    s, e, k = start[order], end[order], key[order]
    if len(s) <= _MERGE_ABOVE:
        return s, e, k
    column = np.floor((s + e) / 2 / px).astype(np.int64)
    # Time per (column, key), then the key with the most time in each column.
    by = np.lexsort((k, column))
    c_s, k_s, d_s = column[by], k[by], (e - s)[by]
    group = np.flatnonzero(np.r_[True, (c_s[1:] != c_s[:-1]) | (k_s[1:] != k_s[:-1])])
    total, g_col, g_key = np.add.reduceat(d_s, group), c_s[group], k_s[group]
    rank = np.lexsort((-total, g_col))
    top = np.r_[True, g_col[rank][1:] != g_col[rank][:-1]]
    winner = g_key[rank][top]
    cols = np.flatnonzero(np.r_[True, c_s[1:] != c_s[:-1]])
    first, last = np.minimum.reduceat(s[by], cols), np.maximum.reduceat(e[by], cols)
    cut = np.r_[True, (winner[1:] != winner[:-1]) | (first[1:] - last[:-1] > px)]
    keep = np.flatnonzero(cut)
    return first[keep], np.maximum.reduceat(last, keep), winner[keep]


def _thin(x: np.ndarray, lane: np.ndarray, px: float) -> tuple[np.ndarray, np.ndarray]:
    """Markers: at most one per pixel column and lane once there are more than a few."""
    if len(x) <= _MERGE_ABOVE:
        return x, lane
    key = np.floor(x / px).astype(np.int64) * 65536 + lane.astype(np.int64)
    _, first = np.unique(key, return_index=True)
    first.sort()
    return x[first], lane[first]


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=_DPI, metadata=_META)
    plt.close(fig)
    return path


def _baseline(tables: Tables) -> float | None:
    values = tables.evaluations["baseline_score"].dropna()
    return float(values.median()) if len(values) else None


def _metric(tables: Tables) -> Metric:
    """The task's metric (one task per run or sweep): axis labels and direction come from it."""
    return tables.runs[0].metric


def best_so_far(tables: Tables, path: Path) -> FigureResult:
    """Best PASS score so far per arm (per seed in a sweep), with baseline and target lines;
    the best is the running minimum for a lower-is-better metric."""
    metric = _metric(tables)
    title = f"Best {metric.unit or metric.name} so far per arm"
    ev = tables.evaluations
    passes = ev[(ev["verdict"] == "PASS") & ~ev["pseudo_agent"] & ev["score"].notna()]
    if passes.empty:
        return FigureResult("best_so_far", title, None, "no PASS in any arm: nothing to plot")
    colours = arm_colours(_arms(tables))
    ends = {run.run_id: run.run_seconds / 60 for run in tables.runs}
    fig, ax = _figure(8, 4.5, left=0.8, bottom=0.55)
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
    # Each arm's best judged again after the deadline (runner/confirm.py): the honest number.
    confirmed = tables.arms.dropna(subset=["confirmed_score"])
    for row in confirmed.itertuples(index=False):
        ax.plot(
            ends.get(row.run_id, 0.0),
            row.confirmed_score,
            "D",
            color=colours[row.arm],
            ms=8,
            mec="black",
            label=None if "re-judged" in labelled else "best re-judged",
        )
        labelled.add("re-judged")
    baseline = _baseline(tables)
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
        ax.axvline(budget, color="grey", lw=0.8, alpha=0.6)
        ax.annotate(
            "deadline",
            (budget, 0.5),
            xycoords=("data", "axes fraction"),
            xytext=(-10, 0),
            textcoords="offset points",
            fontsize=8,
            color="grey",
            rotation=90,
            va="center",
        )
    ax.set_xlabel("minutes since the run started (verdict time)")
    ax.set_ylabel(metric.label + ("" if metric.higher_is_better else " (lower is better)"))
    ax.set_ylim(bottom=0)
    ax.set_title(title + (f" ({len(tables.runs)} seeds)" if len(tables.runs) > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    note = "baseline: median of the judge's baseline measurements in this run"
    return FigureResult("best_so_far", title, _save(fig, path), note)


def judge_timeline(tables: Tables, path: Path) -> FigureResult:
    """The serial judge over time: each evaluation a bar from start to end, by arm and verdict."""
    title = "The judge's timeline"
    ev = tables.evaluations
    if ev.empty:
        return FigureResult("judge_timeline", title, None, "no evaluations: the judge never ran")
    colours = arm_colours(_arms(tables))
    runs = [r.run_id for r in tables.runs]
    lane = {run_id: i for i, run_id in enumerate(runs)}
    fig, ax = _figure(10, 1.8 + 0.7 * len(runs), left=1.0, bottom=0.8)
    start = ev["t_start_s"].to_numpy(dtype=float) / 60
    end = start + np.maximum(ev["duration_s"].to_numpy(dtype=float) / 60, 0)
    y = ev["run_id"].map(lane).to_numpy(dtype=np.int64)
    px = _pixel(start, end)
    arm_index = {arm: i for i, arm in enumerate(colours)}
    verdict_index = {v: i for i, v in enumerate(VERDICT_COLOURS)}
    arm_key = ev["arm"].map(arm_index).fillna(-1).to_numpy(dtype=np.int64)
    verdict_key = ev["verdict"].map(verdict_index).fillna(-1).to_numpy(dtype=np.int64)
    # One collection per lane and colour, whatever the number of evaluations.
    for row in np.unique(y):
        sel = y == row
        s, e, k = _spans(start[sel], end[sel], arm_key[sel], px)
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
        s, e, k = _spans(start[sel], end[sel], verdict_key[sel], px)
        mid, kind = _thin((start[sel] + end[sel]) / 2, verdict_key[sel], px)
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
                    _VERDICT_MARKERS[verdict],
                    color=colour,
                    ms=5,
                    mec="none",
                )
    # Busy over the agents' phase, as formula one counts it (the re-judging comes after it).
    phase = ev[~ev["agent"].isin(["confirm", "baseline"])]
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
        Line2D([], [], color=VERDICT_COLOURS[v], marker=_VERDICT_MARKERS[v], lw=4, label=v)
        for v in VERDICT_COLOURS
        if (ev["verdict"] == v).any()
    ]
    _legend_below(fig, handles, ncols=len(handles))
    for run in tables.runs:
        if run.rechecks_at is not None:
            # After this line the judge re-judges each arm's best and start: the runner's work.
            at = (run.rechecks_at - run.started_at) / 60
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
    return FigureResult("judge_timeline", title, _save(fig, path), "")


def verdict_mix(tables: Tables, path: Path) -> FigureResult:
    """How each arm's evaluations ended: PASS, WRONG, REJECT, ERROR (and not evaluated)."""
    title = "Verdict mix per arm"
    subs = tables.submissions[~tables.submissions["agent"].isin(list(PSEUDO_AGENTS))]
    if subs.empty:
        return FigureResult("verdict_mix", title, None, "no submissions in any arm")
    arms = _arms(tables)
    counts = (
        subs.groupby(["arm", "verdict"]).size().unstack(fill_value=0).reindex(arms, fill_value=0)
    )
    fig, ax = _figure(8, 1.6 + 0.6 * len(arms), left=0.9, bottom=0.8)
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
    _legend_below(fig, ncols=5)
    ax.set_title(title)
    return FigureResult("verdict_mix", title, _save(fig, path), "")


def token_cost(tables: Tables, path: Path) -> FigureResult:
    """Output tokens per arm and what one unit of the metric gained cost; skipped without token
    records."""
    title = "Token cost per arm"
    if tables.tokens.empty:
        return FigureResult("token_cost", title, None, "no token records: nothing is invented")
    arms = [a for a in _arms(tables) if a in set(tables.tokens["arm"])]
    colours = arm_colours(_arms(tables))
    out = tables.tokens.groupby("arm")["output"].sum().reindex(arms, fill_value=0)
    cost = tables.arms.groupby("arm")["token_cost_per_gain"].median().reindex(arms)
    fig, axes = _figure(9, 3.8, left=0.9, bottom=0.45, top=0.7, ncols=2)
    fig.subplots_adjust(wspace=0.35)
    axes[0].bar(arms, out.to_numpy(), color=[colours[a] for a in arms])
    axes[0].set_ylabel("output tokens")
    axes[0].set_title("output tokens" + (" (all seeds)" if len(tables.runs) > 1 else ""))
    finite = np.where(np.isfinite(cost.to_numpy(dtype=float)), cost.to_numpy(dtype=float), 0)
    axes[1].bar(arms, finite, color=[colours[a] for a in arms])
    for i, value in enumerate(cost.to_numpy(dtype=float)):
        label = "no gain" if np.isinf(value) else ("-" if np.isnan(value) else f"{value:,.0f}")
        axes[1].annotate(label, (i, finite[i]), ha="center", va="bottom", fontsize=8)
    axes[1].set_ylabel(f"output tokens per {_metric(tables).unit or 'unit'} gained")
    axes[1].set_title("token cost per gain")
    fig.suptitle(title)
    return FigureResult("token_cost", title, _save(fig, path), "")


def agent_activity(tables: Tables, path: Path) -> FigureResult:
    """Each agent's submissions over time by verdict, with exits and restarts (single runs)."""
    title = "Agent activity"
    if len(tables.runs) != 1:
        return FigureResult("agent_activity", title, None, "per-agent lanes are drawn per run")
    run = tables.runs[0]
    seats = [(s.arm, s.agent) for s in run.seats]
    if not seats:
        return FigureResult("agent_activity", title, None, "the run recorded no seats")
    fig, ax = _figure(10, 1.5 + 0.35 * len(seats), left=1.1, bottom=0.8)
    lanes = pd.Series(range(len(seats)), index=[f"{a}/{g}" for a, g in seats], dtype=float)

    def lanes_of(df: pd.DataFrame, who: str) -> np.ndarray:
        return (df["arm"] + "/" + df[who]).map(lanes).to_numpy(dtype=float)

    subs = tables.submissions
    t_subs, y_subs = subs["t_s"].to_numpy(dtype=float) / 60, lanes_of(subs, "agent")
    px = _pixel(t_subs, np.array([run.run_seconds / 60]))
    for verdict, colour in VERDICT_COLOURS.items():
        sel = (subs["verdict"] == verdict).to_numpy() & ~np.isnan(y_subs)
        if sel.any():
            x, lane_y = _thin(t_subs[sel], y_subs[sel].astype(np.int64), px)
            ax.plot(
                x,
                lane_y,
                _VERDICT_MARKERS[verdict],
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
        x, lane_y = _thin(
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
            x, lane_y = _thin(
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
    _legend_below(fig, ncols=8)
    ax.set_title(title + ": submissions by verdict, board posts, exits and restarts")
    return FigureResult("agent_activity", title, _save(fig, path), "")


def seeds_best(tables: Tables, path: Path) -> FigureResult:
    """A sweep: each seed's best score per arm, seeds joined across arms."""
    title = "Each seed's best per arm"
    if len(tables.runs) < 2:
        return FigureResult("seeds_best", title, None, "one seed: nothing to compare across")
    arms = _arms(tables)
    colours = arm_colours(arms)
    table = tables.arms.pivot_table(
        index="seed",
        columns="arm",
        values="best_score",
        aggfunc="max" if _metric(tables).higher_is_better else "min",
    ).reindex(columns=arms)
    fig, ax = _figure(6, 4.5, left=0.8, bottom=0.5, right=0.7)
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
    baseline = _baseline(tables)
    if baseline is not None:
        ax.axhline(baseline, color="black", ls="--", lw=1, label=f"baseline {baseline:.0f}")
        ax.legend(fontsize=8)
    ax.set_xticks(x, arms)
    ax.set_xlim(-0.5, len(arms) - 0.3)
    ax.set_ylabel(f"best {_metric(tables).label} (bar: median over seeds)")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return FigureResult("seeds_best", title, _save(fig, path), "")


_FIGURES: list[tuple[str, Callable[[Tables, Path], FigureResult]]] = [
    ("best_so_far", best_so_far),
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
