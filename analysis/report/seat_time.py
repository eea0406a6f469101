"""Findings on the seats' time: what each seat lost to its model endpoint or its disk quota,
exits before the deadline and long idle stretches (see :mod:`analysis.report.findings`)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from analysis.report.markdown import num, pct, pct1
from analysis.report.measures import lost_shares
from analysis.tables import RunInfo, Tables

#: An agent with no submission, post or pending verdict for this share of the run idled.
IDLE_SHARE = 0.25


def endpoint_losses(tables: Tables, run: RunInfo) -> list[str]:
    """Seat time lost to the model endpoint: an arm that lost more had a shorter budget."""
    lost = lost_shares(tables, run)
    if not lost or not any(s for s, _ in lost.values()):
        return []
    shown = ", ".join(
        f"{arm} {num(s / 60)} seat-min ({pct1(share)} of its seat time)"
        for arm, (s, share) in lost.items()
    )
    line = (
        f"Seats lost time to model endpoint failures (rate limits, 5xx, unreachable; from the "
        f"model proxy's record of every call): {shown}"
    )
    shares = [share for _, share in lost.values() if share is not None]
    if len(lost) == 1:
        return [f"{line}: its effective budget was that much shorter than the nominal one."]
    gap = max(shares) - min(shares) if len(shares) == len(lost) else None
    if gap is not None and round(100 * gap, 1) == 0:
        return [
            f"{line}: the same share in every arm, so the budgets stayed equal, each that "
            "much shorter than the nominal one."
        ]
    return [
        f"{line}: the arms' effective budgets differed by {pct1(gap)} of seat time, so the "
        "comparison is between unequal budgets."
    ]


def disk_quota(tables: Tables, run: RunInfo) -> list[str]:
    """Seats that filled their disk quota (``quota`` events), or a quota that was not enforced
    (``isolation/quota.py``)."""
    out = []
    quota = run.meta.get("disk_quota") or {}
    if quota.get("mb") and quota.get("enforced") is False:
        out.append(
            f"The seats' disk quota ({quota['mb']} MiB) was not enforced: {quota.get('why')}."
        )
    life = tables.lifecycle
    full = life[life["event"] == "quota"]
    for (arm, agent), group in full.groupby(["arm", "agent"], sort=True):
        limits = {_limit_mib(d) for d in group["detail"]} - {None}
        times = ", ".join(f"{t / 60:.1f}" for t in group["t_s"])
        out.append(
            f"{arm}/{agent} filled its disk quota"
            + (f" ({', '.join(sorted(limits))} MiB)" if limits else "")
            + f" {len(group)} time(s) (at minute {times}): its writes failed with ENOSPC until "
            "it made room."
        )
    return out


def _limit_mib(detail: Any) -> str | None:
    try:
        limit = json.loads(detail).get("limit_bytes")
    except (TypeError, ValueError, AttributeError):
        return None
    return f"{limit / 2**20:.0f}" if isinstance(limit, int | float) else None


def early_exits(tables: Tables, run: RunInfo) -> list[str]:
    """Seats whose agent exited before the deadline and was restarted."""
    out = []
    life = tables.lifecycle
    exits = life[life["event"] == "exited"]
    if run.deadline is not None:
        # A scripted agent ends its own work at the deadline, a moment before the runner stops
        # every seat: that exit is the deadline's doing, not one "before the deadline".
        exits = exits[exits["at"] < run.deadline]
    for (arm, agent), group in exits.groupby(["arm", "agent"], sort=True):
        times = ", ".join(f"{t / 60:.1f}" for t in group["t_s"])
        out.append(
            f"{arm}/{agent} exited before the deadline {len(group)} time(s) (at minute {times}) "
            "and was restarted with a keep-going signal."
        )
    return out


def idlers(tables: Tables, run: RunInfo) -> list[str]:
    """Seats whose longest stretch without work is at least ``IDLE_SHARE`` of the run."""
    out = []
    idle = _idle(tables, run) if run.run_seconds > 0 else pd.DataFrame(columns=["gap"])
    limit = IDLE_SHARE * run.run_seconds
    for row in idle[idle["gap"] >= limit].itertuples(index=False):
        out.append(
            f"{row.arm}/{row.agent} idled {num(row.gap)} s "
            f"({pct(row.gap / run.run_seconds)} of the run; minute "
            f"{row.from_s / 60:.1f} to {row.start / 60:.1f}): no submission, post or "
            "pending verdict."
        )
    return out


def _stretches(arm: Any, agent: Any, start: Any, end: Any) -> pd.DataFrame:
    return pd.DataFrame({"arm": arm, "agent": agent, "start": start, "end": end})


def _idle(tables: Tables, run: RunInfo) -> pd.DataFrame:
    """Each agent's longest stretch with no submission, post or verdict pending on its behalf."""
    end = (min(run.end_at, run.deadline) if run.deadline else run.end_at) - run.started_at
    subs, posts = tables.submissions, tables.messages
    started = tables.lifecycle[tables.lifecycle["event"] == "started"]
    seats = pd.DataFrame([(s.arm, s.agent) for s in run.seats], columns=["arm", "agent"])
    first = started.groupby(["arm", "agent"], as_index=False)["t_s"].min()
    seats = seats.merge(first, on=["arm", "agent"], how="left").fillna({"t_s": 0.0})
    df = pd.concat(
        [
            # Waiting for a verdict is work: a submission covers the time until its verdict.
            _stretches(
                subs["arm"], subs["agent"], subs["t_s"], subs[["t_s", "t_verdict_s"]].max(axis=1)
            ),
            _stretches(posts["arm"], posts["author"], posts["t_s"], posts["t_s"]),
            # Sentinels: the agent's start opens its first stretch, the run's end closes the last.
            _stretches(seats["arm"], seats["agent"], seats["t_s"], seats["t_s"]),
            _stretches(seats["arm"], seats["agent"], end, end),
        ],
        ignore_index=True,
    )
    df = df[df.set_index(["arm", "agent"]).index.isin(seats.set_index(["arm", "agent"]).index)]
    df = df.sort_values(["arm", "agent", "start"], kind="stable")
    keys = [df["arm"], df["agent"]]
    df["from_s"] = df.groupby(keys)["end"].cummax().groupby(keys).shift()
    df["gap"] = df["start"] - df["from_s"]
    df = df.dropna(subset=["gap"])
    longest = df.groupby(["arm", "agent"])["gap"].idxmax()
    return df.loc[longest, ["arm", "agent", "gap", "from_s", "start"]].reset_index(drop=True)
