"""``python -m analysis.report DIR``: tables, figures and ``report.md`` from a run or a sweep.

Everything is rebuilt from ``DIR`` alone into ``DIR/analysis/`` (``tables/``, ``figures/``,
``report.md``); building twice gives identical tables and report. A directory that is neither a
run (an ``events.sqlite`` that is a SQLite file) nor a sweep (job folders under
``multirun.yaml``, or run folders at most ``SWEEP_DEPTH`` levels down) is refused at once with one
line on stderr and exit status 2. A run that did not finish gets a report of what exists, marked
INCOMPLETE at the top.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import formulas, stats
from analysis._git import CommitGraph, DeadEnd, dead_ends
from analysis.figures import FigureResult, make_figures
from analysis.model_calls import SeatOutage, is_generation, seat_outages
from analysis.tables import (
    RunInfo,
    Tables,
    build_tables,
    finite_or_none,
    is_run_dir,
    is_sweep_dir,
    phase_busy_s,
    write_table,
    write_tables,
)
from judge.kinds import Metric

__all__ = [
    "DEAD_END_COLUMNS",
    "IDLE_SHARE",
    "MixedJudgeSettings",
    "Report",
    "build_report",
    "judge_settings_problems",
    "main",
    "not_solid",
]

#: An agent with no submission, post or pending verdict for this share of the run idled.
IDLE_SHARE = 0.25
DEAD_END_COLUMNS = [
    "run_id", "seed", "arm", "agent", "agent_kind", "direction", "commits", "verdicts", "moves",
    "base", "base_owner", "t_first_s", "t_last_s", "best_score", "best_x_baseline", "files",
    "functions", "declared"
]  # fmt: skip


@dataclass
class Report:
    """What one build wrote."""

    path: Path
    tables: Tables
    figures: list[FigureResult]
    ledger: pd.DataFrame


# -- small formatting helpers ------------------------------------------------------------------


def _num(value: Any, digits: int = 1) -> str:
    number = finite_or_none(value)
    if number is None:
        return "inf" if isinstance(value, float) and math.isinf(value) else "-"
    return f"{number:,.{digits}f}"


def _seconds(value: Any) -> str:
    number = finite_or_none(value)
    return "-" if number is None else f"{number:,.1f} s"


def _pct(value: Any) -> str:
    number = finite_or_none(value)
    return "-" if number is None else f"{100 * number:.0f}%"


def _short(sha: Any) -> str:
    return str(sha)[:10] if isinstance(sha, str) and sha else "-"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _subset(tables: Tables, run: RunInfo) -> Tables:
    def pick(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["run_id"] == run.run_id] if "run_id" in df else df

    return Tables(
        runs=[run],
        evaluations=pick(tables.evaluations),
        submissions=pick(tables.submissions),
        messages=pick(tables.messages),
        tokens=pick(tables.tokens),
        lifecycle=pick(tables.lifecycle),
        model_calls=pick(tables.model_calls),
        arms=pick(tables.arms),
        relays=pick(tables.relays),
    )


# -- dead ends -------------------------------------------------------------------------------


def ledger(tables: Tables) -> pd.DataFrame:
    """The dead-end ledger of every run and arm, one row per abandoned direction."""
    rows = []
    for run in tables.runs:
        part = _subset(tables, run)
        directions = {(s.arm, s.agent): s.direction for s in run.seats}
        kinds = {(s.arm, s.agent): s.agent_kind for s in run.seats}
        for arm in run.arms:
            repo = run.run_dir / "arms" / arm / "submissions.git"
            if not repo.is_dir():
                continue
            best = part.arms.loc[part.arms["arm"] == arm, "best_commit"]
            ends: list[DeadEnd] = dead_ends(
                repo,
                part.submissions[part.submissions["arm"] == arm],
                part.relays[part.relays["arm"] == arm] if len(part.relays) else part.relays,
                best.iloc[0] if len(best) and isinstance(best.iloc[0], str) else None,
                run.start_commit(arm),
                messages=part.messages[part.messages["arm"] == arm],
                graph=CommitGraph.load(repo),
            )
            for end in ends:
                ch = end.changes
                rows.append(
                    [
                        run.run_id,
                        run.seed,
                        arm,
                        end.agent,
                        kinds.get((arm, end.agent), "unknown"),
                        directions.get((arm, end.agent)) or "",
                        " ".join(_short(c) for c in end.commits),
                        "; ".join(end.verdicts),
                        "; ".join(end.messages),
                        end.base or "",
                        end.base_owner,
                        end.t_first_s,
                        end.t_last_s,
                        end.best_score,
                        end.best_x_baseline,
                        "; ".join(ch.files) if ch else "",
                        "; ".join(f"{f}: {', '.join(v)}" for f, v in ch.functions.items())
                        if ch
                        else "",
                        " / ".join(end.declared),
                    ]
                )
    df = pd.DataFrame(rows, columns=DEAD_END_COLUMNS)
    df["seed"] = df["seed"].astype("Int64")
    return df


# -- what is not solid -----------------------------------------------------------------------


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


def _asymmetries(run: RunInfo, tables: Tables) -> list[str]:
    out = []
    arms_cfg = run.config.get("arms") or {}
    if len(run.arms) > 1:
        for key in sorted(
            {k for a in run.arms for k in (arms_cfg.get(a) or {})} - {"name", "seats"}
        ):
            values = {a: (arms_cfg.get(a) or {}).get(key) for a in run.arms}
            if len({repr(v) for v in values.values()}) > 1:
                shown = ", ".join(f"{a}: `{v}`" for a, v in values.items())
                out.append(f"Arms differ in `{key}` ({shown}): not the same conditions.")
        kinds = {a: sorted({s.agent_kind for s in run.seats if s.arm == a}) for a in run.arms}
        if len({tuple(v) for v in kinds.values()}) > 1:
            shown = "; ".join(f"{a}: {', '.join(v)}" for a, v in kinds.items())
            out.append(f"Arms ran different agent kinds ({shown}).")
        started = tables.lifecycle[tables.lifecycle["event"] == "started"]
        firsts = started.groupby("arm")["t_s"].min()
        if len(firsts) > 1 and firsts.max() - firsts.min() > max(30.0, 0.05 * run.run_seconds):
            shown = ", ".join(f"{a} at {_num(t)} s" for a, t in firsts.items())
            out.append(f"Arms started at different times ({shown}): unequal budgets.")
        with_tokens = set(tables.tokens["arm"])
        if with_tokens and with_tokens != set(run.arms):
            missing = ", ".join(a for a in run.arms if a not in with_tokens)
            out.append(f"Token records exist for some arms only (none for {missing}).")
        out += _prompt_asymmetries(run)
        seats = {a: sum(s.arm == a for s in run.seats) for a in run.arms}
        if len(set(seats.values())) > 1:
            shown = ", ".join(f"{a} {n}" for a, n in seats.items())
            out.append(f"(By design, not a flaw: seat counts differ: {shown}.)")
    resumed = tables.lifecycle[tables.lifecycle["event"] == "resumed"]
    if len(resumed):
        shown = ", ".join(
            sorted({f"{a}/{g}" for a, g in zip(resumed["arm"], resumed["agent"], strict=True)})
        )
        out.append(
            f"The runner was restarted mid-run and resumed {shown}: the arms were "
            "interrupted (the seed's solo run lost five minutes this way)."
        )
    return out


def _prompt_asymmetries(run: RunInfo) -> list[str]:
    """Arms whose seats read different instructions beyond what the role puts in.

    The runner records per seat the sha256 of the prompt's template and its version (meta
    ``prompts``); the direction and "you are alone" are the role's and the seat's, by design.
    A role whose template or version differs between arms means the arms were not told the
    same thing.
    """
    prompts = run.meta.get("prompts") or {}
    out = []
    by_role: dict[str, dict[str, set[tuple[str, str]]]] = {}
    for arm, seats in prompts.items():
        for seat in (seats or {}).values():
            key = (str(seat.get("template_sha256", "")), str(seat.get("version", "")))
            by_role.setdefault(str(seat.get("role", "")), {}).setdefault(arm, set()).add(key)
    for role, arms in sorted(by_role.items()):
        variants = {key for keys in arms.values() for key in keys}
        if len(variants) > 1:
            shown = "; ".join(
                f"{arm}: " + ", ".join(f"`{t[:10]}` v{v}" for t, v in sorted(keys))
                for arm, keys in sorted(arms.items())
            )
            out.append(
                f"The {role} prompts differ between arms beyond the role ({shown}): the arms "
                "were not given the same instructions."
            )
    return out


def _endpoint_findings(tables: Tables, run: RunInfo) -> list[str]:
    """Seat time lost to the model endpoint: an arm that lost more had a shorter budget."""
    lost = _lost_shares(tables, run)
    if not lost or not any(s for s, _ in lost.values()):
        return []
    shown = ", ".join(
        f"{arm} {_num(s / 60)} seat-min ({_pct1(share)} of its seat time)"
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
        f"{line}: the arms' effective budgets differed by {_pct1(gap)} of seat time, so the "
        "comparison is between unequal budgets."
    ]


def _wire_findings(tables: Tables) -> list[str]:
    """Arms whose CLIs' records and the vendor's responses disagree on output tokens."""
    out = []
    for r in tables.arms.itertuples(index=False):
        wire = finite_or_none(r.wire_output_tokens)
        if wire is None:
            continue
        records = finite_or_none(r.output_tokens) or 0.0
        if abs(wire - records) > max(100.0, 0.01 * wire):
            out.append(
                f"{r.arm}: the vendor's responses reported {int(wire):,} output tokens (read "
                f"by the model proxy), the CLIs' records {int(records):,} "
                f"({int(records - wire):+,}). Token cost per gain uses the records; a gap means "
                "calls the records do not hold (a seat's token used outside its CLI) or records "
                "cut off when the agents stopped."
            )
    return out


def _quota_findings(tables: Tables, run: RunInfo) -> list[str]:
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


def _noise(tables: Tables) -> tuple[float, float] | None:
    """(sigma, median) of the judge's repeated baseline measurements in the task's metric, if 2
    or more."""
    values = tables.evaluations["baseline_score"].dropna()
    if len(values) < 2:
        return None
    return stats.noise_sigma(values.tolist()), float(values.median())


def not_solid(tables: Tables, run: RunInfo) -> list[str]:
    """The findings of one run that a reader should not lean on, each drawn from its data."""
    out: list[str] = []
    ev, arms = tables.evaluations, tables.arms
    if not run.finished:
        out.append(
            f"**INCOMPLETE**: the run's status is `{run.status}`, not `finished`; every "
            f"number covers only the {_num(run.run_seconds)} s recorded."
        )
    out.append(
        f"One seed (seed {run.seed}): each arm ran once, so part of any gap between arms "
        "is luck; a sweep (`python -m runner -m ... seed=1,2,3`) can tell."
    )
    if run.scripted:
        out.append(
            "The agents are scripted (no model): they replay a move library, so nothing "
            "here measures what a model would do."
        )
    if run.isolation == "local":
        out.append(
            "Isolation was `local`: the agents were NOT isolated from each other or the "
            "judge's files."
        )
    if len(run.arms) == 1:
        out.append(
            f"Only one arm (`{run.arms[0]}`): no control, so no claim that the setting "
            "helped can be made from this run."
        )
    out += _asymmetries(run, tables)
    out += _endpoint_findings(tables, run)
    firewall = str((run.meta.get("proxy") or {}).get("host_firewall") or "")
    if firewall.startswith("off"):
        out.append(
            f"The host firewall for the seats' network was {firewall}: the seats could reach "
            "services of the host listening on all addresses, not only the model proxy."
        )
    out += _wire_findings(tables)
    out += _quota_findings(tables, run)
    wrong_ok = ev[(ev["verdict"] == "WRONG") & (ev["tokens_correct"].fillna(False))]
    if len(wrong_ok):
        shown = ", ".join(
            f"job {j} ({a}/{g} `{_short(c)}`, {r})"
            for j, a, g, c, r in zip(
                wrong_ok["job_id"],
                wrong_ok["arm"],
                wrong_ok["agent"],
                wrong_ok["commit"],
                wrong_ok["reason"],
                strict=True,
            )
        )
        out.append(
            f"{len(wrong_ok)} WRONG verdict(s) with every token correct: suspect the "
            f"judge first (a timing limit, not the code): {shown}."
        )
    for flag, meaning in (
        (
            "near_tie",
            "the first divergence was a near tie in the reference (top-2 margin under "
            "the judge's limit): a tiny numerical difference flips the token",
        ),
        (
            "b1_unresolved",
            "a B=1 regression above the limit that the judge's noise could not "
            "prove (passed unconvicted)",
        ),
    ):
        hit = ev[ev[flag]]
        if len(hit):
            shown = ", ".join(
                f"job {j} ({a}/{g} {v})"
                for j, a, g, v in zip(
                    hit["job_id"], hit["arm"], hit["agent"], hit["verdict"], strict=True
                )
            )
            out.append(f"{len(hit)} evaluation(s) flagged `{flag}`, {meaning}: {shown}.")
    errors = ev[ev["verdict"] == "ERROR"]
    if len(errors):
        out.append(
            f"{len(errors)} ERROR verdict(s): the judge or its infrastructure failed "
            f"(jobs {', '.join(map(str, errors['job_id']))})."
        )
    again = ev[ev["attempts"] > 1]
    if len(again):
        out.append(
            f"{len(again)} evaluation(s) ran more than once (the judge was interrupted): "
            f"jobs {', '.join(map(str, again['job_id']))}."
        )
    pending = int(arms["not_evaluated"].sum())
    if pending:
        out.append(f"{pending} submission(s) were never evaluated (queued when the run ended).")
    if run.deadline is not None:
        late = ev[(ev["finished_at"] > run.deadline) & ~ev["pseudo_agent"]]
        if len(late):
            out.append(
                f"{len(late)} evaluation(s) finished after the deadline (the drain) and "
                "count in the results."
            )
    out += _noise_findings(tables, run)
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
    idle = _idle(tables, run) if run.run_seconds > 0 else pd.DataFrame(columns=["gap"])
    limit = IDLE_SHARE * run.run_seconds
    for row in idle[idle["gap"] >= limit].itertuples(index=False):
        out.append(
            f"{row.arm}/{row.agent} idled {_num(row.gap)} s "
            f"({_pct(row.gap / run.run_seconds)} of the run; minute "
            f"{row.from_s / 60:.1f} to {row.start / 60:.1f}): no submission, post or "
            "pending verdict."
        )
    return out


def _noise_findings(tables: Tables, run: RunInfo) -> list[str]:
    """Is the gap between arms bigger than what judging the same code twice moves?

    The yardstick is the start commit re-judged after the deadline (``judge_noise_x_sd``, in
    x_baseline) when the run did that; otherwise the spread of the baseline measurements every
    evaluation makes, scaled to the arms' speed.
    """
    arms = tables.arms.set_index("arm")
    out = []
    sd = arms["judge_noise_x_sd"].dropna()
    if len(sd):
        sigma = float(sd.iloc[0])
        column = (
            "confirmed_x_baseline"
            if arms["confirmed_x_baseline"].notna().all()
            else ("best_x_baseline")
        )
        best = arms[column].dropna()
        out.append(
            f"Timing noise: the start commit re-judged gives σ = {sigma:.3f}× the "
            "baseline (standard deviation over its re-judgements)."
        )
        show = "{:.3f}×".format
    else:
        noise = _noise(tables)
        if noise is None:
            return ["The judge's noise cannot be measured: fewer than two baseline measurements."]
        sigma_tok, median = noise
        rel = sigma_tok / median if median else math.nan
        values = tables.evaluations["baseline_score"].dropna()
        unit = _unit(run.metric)
        out.append(
            f"Timing noise: the same frozen baseline measured {len(values)} times gave "
            f"{_num(values.min())} to {_num(values.max())}{unit} (σ = {_num(sigma_tok)}, "
            f"{_pct(rel)} of its median {_num(median)})."
        )
        column = "best_score"
        show = ("{:,.1f}" + unit).format
        best = arms[column].dropna()
        sigma = rel * float(best.min()) if len(best) else math.nan
    for a, b in combinations([x for x in run.arms if x in best.index], 2):
        gap = abs(best[a] - best[b])
        if gap < 2 * sigma:
            out.append(
                f"Noise is larger than the gap between {a} and {b}: {column} {show(best[a])} vs "
                f"{show(best[b])} differ by {show(gap)}, under 2σ = {show(2 * sigma)}: call it "
                "a tie."
            )
    out += _winners_curse(arms, run.metric)
    return out


def _unit(metric: Metric) -> str:
    """`` tok/s``: the metric's unit as it follows a number (empty for a unitless one)."""
    return f" {metric.unit}" if metric.unit else ""


