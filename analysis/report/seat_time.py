"""The seats' time: how each arm's seat time was spent (:func:`seat_time_section`: working,
waiting for the judge, stalled, restarting), and the findings on it: what each seat lost to its
model endpoint or its disk quota, exits before the deadline, and an arm that lost more of its
seat time to stalls than another (see :mod:`analysis.report.findings`).

Seat time is each seat's time from its first start to the run's end (or its deadline, or the
seat's ``budget_spent``). Of it: **waiting for the judge** is from each of its submissions to
the verdict; **stalled** is each ``stalled`` event's quiet stretch (``runner.supervisor``: no
model call, tool call, submission or post for ``agent.stall_minutes``), from the seat's last
activity to the nudge, or, with ``agent.on_stall=record``, on to the seat's next submission,
post or lifecycle event; **restarting** is from an ``exited`` event to the seat's next start;
**working** is the rest. (Before live stall detection the report listed idle stretches from
posts and submissions alone; the ``stalled`` events replace them.)"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from analysis.report.markdown import num, pct, pct1, table
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


#: The parts of seat time, in the table's order (``working`` is what is left).
PARTS = ("working", "waiting for the judge", "stalled", "restarting")


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _length(spans: list[tuple[float, float]], minus: list[tuple[float, float]] = ()) -> float:
    """Total length of ``spans`` (merged), less what overlaps ``minus`` (merged)."""
    total = 0.0
    cut = _union(list(minus))
    for start, end in _union(spans):
        total += end - start
        for a, b in cut:
            total -= max(0.0, min(end, b) - max(start, a))
    return total


def _clip(spans: list[tuple[float, float]], begin: float, stop: float) -> list[tuple[float, float]]:
    return [(max(a, begin), min(b, stop)) for a, b in spans if min(b, stop) > max(a, begin)]


def _detail(value: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def seat_time(tables: Tables, run: RunInfo) -> pd.DataFrame:
    """Each seat's time by part (seconds): arm, agent, seat_s and one column per :data:`PARTS`."""
    end = (min(run.end_at, run.deadline) if run.deadline else run.end_at) - run.started_at
    life = tables.lifecycle.sort_values("t_s", kind="stable")
    subs = tables.submissions
    posts = tables.messages
    rows = []
    for seat in run.seats:
        mine = life[(life["arm"] == seat.arm) & (life["agent"] == seat.agent)]
        starts = mine[mine["event"].isin(["started", "restarted", "resumed"])]
        if starts.empty:
            continue
        begin = float(starts["t_s"].min())
        spent = mine[mine["event"] == "budget_spent"]
        stop = min(end, float(spent["t_s"].min())) if not spent.empty else end
        if stop <= begin:
            continue
        clip = [(begin, stop)]
        restarting = []
        for row in mine[mine["event"] == "exited"].itertuples(index=False):
            after = starts[starts["t_s"] > row.t_s]["t_s"]
            restarting.append((float(row.t_s), float(after.min()) if not after.empty else stop))
        own = subs[(subs["arm"] == seat.arm) & (subs["agent"] == seat.agent)]
        acts = sorted(
            [float(t) for t in own["t_s"]]
            + [float(t) for t in posts[(posts["arm"] == seat.arm)
                                       & (posts["author"] == seat.agent)]["t_s"]]
            + [float(t) for t in mine[mine["event"] != "stalled"]["t_s"]]
        )  # fmt: skip
        stalled = []
        for row in mine[mine["event"] == "stalled"].itertuples(index=False):
            detail = _detail(row.detail)
            idle = float(detail.get("idle_s") or 0.0)
            until = float(row.t_s)
            if detail.get("action") == "record":  # not nudged: quiet until it did something
                later = [t for t in acts if t > until]
                until = later[0] if later else stop
            stalled.append((float(row.t_s) - idle, until))
        waiting = [
            (float(a), float(b) if pd.notna(b) else stop)
            for a, b in zip(own["t_s"], own["t_verdict_s"], strict=True)
        ]
        restarting = _clip(restarting, begin, stop)
        stalled = _clip(stalled, begin, stop)
        waiting = _clip(waiting, begin, stop)
        parts = {
            "restarting": _length(restarting),
            "stalled": _length(stalled, restarting),
            "waiting for the judge": _length(waiting, restarting + stalled),
        }
        parts["working"] = max(0.0, _length(clip) - sum(parts.values()))
        rows.append({"arm": seat.arm, "agent": seat.agent, "seat_s": stop - begin, **parts})
    return pd.DataFrame(rows, columns=["arm", "agent", "seat_s", *PARTS])


def seat_time_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## Seat time``: per arm, its seat-minutes and the share of each part."""
    df = seat_time(tables, run)
    if df.empty:
        return []
    arms = df.groupby("arm", sort=False)[["seat_s", *PARTS]].sum()
    rows = [
        [arm, int((df["arm"] == arm).sum()), num(r.seat_s / 60)]
        + [f"{num(r[p] / 60)} ({pct(r[p] / r.seat_s if r.seat_s else 0)})" for p in PARTS]
        for arm, r in arms.iterrows()
    ]
    return [
        *table(["arm", "seats", "seat-min", *(f"{p} (min)" for p in PARTS)], rows),
        "",
        "Stalled: a seat alive but with no model call, tool call, submission or post for "
        "`agent.stall_minutes` (the `stalled` events); restarting: from an exit to the next "
        "start; waiting for the judge: from a submission to its verdict.",
    ]


def stalls(tables: Tables, run: RunInfo) -> list[str]:
    """An arm that lost more of its seat time to stalls than another (``stalled`` events)."""
    df = seat_time(tables, run)
    if df.empty or not df["stalled"].any():
        return []
    arms = df.groupby("arm", sort=True)[["seat_s", "stalled"]].sum()
    shares = {
        arm: (r.stalled, r.stalled / r.seat_s if r.seat_s else 0.0) for arm, r in arms.iterrows()
    }
    shown = ", ".join(
        f"{arm} {num(s / 60)} seat-min ({pct1(share)} of its seat time)"
        for arm, (s, share) in shares.items()
    )
    worst = max(shares, key=lambda a: shares[a][1])
    if len(shares) > 1 and len({round(v[1], 3) for v in shares.values()}) == 1:
        return [f"Seats stalled (alive, doing nothing) for {shown}: the same share in every arm."]
    return [
        f"Seats stalled (alive, doing nothing, until nudged or recorded) for {shown}: {worst} "
        "lost the most of its seat time to stalls, so its effective budget was that much "
        "shorter."
    ]
