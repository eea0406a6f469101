"""The arms at equal spend: each arm's best so far against the output tokens it had spent and
against the judge evaluations it had used (``best_so_far`` draws it against minutes).

Output tokens come from the vendor's own usage as the model proxy read it (``model_calls``:
each call counts when it finished), the same numbers the token budgets are enforced on. A run
without the proxy's numbers falls back to the CLIs' token records, which hold each seat's
totals, not when they were spent: then each arm is one point (its total, its best), and the
caption says so. Evaluations are the arm's agents' judged submissions (the runner's own
re-judgements are not the arm's spend), counted in the order their verdicts came.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figures.draw import (
    FigureResult,
    arm_colours,
    arms_of,
    limit_line,
    metric_of,
    new_figure,
    save,
)
from analysis.tables import RunInfo, Tables

#: Where an arm's output tokens came from.
PROXY, RECORDS = "proxy", "records"
SOURCE_TEXT = {
    PROXY: "output tokens the vendor's responses reported, read by the model proxy",
    RECORDS: "output tokens from the CLIs' own records, totals only: one point per arm",
}


@dataclass
class SpendCurve:
    """One arm's best so far against what it had spent.

    ``spent`` is the spend (cumulative output tokens, or evaluations used) at each point where
    the best changed, ``best`` the best then; ``total`` is the arm's whole spend (the line runs
    on to it)."""

    run_id: str
    arm: str
    spent: np.ndarray
    best: np.ndarray
    total: float


def _agents_calls(tables: Tables, run: RunInfo, arm: str) -> pd.DataFrame:
    calls = tables.model_calls
    calls = calls[(calls["run_id"] == run.run_id) & (calls["arm"] == arm) & (calls["agent"] != "")]
    return calls[calls["output"].notna()]


def token_source(tables: Tables, run: RunInfo) -> str:
    """``proxy`` when the run's seats went through the model proxy and it read output tokens,
    else ``records`` when the CLIs' records hold some, else empty."""
    calls = tables.model_calls
    mine = calls[(calls["run_id"] == run.run_id) & (calls["agent"] != "")]
    if run.proxied and mine["output"].notna().any():
        return PROXY
    tokens = tables.tokens
    return RECORDS if len(tokens[tokens["run_id"] == run.run_id]) else ""


def _passes(tables: Tables, run: RunInfo, arm: str) -> pd.DataFrame:
    ev = tables.evaluations
    ev = ev[(ev["run_id"] == run.run_id) & (ev["arm"] == arm) & ~ev["pseudo_agent"]]
    return ev.sort_values(["finished_at", "job_id"], kind="stable")


def _changes(spent: np.ndarray, scores: np.ndarray, higher: bool) -> tuple[np.ndarray, np.ndarray]:
    """The points where the best so far changed (NaN scores are not PASSes)."""
    best = np.full(len(scores), np.nan)
    current = np.nan
    for i, score in enumerate(scores):
        if not np.isnan(score) and (
            np.isnan(current) or (score > current if higher else score < current)
        ):
            current = score
        best[i] = current
    keep = ~np.isnan(best) & np.r_[True, best[1:] != best[:-1]]
    return spent[keep], best[keep]


def token_curves(tables: Tables) -> list[SpendCurve]:
    """Each arm's best so far against the output tokens its seats had spent when each verdict
    came (the proxy's numbers; with only the CLIs' records, the arm's total and final best)."""
    out = []
    metric = metric_of(tables)
    for run in tables.runs:
        source = token_source(tables, run)
        for arm in run.arms:
            ev = _passes(tables, run, arm)
            scores = ev["score"].where(ev["verdict"] == "PASS").to_numpy(dtype=float)
            if source == PROXY:
                calls = _agents_calls(tables, run, arm).sort_values("finished_at", kind="stable")
                done = calls["finished_at"].to_numpy(dtype=float)
                cumulative = np.cumsum(calls["output"].to_numpy(dtype=float))
                # Tokens of the calls finished by each verdict's time.
                at = np.searchsorted(done, ev["finished_at"].to_numpy(dtype=float), side="right")
                spent = np.where(at > 0, cumulative[np.maximum(at - 1, 0)], 0.0)
                total = float(cumulative[-1]) if len(cumulative) else 0.0
            elif source == RECORDS:
                tokens = tables.tokens
                mine = tokens[(tokens["run_id"] == run.run_id) & (tokens["arm"] == arm)]
                total = float(mine["output"].sum())
                spent = np.full(len(ev), total)  # when each token was spent is not recorded
            else:
                continue
            x, best = _changes(spent, scores, metric.higher_is_better)
            if source == RECORDS and len(best):
                x, best = x[-1:], best[-1:]
            out.append(SpendCurve(run.run_id, arm, x, best, total))
    return out