def _winners_curse(arms: pd.DataFrame, metric: Metric) -> list[str]:
    """The best of many noisy measurements is biased upward, more for arms that drew more."""
    rejudged = arms[arms["confirm_verdicts"].fillna("") != ""]
    out = []
    for arm, row in rejudged.iterrows():
        verdicts = row["confirm_verdicts"].split(",")
        line = (
            f"{arm}'s best ({_num(row['best_score'])}{_unit(metric)}, "
            f"{_num(row['best_x_baseline'], 2)}×) re-judged {len(verdicts)} time(s): "
            f"{', '.join(verdicts)}"
        )
        if finite_or_none(row["confirmed_score"]) is not None:
            line += (
                f"; median {_num(row['confirmed_score'])}{_unit(metric)} "
                f"({_num(row['confirmed_x_baseline'], 2)}×)"
            )
        if any(v != "PASS" for v in verdicts):
            line += ": the best did not hold up when judged again"
        out.append(line + ".")
    passes = arms["pass"]
    if len(passes) > 1 and passes.max() > passes.min() and len(rejudged) < len(arms):
        shown = ", ".join(f"{a} {int(n)}" for a, n in passes.items())
        out.append(
            f"Each best is the maximum of noisy single measurements, and arms with more "
            f"PASSes draw more often ({shown}): the max is biased upward for them; "
            "re-judge each arm's best before comparing."
        )
    return out


