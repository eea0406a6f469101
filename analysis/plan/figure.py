"""The planner's figure: judge utilisation and mean queue wait against seats per arm, one line
per judge (devices by colour, speed by line style), the saturation line marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from analysis.plan.sim import SATURATED

__all__ = ["team_figure"]

_COLOURS = ["#1f77b4", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22"]


def team_figure(table: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Draw ``table`` (:func:`analysis.plan.team.team_table`) to ``path`` (PNG).

    Returns:
        ``path``.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    devices = sorted(table["devices"].unique())
    speeds = sorted(table["speed"].unique())
    for i, count in enumerate(devices):
        for speed in speeds:
            rows = table[(table["devices"] == count) & (table["speed"] == speed)]
            rows = rows.sort_values("seats_per_arm")
            style = dict(
                color=_COLOURS[i % len(_COLOURS)],
                linestyle="-" if speed == speeds[0] else "--",
                marker="o",
                markersize=3,
                label=f"{count} device(s), {speed:g}x",
            )
            left.plot(rows["seats_per_arm"], rows["utilisation"], **style)
            right.plot(rows["seats_per_arm"], rows["mean_wait_s"], **style)
    left.axhline(SATURATED, color="#7f7f7f", linewidth=0.8, linestyle=":")
    left.text(1, SATURATED, " saturated", va="bottom", fontsize=8, color="#7f7f7f")
    left.set(xscale="log", xlabel="seats per arm", ylabel="judge utilisation", ylim=(0, 1.05))
    right.set(xscale="log", xlabel="seats per arm", ylabel="mean queue wait (s)")
    for ax in (left, right):
        ax.grid(True, linewidth=0.3)
    fig.suptitle(f"Simulation: {title}" if title else "Simulation", fontsize=10)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.subplots_adjust(bottom=0.3, wspace=0.25)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