def evaluation_curves(tables: Tables) -> list[SpendCurve]:
    """Each arm's best so far against the evaluations it had used (its n-th verdict is n)."""
    out = []
    metric = metric_of(tables)
    for run in tables.runs:
        for arm in run.arms:
            ev = _passes(tables, run, arm)
            scores = ev["score"].where(ev["verdict"] == "PASS").to_numpy(dtype=float)
            used = np.arange(1, len(ev) + 1, dtype=float)
            x, best = _changes(used, scores, metric.higher_is_better)
            out.append(SpendCurve(run.run_id, arm, x, best, float(len(ev))))
    return out


def _limit(run: RunInfo, name: str) -> float | None:
    """A per-arm budget's limit from the run's meta ``budgets`` (None: none, or per seat)."""
    entry = (run.meta.get("budgets") or {}).get(name)
    if not isinstance(entry, dict) or entry.get("scope", "per_arm") != "per_arm":
        return None
    limit = entry.get("limit")
    return float(limit) if limit is not None else None


def _draw(
    tables: Tables,
    path: Path,
    name: str,
    title: str,
    curves: list[SpendCurve],
    xlabel: str,
    budget: str,
    note: str,
) -> FigureResult:
    metric = metric_of(tables)
    drawn = [c for c in curves if len(c.best)]
    if not drawn:
        return FigureResult(name, title, None, "no PASS in any arm: nothing to plot")
    colours = arm_colours(arms_of(tables))
    fig, ax = new_figure(8, 4.5, left=0.8, bottom=0.55)
    labelled: set[str] = set()
    for c in drawn:
        x = np.r_[c.spent, max(c.total, float(c.spent[-1]))]
        y = np.r_[c.best, c.best[-1]]
        label = None if c.arm in labelled else c.arm
        width = 2 if len(tables.runs) == 1 else 1.2
        ax.step(x, y, where="post", color=colours[c.arm], lw=width, label=label)
        ax.plot(x[:-1], y[:-1], "o", color=colours[c.arm], ms=4)
        labelled.add(c.arm)
    limit = _limit(tables.runs[0], budget)
    if limit is not None:
        limit_line(ax, limit, "budget per arm")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric.label + ("" if metric.higher_is_better else " (lower is better)"))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(title + (f" ({len(tables.runs)} seeds)" if len(tables.runs) > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return FigureResult(name, title, save(fig, path), note)


def best_vs_tokens(tables: Tables, path: Path) -> FigureResult:
    """Best so far per arm against the output tokens the arm had spent."""
    metric = metric_of(tables)
    title = f"Best {metric.unit or metric.name} so far per arm against output tokens"
    sources = {token_source(tables, run) for run in tables.runs} - {""}
    if not sources:
        return FigureResult(
            "best_vs_tokens", title, None, "no token numbers (no proxy usage, no records)"
        )
    note = "x: " + "; ".join(SOURCE_TEXT[s] for s in sorted(sources))
    xlabel = "output tokens the arm had spent (at each verdict)"
    curves = token_curves(tables)
    return _draw(tables, path, "best_vs_tokens", title, curves, xlabel, "output_tokens", note)


def best_vs_evaluations(tables: Tables, path: Path) -> FigureResult:
    """Best so far per arm against the judge evaluations the arm had used."""
    metric = metric_of(tables)
    title = f"Best {metric.unit or metric.name} so far per arm against evaluations used"
    note = "x: the arm's agents' judged submissions in verdict order, re-judgements left out"
    xlabel = "judge evaluations the arm had used"
    curves = evaluation_curves(tables)
    return _draw(tables, path, "best_vs_evaluations", title, curves, xlabel, "evaluations", note)