# -- sections --------------------------------------------------------------------------------


def _pct1(value: Any) -> str:
    """A share with one decimal: endpoint losses are often a few tenths of a percent."""
    number = finite_or_none(value)
    return "-" if number is None else f"{100 * number:.1f}%"


def _lost_shares(tables: Tables, run: RunInfo) -> dict[str, tuple[float, float | None]]:
    """Per arm with a proxy record: (seat-seconds lost, their share of the arm's seat time).
    Seat time is the arm's seats × the agents' phase (``run_seconds``)."""
    out: dict[str, tuple[float, float | None]] = {}
    for r in tables.arms.itertuples(index=False):
        lost = finite_or_none(r.model_lost_s)
        if lost is None:
            continue
        seat_s = r.seats * run.run_seconds
        out[r.arm] = (lost, lost / seat_s if seat_s > 0 else None)
    return out


def _call_records(calls: pd.DataFrame) -> list[dict[str, Any]]:
    """The table's rows as the event log holds them (None, not pandas' NA, where empty)."""
    return calls.astype(object).where(calls.notna(), None).to_dict("records")


_ENDPOINT_INTRO = (
    "Every call a seat made to its model went through the run's model proxy "
    "(`tables/model_calls`). A call failed when the vendor answered 408, 409, 425, 429 or 5xx, "
    "could not be reached, or its stream broke off; an outage runs from a seat's first failed "
    "call to its next answered call (`analysis/model_calls.py`). Seat time = seats × the "
    "agents' phase"
)
_ENDPOINT_HEAD = ["arm", "seats", "calls", "failed (by status)", "outages", "seat-min lost",
                  "of seat time"]  # fmt: skip


