"""``## Budgets``: what each arm was allowed and what it spent, which budget ended each seat,
and the finding that flags an arm that ended with budget unspent (its comparison with the other
arm is then not at equal spend).

The limits are the run's meta ``budgets`` (``{"minutes": M, "output_tokens": {"limit": N,
"scope": "per_arm"}, ..., "match": NAME}``; a run made before it has only minutes). What was
spent is read from the run's own record, as the budgets are enforced: output and input tokens
from the vendor's usage at the model proxy (``model_calls``; input counts uncached, cache reads
and cache writes), evaluations from the arm's agents' judged submissions (the ``arms`` table's
``evaluations``), cost from the ``budget_spent`` events the runner wrote (the proxy's own
estimate; a cost that never ran out is not recomputed here). Which budget ended a seat is its
``budget_spent`` lifecycle event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.report.markdown import num, pct, table
from analysis.tables import RunInfo, Tables, finite_or_none

#: The budgets besides minutes, in the order the report lists them.
BUDGETS = ("output_tokens", "input_tokens", "cost_usd", "evaluations")
LABELS = {
    "output_tokens": "output tokens",
    "input_tokens": "input tokens",
    "cost_usd": "cost (USD, estimate)",
    "evaluations": "evaluations",
}
_INPUT = ("input", "cache_read", "cache_write")


@dataclass
class Spend:
    """One budget of one arm (``agent`` empty) or of one seat (a per-seat budget)."""

    arm: str
    agent: str
    budget: str
    limit: float
    spent: float | None  # None: not known from the record

    @property
    def left(self) -> float | None:
        return None if self.spent is None else self.limit - self.spent

    @property
    def unspent(self) -> bool:
        left = self.left
        return left is not None and left > 0


def run_budgets(run: RunInfo) -> dict[str, dict[str, Any]]:
    """The run's budgets besides minutes: name -> {limit, scope} (empty: minutes only)."""
    meta = run.meta.get("budgets") or {}
    return {
        name: meta[name]
        for name in BUDGETS
        if isinstance(meta.get(name), dict) and meta[name].get("limit") is not None
    }


def budgets_text(run: RunInfo) -> str:
    """The run's budgets in one line, e.g. ``1.7 min; output tokens 5,000 per arm (matched)``,
    or ``minutes only: 1.7 min``."""
    budgets = run_budgets(run)
    minutes = f"{num(run.budget_minutes)} min"
    if not budgets:
        return f"minutes only: {minutes}"
    match = (run.meta.get("budgets") or {}).get("match")
    parts = [minutes]
    for name, entry in budgets.items():
        scope = "per seat" if entry.get("scope") == "per_seat" else "per arm"
        digits = 2 if name == "cost_usd" else 0
        matched = ", matched between the arms" if match == name else ""
        parts.append(f"{LABELS[name]} {num(entry['limit'], digits)} {scope}{matched}")
    return "; ".join(parts)


def _events(tables: Tables, run: RunInfo) -> pd.DataFrame:
    lc = tables.lifecycle
    return lc[(lc["run_id"] == run.run_id) & (lc["event"] == "budget_spent")]


