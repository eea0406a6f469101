"""What every figure draws with: colours and markers, the result type, fixed-margin figures, a
legend below, and the aggregation that keeps a million-event run as cheap to draw as a small one
(bars merged and markers thinned per pixel column)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from analysis.tables import Tables
from judge import Metric

VERDICT_COLOURS = {
    "PASS": "#2ca02c",
    "WRONG": "#d62728",
    "REJECT": "#ff7f0e",
    "ERROR": "#7f7f7f",
    "not evaluated": "#c7c7c7",
}
# Arm colours stay clear of the verdict colours (green, red, orange, grey).
ARM_PALETTE = ["#1f77b4", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22", "#393b79"]
VERDICT_MARKERS = {"PASS": "o", "WRONG": "X", "REJECT": "s", "ERROR": "^", "not evaluated": "."}
DPI = 110
# Horizontal resolution aggregation keeps (the widest figure is 1100 pixels), and the number of
# bars or markers below which every one is drawn as it is.
PIXELS = 2000
MERGE_ABOVE = 2000
# PNG metadata without a version string: the same tables give the same bytes on any install.
META = {"Software": None}


@dataclass(frozen=True)
class FigureResult:
    """A drawn figure (``path`` set) or a skipped one (``path`` None, ``note`` says why)."""

    name: str
    title: str
    path: Path | None
    note: str


def arm_colours(arms: list[str]) -> dict[str, str]:
    """One stable colour per arm, in the order the run lists its arms."""
    return {arm: ARM_PALETTE[i % len(ARM_PALETTE)] for i, arm in enumerate(arms)}


def arms_of(tables: Tables) -> list[str]:
    """Every arm of the run or sweep, in the order the runs list them."""
    seen: dict[str, None] = {}
    for run in tables.runs:
        for arm in run.arms:
            seen.setdefault(arm, None)
    return list(seen)


def new_figure(
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


def legend_below(fig: plt.Figure, handles: list[Any] | None = None, ncols: int = 6) -> None:
    """One legend under the axes (default: every artist's label), ``ncols`` wide."""
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


def pixel(start: np.ndarray, end: np.ndarray) -> float:
    """The time one pixel column covers: finer detail than this cannot be seen anyway."""
    if not len(start):
        return 1.0
    span = float(np.nanmax(end) - min(0.0, float(np.nanmin(start))))
    return max(span, 1e-9) / PIXELS


def spans(
    start: np.ndarray, end: np.ndarray, key: np.ndarray, px: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bars as (start, end, key). Up to ``MERGE_ABOVE`` bars each stays its own. Beyond, each
    pixel column keeps one bar, from its first start to its last end, in the key that had most
    of its time, and neighbouring columns of one key join: idle gaps of a pixel or more stay."""
    order = np.argsort(start, kind="stable")
    s, e, k = start[order], end[order], key[order]
    if len(s) <= MERGE_ABOVE:
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


def thin(x: np.ndarray, lane: np.ndarray, px: float) -> tuple[np.ndarray, np.ndarray]:
    """Markers: at most one per pixel column and lane once there are more than a few."""
    if len(x) <= MERGE_ABOVE:
        return x, lane
    key = np.floor(x / px).astype(np.int64) * 65536 + lane.astype(np.int64)
    _, first = np.unique(key, return_index=True)
    first.sort()
    return x[first], lane[first]


def save(fig: plt.Figure, path: Path) -> Path:
    """Write the PNG (fixed dpi, no version metadata) and close the figure."""
    fig.savefig(path, dpi=DPI, metadata=META)
    plt.close(fig)
    return path


def baseline_of(tables: Tables) -> float | None:
    """The median of the judge's baseline measurements, or None without any."""
    values = tables.evaluations["baseline_score"].dropna()
    return float(values.median()) if len(values) else None


def metric_of(tables: Tables) -> Metric:
    """The task's metric (one task per run or sweep): axis labels and direction come from it."""
    return tables.runs[0].metric


def limit_line(ax: Any, x: float, text: str) -> None:
    """A grey vertical line at ``x`` (a deadline, a budget) labelled ``text`` along it."""
    ax.axvline(x, color="grey", lw=0.8, alpha=0.6)
    ax.annotate(
        text,
        (x, 0.5),
        xycoords=("data", "axes fraction"),
        xytext=(-10, 0),
        textcoords="offset points",
        fontsize=8,
        color="grey",
        rotation=90,
        va="center",
    )