def _has_endpoint(tables: Tables, run: RunInfo) -> bool:
    return run.proxied or not tables.model_calls.empty


def _endpoint_rows(
    tables: Tables, run: RunInfo
) -> tuple[list[list[Any]], dict[tuple[str, str], SeatOutage]]:
    """One row per arm of one run (``_ENDPOINT_HEAD``), and the seats' outages."""
    outages = seat_outages(_call_records(tables.model_calls))
    lost = _lost_shares(tables, run)
    rows = []
    for r in tables.arms.itertuples(index=False):
        seats = [o for (a, _), o in outages.items() if a == r.arm]
        statuses: dict[str, int] = {}
        for seat in seats:
            for label, n in seat.statuses.items():
                statuses[label] = statuses.get(label, 0) + n
        n_failed = sum(seat.failed for seat in seats)
        by_status = ", ".join(f"{label} ×{n}" for label, n in sorted(statuses.items()))
        lost_s, share = lost.get(r.arm, (None, None))
        rows.append(
            [
                r.arm,
                r.seats,
                sum(seat.calls for seat in seats),
                f"{n_failed} ({by_status})" if n_failed else "0",
                sum(seat.outages for seat in seats),
                _num(lost_s / 60 if lost_s is not None else None),
                _pct1(share),
            ]
        )
    return rows, outages