def ended_by(tables: Tables, run: RunInfo) -> dict[tuple[str, str], dict[str, Any]]:
    """(arm, agent) -> the detail of its first ``budget_spent`` event (budget, spent, limit)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in _events(tables, run).itertuples(index=False):
        detail = json.loads(row.detail) if isinstance(row.detail, str) else {}
        out.setdefault((str(row.arm), str(row.agent)), detail)
    return out


def _tokens_spent(tables: Tables, run: RunInfo, arm: str, agent: str, budget: str) -> float | None:
    if not run.proxied:  # token budgets are counted at the proxy: nothing to read without it
        return None
    calls = tables.model_calls
    calls = calls[(calls["run_id"] == run.run_id) & (calls["arm"] == arm) & (calls["agent"] != "")]
    if agent:
        calls = calls[calls["agent"] == agent]
    columns = ["output"] if budget == "output_tokens" else list(_INPUT)
    return float(calls[columns].astype(float).fillna(0.0).to_numpy().sum())


def _cost_spent(tables: Tables, run: RunInfo, arm: str, agent: str) -> float | None:
    spent = [
        finite_or_none(d.get("spent"))
        for (a, g), d in ended_by(tables, run).items()
        if a == arm and (not agent or g == agent) and d.get("budget") == "cost_usd"
    ]
    known = [s for s in spent if s is not None]
    # A per-arm pool's seats each report the pool's spend: the largest is the last word.
    return max(known) if known else None


def spends(tables: Tables, run: RunInfo) -> list[Spend]:
    """Every budget of the run per arm (per seat for a per-seat budget), limit and spend."""
    arms = tables.arms[tables.arms["run_id"] == run.run_id].set_index("arm")
    out = []
    for name, entry in run_budgets(run).items():
        per_seat = entry.get("scope") == "per_seat"
        for arm in run.arms:
            agents = [s.agent for s in run.seats if s.arm == arm] if per_seat else [""]
            for agent in agents:
                spent: float | None
                if name == "evaluations":
                    ev = tables.evaluations
                    ev = ev[(ev["run_id"] == run.run_id) & (ev["arm"] == arm) & ~ev["pseudo_agent"]]
                    if agent:
                        ev = ev[ev["agent"] == agent]
                    spent = float(len(ev)) if agent else float(arms.loc[arm, "evaluations"])
                elif name == "cost_usd":
                    spent = _cost_spent(tables, run, arm, agent)
                else:
                    spent = _tokens_spent(tables, run, arm, agent, name)
                out.append(Spend(arm, agent, name, float(entry["limit"]), spent))
    return out


def budget_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## Budgets``: the run's budgets, each arm's limit, spend and what was left, and which
    budget ended each seat."""
    lines = ["## Budgets", "", f"Budgets of this run: {budgets_text(run)}.", ""]
    rows = []
    for s in spends(tables, run):
        digits = 2 if s.budget == "cost_usd" else 0
        share = s.spent / s.limit if s.spent is not None and s.limit > 0 else None
        rows.append([
            s.arm + (f"/{s.agent}" if s.agent else ""),
            LABELS[s.budget],
            num(s.limit, digits),
            num(s.spent, digits),
            pct(share),
            "**unspent**" if s.unspent else ("-" if s.spent is None else "spent"),
        ])  # fmt: skip
    if rows:
        lines += [*table(["arm", "budget", "limit", "spent", "of limit", "at the end"], rows), ""]
    ends = ended_by(tables, run)
    if ends:
        shown = ", ".join(
            f"{arm}/{agent} by {LABELS.get(str(d.get('budget')), d.get('budget'))}"
            f" ({num(d.get('spent'), 0)} of "
            f"{num(d.get('limit'), 0)})"
            for (arm, agent), d in sorted(ends.items())
        )
        rest = [f"{s.arm}/{s.agent}" for s in run.seats if (s.arm, s.agent) not in ends]
        tail = (
            f"; the others ({', '.join(rest)}) ran until the run ended"
            f" (`{run.meta.get('ended_by') or run.status}`)"
            if rest
            else ""
        )
        lines += [f"Which budget ended each seat: {shown}{tail}.", ""]
    elif rows:
        lines += [
            "No seat was ended by a budget: every seat ran until the run ended"
            f" (`{run.meta.get('ended_by') or run.status}`).",
            "",
        ]
    return lines


def unspent_budget(tables: Tables, run: RunInfo) -> list[str]:
    """An arm (or seat) that ended with part of its budget unspent: the arms were then not
    compared at equal spend on that budget."""
    out = []
    for s in spends(tables, run):
        if not s.unspent or s.spent is None:
            continue
        digits = 2 if s.budget == "cost_usd" else 0
        who = f"{s.arm}/{s.agent}" if s.agent else s.arm
        out.append(
            f"{who} ended with {pct((s.left or 0) / s.limit)} of its {LABELS[s.budget]} budget"
            f" unspent ({num(s.spent, digits)} of {num(s.limit, digits)} used): on that"
            " budget the arms were not compared at equal spend."
        )
    return out