def _endpoint_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## Model endpoint``: what each arm's calls through the model proxy came to (nothing
    when the run used no proxy and recorded no call)."""
    if not _has_endpoint(tables, run):
        return []
    calls = tables.model_calls
    rows, outages = _endpoint_rows(tables, run)
    out = [
        "## Model endpoint",
        "",
        f"{_ENDPOINT_INTRO} ({_num(run.run_seconds)} s).",
        "",
        *_table(_ENDPOINT_HEAD, rows),
    ]
    hit = [o for o in outages.values() if o.lost_s > 0 or o.open_at_end]
    if hit:
        out += ["", "Seats that lost time:", ""]
        for o in hit:
            shown = ", ".join(f"{label} ×{n}" for label, n in sorted(o.statuses.items()))
            still = "; still failing when its calls ended" if o.open_at_end else ""
            out.append(
                f"- {o.arm}/{o.agent}: {_num(o.lost_s)} s in {o.outages} outage(s) "
                f"({o.failed} failed call(s): {shown}){still}."
            )
    seatless = int(((calls["arm"] == "") | (calls["agent"] == "")).sum())
    if seatless:
        out += ["", f"{seatless} call(s) without a seat token were refused by the proxy."]
    # A seat asking for a route that is not the model's (the key's other powers) or an upgrade.
    refused = calls[
        (calls["status"] == 403) & (calls["agent"] != "") & calls["upstream_status"].isna()
    ]
    if len(refused):
        counts = refused.groupby(["arm", "agent", "method", "path"]).size()
        shown = "; ".join(f"{a}/{g} {m} {p} ×{n}" for (a, g, m, p), n in counts.items())
        out += [
            "",
            f"{len(refused)} call(s) by seats were refused as not a model route of the API "
            f"(never forwarded): {shown}.",
        ]
    proxy = run.meta.get("proxy") or {}
    firewall = str(proxy.get("host_firewall") or "")
    if firewall.startswith("off"):
        out += [
            "",
            f"Host firewall for the seats' network: {firewall}. Services of the host listening on "
            "all addresses were reachable from the seats at the network's gateway.",
        ]
    errors = proxy.get("record_errors") or []
    seen = proxy.get("calls")
    if errors or (isinstance(seen, int) and seen > len(calls)):
        first = f", the first `{errors[0]}`" if errors else ""
        out += [
            "",
            f"The proxy saw {seen if seen is not None else 'more'} call(s) and the log holds "
            f"{len(calls)} ({len(errors)} record error(s){first}): the counts above are a "
            "lower bound.",
        ]
    return [*out, ""]


def _endpoint_sweep(tables: Tables) -> list[str]:
    """The sweep's ``## Model endpoint``: one row per seed and arm (details in each job's
    report and in ``tables/model_calls``)."""
    rows = []
    for run in tables.runs:
        part = _subset(tables, run)
        if _has_endpoint(part, run):
            rows += [[run.seed, *row] for row in _endpoint_rows(part, run)[0]]
    if not rows:
        return []
    return [
        "## Model endpoint",
        "",
        f"{_ENDPOINT_INTRO} (of each job).",
        "",
        *_table(["seed", *_ENDPOINT_HEAD], rows),
        "",
    ]


def _facts(run: RunInfo) -> list[str]:
    judge = run.config.get("judge") or {}
    budget = run.config.get("budget") or {}
    seats = "; ".join(
        f"{arm}: "
        + ", ".join(
            f"{s.agent} ({s.role}" + (f", {s.direction})" if s.direction else ")")
            for s in run.seats
            if s.arm == arm
        )
        for arm in run.arms
    )
    rows = [
        ["run", f"`{run.run_id}`"],
        ["experiment", run.experiment],
        ["task", run.task],
        [
            "metric",
            f"{run.metric.label} ({'higher' if run.metric.higher_is_better else 'lower'} is "
            "better)",
        ],
        ["seed", run.seed],
        ["status", run.status if run.finished else f"**{run.status} (INCOMPLETE)**"],
        [
            "budget",
            f"{_num(run.budget_minutes)} min (drain {budget.get('drain_minutes', '-')} "
            f"min); ran {_num(run.run_seconds)} s",
        ],
        ["started / ended", f"{_clock(run.started_at)} / {_clock(run.ended_at)}"],
        ["agent kind", run.agent_kind],
        ["isolation", run.isolation],
        ["arms", ", ".join(run.arms)],
        ["seats", seats],
        [
            "judge",
            f"queue `{judge.get('queue_policy', '-')}`, near ties "
            f"`{judge.get('near_tie_policy', '-')}`, B=1 unresolved "
            f"`{judge.get('b1_unresolved', '-')}`",
        ],
        ["target", f"{run.target_x_baseline}× the baseline" if run.target_x_baseline else "-"],
    ]
    return _table(["fact", "value"], rows)


_ARMS_HEAD = ["arm", "agent kind", "seats", "subm.", "evals", "PASS", "WRONG", "REJECT", "ERROR",
              "best {unit}", "× baseline"]  # fmt: skip
_ARMS_TAIL = ["best by", "time to best", "relays", "judge busy", "queue wait", "restarts",
              "output tokens"]  # fmt: skip


def _arms_table(arms: pd.DataFrame, sweep: bool, metric: Metric) -> list[str]:
    rejudged = bool((arms["confirm_verdicts"].fillna("") != "").any())
    header = (
        (["seed"] if sweep else [])
        + [h.format(unit=metric.unit or metric.name) for h in _ARMS_HEAD]
        + (["re-judged ×"] if rejudged else [])
        + _ARMS_TAIL
    )
    rows = []
    for r in arms.to_dict("records"):
        best_by = f"{r['best_agent']} `{_short(r['best_commit'])}`" if r["best_agent"] else "-"
        again = f"{_num(r['confirmed_x_baseline'], 2)} ({r['confirm_verdicts'] or '-'})"
        tokens = r["output_tokens"]
        rows.append(
            ([r["seed"]] if sweep else [])
            + [r["arm"], r["agent_kind"], f"{r['seats']} ({r['workers']}w+{r['critics']}c)"]
            + [r[k] for k in ("submissions", "evaluations", "pass", "wrong", "reject", "error")]
            + [_num(r["best_score"]), _num(r["best_x_baseline"], 2)]
            + ([again] if rejudged else [])
            + [
                best_by,
                _seconds(r["time_to_best_s"]),
                "-" if pd.isna(r["relays"]) else r["relays"],
                _pct(r["judge_utilisation"]),
                _seconds(r["mean_queue_wait_s"]),
                r["restarts"],
                "no token records" if pd.isna(tokens) else f"{int(tokens):,}",
            ]
        )
    return _table(header, rows)


def _formulas(tables: Tables, run: RunInfo) -> list[str]:
    out = [
        "### Formula one: the judge is the ceiling",
        "",
        "judge capacity = run time ÷ seconds per evaluation; judge utilisation = "
        "evaluations × seconds per evaluation ÷ run time. Run time is the agents' phase (the "
        "runner's re-judging after the deadline, if any, is left out). Seconds per evaluation "
        "is measured: "
        "the arm's judge time over its evaluations (quick REJECTs included), and a full "
        "evaluation is the median PASS (every stage ran).",
        "",
    ]
    run_s = run.run_seconds
    for r in tables.arms.itertuples(index=False):
        if not r.judge_evaluations:
            out.append(f"- **{r.arm}**: no evaluations, nothing to measure.")
            continue
        per = r.seconds_per_evaluation
        line = (
            f"- **{r.arm}**: judge capacity = {_num(run_s)} s / {_num(per, 2)} s per "
            f"evaluation = {_num(r.judge_capacity)} evaluations; {r.judge_evaluations} "
            f"actual; judge utilisation = {r.judge_evaluations} × {_num(per, 2)} s / "
            f"{_num(run_s)} s = {_pct(r.judge_utilisation)}."
        )
        full = finite_or_none(r.full_evaluation_s)
        if full:
            line += (
                f" A full evaluation took {_num(full)} s: at that pace capacity = "
                f"{_num(run_s)} s / {_num(full)} s = "
                f"{_num(formulas.judge_capacity(run_s, full))}."
            )
        out.append(line)
    ev = tables.evaluations
    ev = ev[~ev["agent"].isin(["confirm", "baseline"])]  # the agents' phase only
    if len(ev) and run_s > 0:
        busy = phase_busy_s(ev, run_s)
        per = busy / len(ev)
        share = formulas.judge_utilisation(len(ev), per, run_s)
        verdict = (
            "saturated: more agents would only have lengthened the queue"
            if share >= 0.9
            else f"idle {_pct(1 - share)} of the run: it could have absorbed more work"
        )
        out.append(
            f"- **the one shared judge**: {len(ev)} evaluations × {_num(per, 2)} s = "
            f"{_num(busy)} s busy of {_num(run_s)} s = {_pct(share)}; capacity "
            f"{_num(formulas.judge_capacity(run_s, per))} evaluations. The judge was "
            f"{verdict}."
        )
    out += [
        "",
        "### Formula two: token cost per gain",
        "",
        "token cost per gain = output tokens ÷ (best − baseline); marginal cost = "
        "(tokens_a − tokens_b) ÷ (best_a − best_b). Baseline: the median of the judge's "
        "baseline measurements in this run.",
        "",
    ]
    arms = tables.arms
    metric = run.metric
    per = metric.unit or "unit"
    if arms["output_tokens"].isna().all():
        out.append(
            "No token records: token cost per gain is not computed (scripted agents and "
            "seats without session records have none; nothing is invented)."
        )
        return out
    for r in arms.itertuples(index=False):
        if pd.isna(r.output_tokens):
            out.append(f"- **{r.arm}**: no token records.")
        elif finite_or_none(r.best_score) is None:
            out.append(f"- **{r.arm}**: {r.output_tokens:,} output tokens, no PASS: no gain.")
        else:
            # The gain is best − baseline, or baseline − best for a lower-is-better metric.
            ends = (_num(r.best_score, 2), _num(r.baseline_score, 2))
            first, second = ends if metric.higher_is_better else ends[::-1]
            out.append(
                f"- **{r.arm}**: {r.output_tokens:,} ÷ ({first} − {second}) = "
                f"{_num(r.token_cost_per_gain, 0)} output tokens per {per}."
            )
    priced = arms.dropna(subset=["output_tokens", "best_score"])
    for a, b in combinations(priced.itertuples(index=False), 2):
        if metric.better(b.best_score, a.best_score):
            a, b = b, a
        cost = formulas.marginal_token_cost(
            a.output_tokens,
            metric.gain(a.best_score, 0.0),
            b.output_tokens,
            metric.gain(b.best_score, 0.0),
        )
        first, second = (a, b) if metric.higher_is_better else (b, a)
        out.append(
            f"- **marginal, {a.arm} over {b.arm}**: ({a.output_tokens:,} − "
            f"{b.output_tokens:,}) ÷ ({_num(first.best_score, 2)} − "
            f"{_num(second.best_score, 2)}) = {_num(cost, 0)} output tokens per extra {per}."
        )
    wire = arms.dropna(subset=["wire_output_tokens"])
    if len(wire):
        shown = ", ".join(f"{r.arm} {int(r.wire_output_tokens):,}" for r in wire.itertuples())
        calls = tables.model_calls
        answered = calls[
            (calls["status"] == 200)
            & ~calls["failed"].astype(bool)
            & calls["path"].map(is_generation).astype(bool)
        ]
        silent = int(answered["output"].isna().sum())
        lower = (
            f"; {silent} answered model call(s) reported no usage (a stream without its usage "
            "chunk, or a body too large to read), so these totals are a lower bound"
            if silent
            else ""
        )
        out.append(
            f"- on the wire (output tokens the vendor's responses reported, read by the model "
            f"proxy; the check on the records above): {shown}{lower}."
        )
    return out


def _figures(figures: list[FigureResult], base: Path) -> list[str]:
    out, skipped = [], []
    for fig in figures:
        if fig.path is None:
            skipped.append(f"- *{fig.title}*: not drawn: {fig.note}.")
        else:
            rel = fig.path.relative_to(base).as_posix()
            note = f" ({fig.note})" if fig.note else ""
            out += [f"### {fig.title}", "", f"![{fig.title}]({rel}){note}", ""]
    return out + (["Not drawn:", "", *skipped, ""] if skipped else [])


def _relays(tables: Tables, run: RunInfo) -> list[str]:
    edges = tables.relays
    unit = _unit(run.metric)
    if not len(edges):
        return [
            "No relays: no PASS built on another agent's PASS (read from each arm's "
            "submissions.git)."
        ]
    out = [
        "A relay is a PASS whose nearest PASS ancestor is another agent's (its first "
        "pickup of that work), read from the arm's submissions.git.",
        "",
    ]
    rows = [
        [
            r.arm,
            f"{r.from_agent} `{_short(r.from_commit)}` ({_num(r.from_score)}{unit}, "
            f"min {r.from_t_end_s / 60:.1f})",
            "→",
            f"{r.to_agent} `{_short(r.to_commit)}` ({_num(r.to_score)}{unit}, min "
            f"{r.to_t_end_s / 60:.1f})",
            _num(r.to_score - r.from_score),
        ]
        for r in edges.itertuples(index=False)
    ]
    out += _table(["arm", "built on (PASS)", "", "later PASS", f"Δ{unit}"], rows)
    counts = edges.groupby("arm")["to_job"].nunique()
    out += [
        "",
        "Relays per arm: " + ", ".join(f"{a} {int(counts.get(a, 0))}" for a in run.arms) + ".",
    ]
    return out


def _ledger(led: pd.DataFrame) -> list[str]:
    if led.empty:
        return ["No dead ends: every submitted commit is in the ancestry of a kept PASS."]
    out = [
        "A dead end is a line of one agent's submitted commits of which none reached a PASS "
        "the arm's best or another agent built on; pinned to its commits and to the files "
        "and functions changed from the commit it started on.",
        "",
    ]
    rows = []
    for r in led.itertuples(index=False):
        changed = r.functions or r.files or "(not diffed)"
        rows.append(
            [
                r.arm,
                f"{r.agent}" + (f" ({r.direction})" if r.direction else ""),
                r.commits,
                r.verdicts,
                r.moves,
                f"{r.base_owner} `{_short(r.base)}`",
                changed,
                f"{r.t_first_s / 60:.1f}–{r.t_last_s / 60:.1f}",
                r.declared[:160] or "-",
            ]
        )
    out += _table(
        [
            "arm",
            "agent",
            "commits",
            "verdicts",
            "moves",
            "started on",
            "changed (file: functions)",
            "minutes",
            "declared on the board",
        ],
        rows,
    )
    return out


def _run_report(tables: Tables, figures: list[FigureResult], led: pd.DataFrame, out: Path) -> str:
    run = tables.runs[0]
    lines = [f"# Report: {run.experiment}, {run.task}, seed {run.seed}", ""]
    if not run.finished:
        lines += [
            f"> **INCOMPLETE**: this run did not finish (status `{run.status}`). The "
            "report covers what was recorded up to its last event.",
            "",
        ]
    if run.scripted:
        lines += [
            f"> Agents: {run.agent_kind}. Every number below is from scripted programs, "
            "not from a model.",
            "",
        ]
    lines += [
        "## Run",
        "",
        *_facts(run),
        "",
        "## Arms",
        "",
        *_arms_table(tables.arms, False, run.metric),
        "",
        *_endpoint_section(tables, run),
        "## The formulas, measured",
        "",
        *_formulas(tables, run),
        "",
        "## Figures",
        "",
        *_figures(figures, out.parent),
        "## Relay graph",
        "",
        *_relays(tables, run),
        "",
        "## Dead-end ledger",
        "",
        *_ledger(led),
        "",
        "## What is not solid",
        "",
        *[f"- {line}" for line in not_solid(tables, run)],
        "",
        *_tables_list(),
    ]
    return "\n".join(lines) + "\n"


def _tables_list() -> list[str]:
    return [
        "## Tables",
        "",
        "In `tables/` as Parquet and CSV, one row per thing (columns: `analysis/tables.py`):"
        " `evaluations`, `submissions`, `messages`, `tokens`, `lifecycle`, `model_calls`,"
        " `arms`, `relays` and `dead_ends`.",
    ]


# -- sweeps ----------------------------------------------------------------------------------


def _across_seeds(tables: Tables, sweep_dir: Path) -> list[str]:
    """The sweep engineer's aggregate when available, else per-arm spreads and a comparison."""
    try:
        from analysis import sweep

        if hasattr(sweep, "aggregate_with_stats"):
            frame, by_arm = sweep.aggregate_with_stats(sweep_dir)
            text = [sweep.format_jobs(frame), sweep.format_stats(by_arm)]
        else:
            text = [sweep.format_jobs(sweep.aggregate(sweep_dir))]
        return [
            "From `analysis.sweep` (also in `aggregate.csv`, `aggregate_stats.csv`):",
            "",
            "```",
            *text,
            "```",
        ]
    except Exception as exc:  # the aggregate is another module's: fall back, and say why
        lines = [f"(`analysis.sweep` unavailable: {type(exc).__name__}: {exc}.)", ""]
    metric = tables.runs[0].metric
    best = tables.arms.dropna(subset=["best_score"])
    arms = list(dict.fromkeys(tables.arms["arm"]))
    noise = _noise(tables)
    for arm in arms:
        values = best.loc[best["arm"] == arm, "best_score"].tolist()
        if values:
            s = stats.arm_spread(values)
            lines.append(
                f"- **{arm}**: best {metric.unit or metric.name} over {s.n} seed(s): median "
                f"{_num(s.median)}"
                f" (IQR {_num(s.q25)}–{_num(s.q75)}, range {_num(s.minimum)}–"
                f"{_num(s.maximum)})."
            )
    for a, b in combinations(arms, 2):
        paired = best[best["arm"] == a].merge(best[best["arm"] == b], on="run_id")
        if paired.empty:
            continue
        # compare_arms calls the larger better: a lower-is-better metric is compared by its
        # x_baseline (times better than the baseline), the noise scaled alike.
        column = "best_score" if metric.higher_is_better else "best_x_baseline"
        scale = float(paired[f"{column}_y"].median())
        sigma = noise[0] / noise[1] * scale if noise else None
        result = stats.compare_arms(
            paired[f"{column}_x"].tolist(),
            paired[f"{column}_y"].tolist(),
            arm_a=a,
            arm_b=b,
            noise_sigma=sigma,
        )
        lines.append(f"- **{a} vs {b}**: {result.outcome}. {result.reason}")
    return lines


def _sweep_report(
    tables: Tables, figures: list[FigureResult], led: pd.DataFrame, out: Path, sweep_dir: Path
) -> str:
    first = tables.runs[0]
    unfinished = [r for r in tables.runs if not r.finished]
    lines = [f"# Sweep report: {first.experiment}, {first.task}, {len(tables.runs)} job(s)", ""]
    if unfinished or tables.missing:
        lines += [
            f"> **INCOMPLETE**: {len(unfinished)} job(s) did not finish and "
            f"{len(tables.missing)} left no event log.",
            "",
        ]
    jobs = [
        [
            r.run_dir.relative_to(sweep_dir).as_posix(),
            r.seed,
            r.status,
            r.agent_kind,
            _num(r.budget_minutes),
            ", ".join(r.arms),
        ]
        for r in tables.runs
    ]
    jobs += [
        [p.relative_to(sweep_dir).as_posix(), "-", "no event log", "-", "-", "-"]
        for p in tables.missing
    ]
    lines += [
        "## Jobs",
        "",
        *_table(["job", "seed", "status", "agent kind", "budget (min)", "arms"], jobs),
        "",
        "## Arms, per seed",
        "",
        *_arms_table(tables.arms, True, first.metric),
        "",
        *_endpoint_sweep(tables),
        "## Across seeds",
        "",
        *_across_seeds(tables, sweep_dir),
        "",
        "## Figures",
        "",
        *_figures(figures, out.parent),
        "## Relays and dead ends",
        "",
    ]
    counts = [
        [
            r.seed,
            arm,
            int((tables.relays["run_id"] == r.run_id).mul(tables.relays["arm"] == arm).sum())
            if len(tables.relays)
            else 0,
            int(((led["run_id"] == r.run_id) & (led["arm"] == arm)).sum()),
        ]
        for r in tables.runs
        for arm in r.arms
    ]
    lines += [
        *_table(["seed", "arm", "relay edges", "dead ends"], counts),
        "",
        "Details: `tables/relays.csv`, `tables/dead_ends.csv`.",
        "",
        "## What is not solid",
        "",
    ]
    for path in tables.missing:
        lines.append(
            f"- Job `{path.relative_to(sweep_dir).as_posix()}` left no event log: it "
            "failed before its run started."
        )
    seeds_of: dict[str, list[str]] = {}
    for run in tables.runs:
        for line in not_solid(_subset(tables, run), run):
            if not line.startswith("One seed"):  # a sweep is the answer to that one
                seeds_of.setdefault(line, []).append(str(run.seed))
    # A finding every seed shares is said once.
    lines += [f"- seed {', '.join(seeds)}: {line}" for line, seeds in seeds_of.items()]
    lines += ["", *_tables_list()]
    return "\n".join(lines) + "\n"


# -- entry points ----------------------------------------------------------------------------


class MixedJudgeSettings(ValueError):
    """A run's evaluations were judged under more than one judge setting, or under settings
    other than the run's own: its numbers do not compare, so no report is made."""


def judge_settings_problems(tables: Tables) -> list[str]:
    """One line per run whose evaluations name more than one judge settings hash, or one other
    than the run's own (``judge_settings_hash`` in its meta). Evaluations from a log made
    before the hash was recorded (empty) say nothing either way."""
    problems = []
    for run in tables.runs:
        ev = tables.evaluations
        ev = ev[(ev["run_id"] == run.run_id) & (ev["settings_hash"] != "")]
        counts = ev["settings_hash"].value_counts()
        own = run.meta.get("judge_settings_hash")
        foreign = [h for h in counts.index if own and h != own]
        if len(counts) > 1 or foreign:
            shown = ", ".join(f"{h}: {n}" for h, n in counts.items())
            problems.append(
                f"run {run.run_id}: its evaluations were judged under"
                f" {len(counts)} judge setting(s) ({shown}; the run's own: {own or 'unknown'});"
                " not mixing them in one report"
            )
    return problems


def build_report(path: Path, out_dir: Path | None = None) -> Report:
    """Rebuild tables, figures and ``report.md`` for a run or sweep directory.

    Args:
        path: A run directory or a sweep (Hydra multirun) directory.
        out_dir: Where to write (default ``path/analysis``).

    Returns:
        What was written.

    Raises:
        FileNotFoundError: ``path`` is neither a run nor a sweep.
        MixedJudgeSettings: a run's evaluations were judged under different judge settings.
    """
    path = Path(path)
    out = Path(out_dir) if out_dir else path / "analysis"
    tables = build_tables(path)
    problems = judge_settings_problems(tables)
    if problems:
        raise MixedJudgeSettings("; ".join(problems))
    led = ledger(tables)
    write_tables(tables, out / "tables")
    write_table(led, out / "tables", "dead_ends")
    figures = make_figures(tables, out / "figures")
    report = out / "report.md"
    if is_run_dir(path):
        text = _run_report(tables, figures, led, report)
    else:
        text = _sweep_report(tables, figures, led, report, path)
    report.write_text(text)
    return Report(path=report, tables=tables, figures=figures, ledger=led)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m analysis.report DIR [--out OUT]``; exit 0, or 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m analysis.report",
        description="Tables, figures and report.md from a run or sweep directory.",
    )
    parser.add_argument("dir", type=Path, help="a run directory or a sweep (multirun) directory")
    parser.add_argument("--out", type=Path, help="write here instead of DIR/analysis")
    args = parser.parse_args(argv)
    if not (is_run_dir(args.dir) or is_sweep_dir(args.dir)):
        print(
            f"analysis.report: {args.dir} is neither a run directory (no SQLite events.sqlite) "
            "nor a sweep directory (no job folders under a multirun.yaml)",
            file=sys.stderr,
        )
        return 2
    try:
        report = build_report(args.dir, args.out)
    except (sqlite3.DatabaseError, FileNotFoundError, PermissionError) as exc:
        print(f"analysis.report: {args.dir}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except MixedJudgeSettings as exc:
        print(f"analysis.report: {args.dir}: {exc}", file=sys.stderr)
        return 2
    print(report.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
