"""The view's sections as JSON-ready dicts, built from the analysis tables alone.

Every number comes from :func:`analysis.tables.build_tables` (the same readers ``analysis.report``
uses) or from the report's own helpers (``analysis.formulas``, ``analysis.report.measured``,
``runrecord``); nothing here reads the event log with SQL of its own except
:func:`evaluation_detail`, which fetches the one evaluation's ``stages`` and ``metrics`` (columns
no table carries) by its key when a row is opened.

Sections (one JSON endpoint each, ``/api/<name>``): ``run``, ``race``, ``judge``, ``board``,
``submissions``, ``lineage``, ``cost``. Missing values are ``null`` (never NaN: JSON has none).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import formulas
from analysis._git import _git, dead_ends
from analysis.report.measured import formulas_section
from analysis.report.measures import call_records, subset
from analysis.tables import RunInfo, Tables, _read_only, phase_busy_s
from analysis.view._values import plain, uncovered_s
from judge import Metric
from runrecord import (
    PSEUDO_AGENTS,
    REJUDGING_AGENTS,
    CommitGraph,
    seat_outages,
    submission_parents,
)
from runrecord.row import VIEW_COST, VIEW_JUDGE, VIEW_RACE
from runrecord.row import columns as row_columns

__all__ = [
    "SECTIONS",
    "board_rows",
    "board_search",
    "build_sections",
    "change_rows",
    "evaluation_detail",
    "plain",
    "records",
    "submission_rows",
]

SECTIONS = ("run", "race", "judge", "board", "submissions", "lineage", "paths", "seats", "cost")

# The figures' colours (analysis.figures.draw), repeated here so the view does not import
# matplotlib: arms stay clear of the verdict colours.
VERDICT_COLOURS = {
    "PASS": "#2ca02c",
    "WRONG": "#d62728",
    "REJECT": "#ff7f0e",
    "ERROR": "#7f7f7f",
    "not evaluated": "#c7c7c7",
}
ARM_PALETTE = ["#1f77b4", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22", "#393b79"]
SEAT_PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]

#: Rows a list (board, submissions, lineage nodes per arm) carries at most: the latest ones; the
#: page says how many it left out. A million-event run has hundreds of thousands of each.
MAX_ROWS = 5000
#: Above this many evaluations the judge's timeline comes as columns (busy share and verdicts
#: per lane and column), not one bar each.
TIMELINE_BARS = 1500
TIMELINE_COLUMNS = 600
#: Commits a lineage graph of one arm draws at most.
LINEAGE_NODES = 600
#: Points of a cumulative token curve per arm, at most.
CURVE_POINTS = 1000

_SHA = re.compile(r"[0-9a-f]{40}")
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
#: The most characters of a diff the detail view carries (a candidate's diff is its author's text).
DIFF_CHARS = 20_000


def records(df: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of ``df`` (only ``columns``) as plain dicts."""
    sub = df[[c for c in columns if c in df.columns]]
    rows = sub.astype(object).where(sub.notna(), None).to_dict("records")
    return [{k: plain(v) for k, v in row.items()} for row in rows]


def _arms(tables: Tables) -> list[str]:
    seen: dict[str, None] = {}
    for run in tables.runs:
        for arm in run.arms:
            seen.setdefault(arm, None)
    return list(seen)


def _time_left(run: RunInfo, now: float) -> float | None:
    if run.finished or run.deadline is None:
        return 0.0 if run.finished else None
    return max(0.0, run.deadline - now)


def _run(tables: Tables, now: float) -> dict[str, Any]:
    arms = _arms(tables)
    seats = sorted({(s.arm, s.agent) for run in tables.runs for s in run.seats})
    return {
        "kind": "sweep" if len(tables.runs) > 1 or tables.missing else "run",
        "now": now,
        "metric": tables.runs[0].metric.to_dict(),
        "arms": arms,
        "arm_colours": {a: ARM_PALETTE[i % len(ARM_PALETTE)] for i, a in enumerate(arms)},
        "verdict_colours": VERDICT_COLOURS,
        "seat_colours": {
            f"{arm}/{agent}": SEAT_PALETTE[i % len(SEAT_PALETTE)]
            for i, (arm, agent) in enumerate(seats)
        },
        "missing_jobs": [str(p) for p in tables.missing],
        "runs": [
            {
                "run_id": run.run_id,
                "seed": run.seed,
                "experiment": run.experiment,
                "task": run.task,
                "status": run.status,
                "agent_kind": run.agent_kind,
                "isolation": run.isolation,
                "started_at": run.started_at,
                "deadline": run.deadline,
                "ended_at": run.ended_at,
                "budget_minutes": run.budget_minutes,
                "run_seconds": run.run_seconds,
                "time_left_s": _time_left(run, now),
                "target_x_baseline": run.target_x_baseline,
                "seats": [
                    {"arm": s.arm, "agent": s.agent, "role": s.role, "agent_kind": s.agent_kind}
                    for s in run.seats
                ],
            }
            for run in tables.runs
        ],
    }


def best_steps(ev: pd.DataFrame, metric: Metric) -> list[dict[str, Any]]:
    """The agents' PASSes of one arm of one run where the best so far changed, in verdict order
    (the best as ``runrecord.best_pass`` picks it: by score, the first one on a tie)."""
    passes = ev[(ev["verdict"] == "PASS") & ~ev["pseudo_agent"] & ev["score"].notna()]
    passes = passes.sort_values(["t_end_s", "job_id"], kind="stable")
    scores = passes["score"].to_numpy(float)
    if not len(scores):
        return []
    # A running best by the metric's own rule (a strict improvement: the first one on a tie).
    running = (
        np.maximum.accumulate(scores) if metric.better(1.0, 0.0) else np.minimum.accumulate(scores)
    )
    steps = np.flatnonzero(np.r_[True, running[1:] != running[:-1]])
    picked = passes.iloc[steps]
    return [
        {
            "t_s": plain(t),
            "score": plain(score),
            "x_baseline": plain(x),
            "job_id": int(job),
            "agent": agent,
            "commit": commit,
        }
        for t, score, x, job, agent, commit in zip(
            picked["t_end_s"].tolist(),
            picked["score"].tolist(),
            picked["x_baseline"].tolist(),
            picked["job_id"].tolist(),
            picked["agent"].tolist(),
            picked["commit"].tolist(),
            strict=True,
        )
    ]


def _race(tables: Tables, now: float) -> dict[str, Any]:
    metric = tables.runs[0].metric
    curves = []
    for run in tables.runs:
        ev = tables.evaluations[tables.evaluations["run_id"] == run.run_id]
        for arm in run.arms:
            curves.append(
                {
                    "run_id": run.run_id,
                    "seed": run.seed,
                    "arm": arm,
                    "end_s": run.run_seconds,
                    "points": best_steps(ev[ev["arm"] == arm], metric),
                }
            )
    arms = records(tables.arms, row_columns(VIEW_RACE))
    medians = {}
    if len(tables.runs) > 1:
        for arm, group in tables.arms.groupby("arm", sort=False):
            values = group["best_x_baseline"].dropna()
            medians[arm] = plain(float(values.median())) if len(values) else None
    run = tables.runs[0]
    return {
        "baseline_x": 1.0,
        "target_x": run.target_x_baseline,
        "budget_s": run.budget_minutes * 60 if run.budget_minutes else None,
        "time_left_s": _time_left(run, now),
        "curves": curves,
        "arms": arms,
        "medians_x": medians,
    }


_EVAL_COLUMNS = [
    "run_id", "arm", "agent", "role", "job_id", "submission_id", "commit", "verdict", "reason",
    "score", "x_baseline", "pseudo_agent", "t_enqueued_s", "t_start_s", "t_end_s", "duration_s",
    "queue_wait_s", "duplicate_of", "near_tie", "b1_unresolved",
]  # fmt: skip


def _shared_judge(tables: Tables, run: RunInfo, now: float) -> dict[str, Any] | None:
    """The one shared judge in the agents' phase, as the report's formula one computes it."""
    ev = tables.evaluations
    ev = ev[(ev["run_id"] == run.run_id) & ~ev["agent"].isin(list(REJUDGING_AGENTS))]
    run_s = run.run_seconds
    if not len(ev) or run_s <= 0:
        return None
    busy = phase_busy_s(ev, run_s)
    per = busy / len(ev)

    def clip(a: pd.Series, b: pd.Series | float) -> list[tuple[float, float]]:
        lo = np.maximum(0.0, a.to_numpy(float))
        hi = np.minimum(run_s, np.broadcast_to(np.asarray(b, dtype=float), lo.shape))
        return list(zip(lo.tolist(), hi.tolist(), strict=True))

    # Idle with work: some submission waited in the queue and the judge ran nothing.
    working = clip(ev["t_start_s"], ev["t_end_s"].to_numpy(float))
    waits = clip(ev["t_enqueued_s"], ev["t_start_s"].to_numpy(float))
    if not run.finished:  # submissions the judge holds now wait until this moment
        sub = tables.submissions
        held = sub[(sub["run_id"] == run.run_id) & (sub["verdict"] == "not evaluated")]
        held = held[held["job_id"].notna()]
        waits += clip(held["t_s"], now - run.started_at)
    idle_with_work = uncovered_s(waits, working)
    return {
        "run_id": run.run_id,
        "evaluations": len(ev),
        "busy_s": busy,
        "run_seconds": run_s,
        "seconds_per_evaluation": per,
        "busy_share": formulas.judge_utilisation(len(ev), per, run_s) if per > 0 else 0.0,
        "capacity": formulas.judge_capacity(run_s, per) if per > 0 else None,
        "idle_with_work_s": idle_with_work,
        "idle_with_work_share": idle_with_work / run_s,
    }


def _formula_lines(tables: Tables, run: RunInfo) -> tuple[list[str], list[str]]:
    """The report's "formulas, measured" text of one run, split into formula one and two."""
    lines = formulas_section(subset(tables, run), run)
    cut = next((i for i, line in enumerate(lines) if line.startswith("### Formula two")), None)
    return (lines, []) if cut is None else (lines[:cut], lines[cut:])


def _judge(tables: Tables, now: float) -> dict[str, Any]:
    sub = tables.submissions
    waiting = sub[sub["verdict"] == "not evaluated"]
    queue = records(
        _latest(waiting), ["run_id", "arm", "agent", "submission_id", "job_id", "commit", "t_s"]
    )
    by_run = {run.run_id: run for run in tables.runs}
    for row in queue:
        run = by_run[row["run_id"]]
        row["waiting_s"] = None if run.finished else max(0.0, now - run.started_at - row["t_s"])
        row["state"] = "never judged" if run.finished else "queued" if row["job_id"] else "sent"
    formula = [
        {"run_id": run.run_id, "lines": _formula_lines(tables, run)[0]} for run in tables.runs
    ]
    capacity = records(tables.arms, row_columns(VIEW_JUDGE))
    shared = [s for run in tables.runs if (s := _shared_judge(tables, run, now)) is not None]
    ev = tables.evaluations
    many = len(ev) > TIMELINE_BARS
    return {
        "evaluations": [] if many else records(ev, _EVAL_COLUMNS),
        "evaluation_count": len(ev),
        "timeline": [timeline_columns(ev[ev["run_id"] == r.run_id], r) for r in tables.runs]
        if many
        else [],
        "queue": queue,
        "queue_count": len(waiting),
        "capacity": capacity,
        "shared": shared,
        "formula": formula,
    }


def timeline_columns(ev: pd.DataFrame, run: RunInfo) -> dict[str, Any]:
    """A large run's judge timeline: per lane (each arm, then the runner's re-judging) and
    column of time, the share of the column the judge spent on that lane and its verdicts."""
    t_max = float(max(ev["t_end_s"].max(), 1.0)) if len(ev) else 1.0
    edges = np.linspace(0.0, t_max, TIMELINE_COLUMNS + 1)
    width = edges[1] - edges[0]
    lanes = []
    for lane in [*run.arms, None]:
        pseudo = ev["pseudo_agent"].to_numpy(bool)
        mine = ev[pseudo] if lane is None else ev[(ev["arm"] == lane).to_numpy() & ~pseudo]
        start = mine["t_start_s"].to_numpy(float)
        end = np.maximum(mine["t_end_s"].to_numpy(float), start)
        order = np.argsort(end, kind="stable")
        start, end = start[order], end[order]
        done = np.concatenate([[0.0], np.cumsum(end - start)])
        # Busy seconds up to each edge: every evaluation that ended before it, plus the part
        # of the ones still running (one at most in a serial judge).
        ended = np.searchsorted(end, edges, side="right")
        busy = done[ended]
        if len(start):
            k = np.minimum(ended, len(start) - 1)
            part = np.clip(edges - start[k], 0.0, end[k] - start[k])
            busy = busy + np.where(ended < len(start), part, 0.0)
        share = np.clip(np.diff(busy) / width, 0.0, 1.0)
        mids = (start + end) / 2
        verdicts = {}
        for verdict in sorted(set(mine["verdict"])):
            pick = mine["verdict"].to_numpy()[order] == verdict
            counts, _ = np.histogram(mids[pick], bins=edges)
            verdicts[verdict] = counts.tolist()
        lanes.append(
            {
                "lane": lane or "runner (re-judging)",
                "arm": lane,
                "busy": [round(float(v), 3) for v in share],
                "verdicts": verdicts,
            }
        )
    return {"run_id": run.run_id, "t_max": t_max, "columns": TIMELINE_COLUMNS, "lanes": lanes}


def _verdict_of(
    evaluations: pd.DataFrame, prefixes: set[str] | None = None
) -> dict[tuple[str, str, str], tuple[int, str]]:
    """(run_id, arm, commit) -> the latest agents' evaluation of it: (job_id, verdict); only
    of commits starting with one of ``prefixes`` (7 hex digits) when given."""
    ev = evaluations
    if prefixes is not None:
        ev = ev[ev["commit"].astype(str).str[:7].isin(list(prefixes)).to_numpy(bool)]
    ev = ev[~ev["pseudo_agent"].to_numpy(bool)].sort_values("job_id")
    ev = ev.drop_duplicates(["run_id", "arm", "commit"], keep="last")
    # Plain lists first: iterating Arrow-backed string columns value by value is slow.
    keys = zip(ev["run_id"].tolist(), ev["arm"].tolist(), ev["commit"].tolist(), strict=True)
    values = zip(ev["job_id"].astype(int).tolist(), ev["verdict"].tolist(), strict=True)
    return dict(zip(keys, values, strict=True))


def _latest(df: pd.DataFrame) -> pd.DataFrame:
    """The last ``MAX_ROWS`` rows (tables are sorted by run and id: the latest come last)."""
    return df.iloc[-MAX_ROWS:] if len(df) > MAX_ROWS else df


def _board(tables: Tables, messages: pd.DataFrame | None = None) -> dict[str, Any]:
    picked = tables.messages if messages is None else messages
    rows = board_rows(_latest(picked), tables.evaluations)
    return {"messages": rows, "total": len(tables.messages), "matches": len(picked)}


def board_rows(messages: pd.DataFrame, evaluations: pd.DataFrame) -> list[dict[str, Any]]:
    """The board's rows of ``messages``, each with the verdict of the commit it refers to and
    of the commits its text names (the latest agents' evaluation of each, in ``evaluations``)."""
    rows = records(
        messages,
        ["run_id", "arm", "message_id", "author", "role", "kind", "t_s", "text", "ref_commit"],
    )
    # Only the commits these messages could name: a few messages need not scan every verdict.
    wanted = {str(r["ref_commit"])[:7] for r in rows if r["ref_commit"]}
    wanted |= {w[:7] for r in rows for w in _HEX.findall(r["text"] or "")}
    verdicts = _verdict_of(evaluations, wanted if len(rows) < MAX_ROWS else None)
    # Commits a message names in its text (7+ hex digits, as agents abbreviate them).
    prefixes: dict[tuple[str, str, str], str] = {}
    for run_id, arm, commit in verdicts:
        prefixes.setdefault((run_id, arm, commit[:7]), commit)
    for row in rows:
        hit = verdicts.get((row["run_id"], row["arm"], row["ref_commit"] or ""))
        row["ref_job"], row["ref_verdict"] = (int(hit[0]), hit[1]) if hit else (None, None)
        mentions = []
        for word in dict.fromkeys(_HEX.findall(row["text"] or "")):
            commit = prefixes.get((row["run_id"], row["arm"], word[:7]))
            if commit and commit.startswith(word) and commit != row["ref_commit"]:
                job, verdict = verdicts[(row["run_id"], row["arm"], commit)]
                mentions.append({"commit": commit, "job": int(job), "verdict": verdict})
        row["mentions"] = mentions
    return rows


def board_search(tables: Tables, query: str, arm: str = "", run_id: str = "") -> dict[str, Any]:
    """The board's messages whose author, role, kind, text or commit holds ``query`` (any case,
    as plain text), of one arm and run if given: the latest ``MAX_ROWS`` matches, over every
    message (the page holds only the latest when a run has more)."""
    msgs = tables.messages
    keep = np.ones(len(msgs), dtype=bool)
    if arm:
        keep &= (msgs["arm"] == arm).to_numpy()
    if run_id:
        keep &= (msgs["run_id"] == run_id).to_numpy()
    if query:
        needle = query.lower()
        found = np.zeros(len(msgs), dtype=bool)
        for col in ("author", "role", "kind", "text", "ref_commit"):
            text = msgs[col].fillna("").astype(str).str.lower()
            found |= text.str.contains(needle, regex=False).to_numpy()
        keep &= found
    return _board(tables, msgs[keep])


def _submissions(tables: Tables) -> dict[str, Any]:
    rows = submission_rows(_latest(tables.submissions), tables.evaluations)
    return {"rows": rows, "total": len(tables.submissions)}


def submission_rows(submissions: pd.DataFrame, evaluations: pd.DataFrame) -> list[dict[str, Any]]:
    """The table's rows of ``submissions``, each with its evaluation's durations and detail."""
    sub = submissions
    ev = evaluations
    if len(sub) < MAX_ROWS:  # a few new rows: only their evaluations
        ev = ev[ev["job_id"].isin(sub["job_id"].dropna().astype(int).tolist()).to_numpy(bool)]
    judged = ev[["run_id", "job_id", "duration_s", "queue_wait_s", "detail", "duplicate_of"]]
    sub = sub.merge(judged, on=["run_id", "job_id"], how="left", sort=False)
    return records(
        sub,
        [
            "run_id", "arm", "agent", "role", "submission_id", "commit", "message", "t_s",
            "job_id", "verdict", "reason", "score", "x_baseline", "t_verdict_s", "duration_s",
            "queue_wait_s", "detail", "duplicate_of",
        ],
    )  # fmt: skip


def change_rows(rows: dict[str, pd.DataFrame | None], evaluations: pd.DataFrame) -> dict:
    """What the page adds to the sections it holds after a read that found new rows (the
    output of ``analysis.view.live.LiveTables.read``; ``evaluations``: all of them, as read):
    the judge's new evaluations, the submissions added or completed, the board's new messages,
    each row as the sections' own rows are made."""
    ev, sub, msg = rows.get("evaluations"), rows.get("submissions"), rows.get("messages")
    return {
        "evaluations": [] if ev is None else records(ev, _EVAL_COLUMNS),
        "submissions": [] if sub is None else submission_rows(sub, evaluations),
        "messages": [] if msg is None else board_rows(msg, evaluations),
    }


def _lineage(tables: Tables) -> dict[str, Any]:
    """Per run and arm: the submitted commits as nodes, each linked to its nearest submitted
    ancestors (``runrecord.submission_parents``), the relays (``tables.relays``) and the path
    from the arm's best back to the start (the champion's)."""
    graphs = []
    for run in tables.runs:
        for arm in run.arms:
            sub = tables.submissions
            sub = sub[(sub["run_id"] == run.run_id) & (sub["arm"] == arm)]
            sub = sub[~sub["agent"].isin(list(PSEUDO_AGENTS))]
            sub = sub.sort_values("submission_id", kind="stable")
            # A commit's first submission says who and when; its latest says the verdict.
            first = sub.drop_duplicates("commit", keep="first").set_index("commit")
            last = sub.drop_duplicates("commit", keep="last").set_index("commit")
            commits = list(first.index)
            start = run.start_commit(arm)
            repo = run.run_dir / "arms" / arm / "submissions.git"
            graph = CommitGraph.load(repo) if repo.is_dir() else None
            parents = submission_parents(graph, set(commits), start) if graph else {}
            edges = [
                {"from": p, "to": c} for c, ps in sorted(parents.items()) for p in ps if p != start
            ]
            roots = sorted(c for c, ps in parents.items() if start in ps or not ps)
            rel = tables.relays
            rel = rel[(rel["run_id"] == run.run_id) & (rel["arm"] == arm)]
            relays = records(
                rel,
                ["to_job", "to_agent", "to_commit", "from_job", "from_agent", "from_commit"],
            )
            best = tables.arms[(tables.arms["run_id"] == run.run_id) & (tables.arms["arm"] == arm)]
            best_commit = plain(best["best_commit"].iloc[0]) if len(best) else None
            # The report's dead-end ledger (analysis._git.dead_ends), without its git diffs.
            board = tables.messages
            board = board[(board["run_id"] == run.run_id) & (board["arm"] == arm)]
            dead = (
                dead_ends(repo, sub, rel, best_commit, start, board, graph=graph, max_diffs=0)
                if graph
                else []
            )
            path: list[str] = []
            seen: set[str] = set()
            at = best_commit
            while at and at in first.index and at not in seen:
                seen.add(at)
                path.append(at)
                ups = [p for p in parents.get(at, []) if p != start]
                at = ups[0] if ups else None
            total = len(commits)
            if total > LINEAGE_NODES:  # the champion's path, the relays, then the latest
                keep = set(path) | {r["to_commit"] for r in relays}
                keep |= {r["from_commit"] for r in relays}
                for commit in reversed(commits):
                    if len(keep) >= LINEAGE_NODES:
                        break
                    keep.add(commit)
                commits = [c for c in commits if c in keep]
                edges = [e for e in edges if e["from"] in keep and e["to"] in keep]
            judged = sub[sub["commit"].isin(commits) & sub["job_id"].notna()]
            jobs: dict[str, list[int]] = {}
            for c, j in zip(judged["commit"], judged["job_id"], strict=True):
                jobs.setdefault(c, []).append(int(j))
            head, tail = first.loc[commits], last.loc[commits]
            nodes = [
                {
                    "commit": c,
                    "agent": agent,
                    "t_s": plain(t_s),
                    "jobs": jobs.get(c, []),
                    "verdict": verdict,
                    "score": plain(score),
                }
                for c, agent, t_s, verdict, score in zip(
                    commits, head["agent"], head["t_s"], tail["verdict"], tail["score"], strict=True
                )
            ]
            graphs.append(
                {
                    "run_id": run.run_id,
                    "arm": arm,
                    "start": start,
                    "total_nodes": total,
                    "nodes": nodes,
                    "edges": edges,
                    "roots": roots,
                    "relays": relays,
                    "champion": best_commit,
                    "champion_path": path,
                    "dead_ends": [
                        {"agent": d.agent, "commits": d.commits, "verdicts": d.verdicts}
                        for d in dead
                    ],
                }
            )
    return {"graphs": graphs}


def _paths(tables: Tables) -> dict[str, Any]:
    """Per run: the arms' paths side by side (``analysis.paths``, as the report's section):
    the matched steps, each with every arm's improvement that made it, and why they matched."""
    from analysis.paths import LABEL, match_steps
    from analysis.report.paths import run_paths

    runs = []
    for run in tables.runs:
        by_arm = run_paths(tables, run)
        arms = [a for a in run.arms if a in by_arm]
        steps, why = match_steps({a: by_arm[a] for a in arms})
        runs.append(
            {
                "run_id": run.run_id,
                "arms": arms,
                "steps": [
                    {
                        "found_by": step.found_by(arms),
                        "changed": min(step.members.values(), key=lambda m: m.t_end_s).describe(),
                        "members": {
                            arm: {
                                "agent": imp.agent,
                                "job_id": imp.job_id,
                                "commit": imp.commit,
                                "base": imp.base,
                                "t_s": imp.t_end_s,
                                "x": imp.x,
                                "gain_x": imp.gain_x,
                                "message": imp.message,
                                "why": why.get(imp.key, "not matched"),
                            }
                            for arm, imp in step.members.items()
                        },
                        # Later improvements of an arm that made the same change again.
                        "again": [
                            {
                                "arm": imp.arm,
                                "agent": imp.agent,
                                "job_id": imp.job_id,
                                "commit": imp.commit,
                                "t_s": imp.t_end_s,
                                "x": imp.x,
                                "gain_x": imp.gain_x,
                            }
                            for imp in step.again
                        ],
                    }
                    for step in steps
                ],
            }
        )
    return {"label": LABEL, "runs": runs}


def _seats(tables: Tables, now: float) -> dict[str, Any]:
    """How each seat spent its time (``analysis.view.seats``; its page comes per seat)."""
    from analysis.view.seats import seats_overview

    return seats_overview(tables, now)


def _cost(tables: Tables) -> dict[str, Any]:
    tok = tables.tokens
    per_seat = []
    if len(tok):
        sums = tok.groupby(["run_id", "arm", "agent"], sort=True)[
            ["input", "cache_read", "cache_write", "output", "reasoning"]
        ].sum()
        per_seat = records(sums.reset_index(), ["run_id", "arm", "agent", *sums.columns])
    # The runner replaces a seat's rows at each reading: the rows are each seat's latest totals,
    # summed here in the order they were read (no earlier readings are kept to plot).
    over_time = []
    for (run_id, arm), group in tok.sort_values("t_s").groupby(["run_id", "arm"], sort=True):
        t, total = group["t_s"].to_numpy(float), group["output"].cumsum().to_numpy(float)
        if len(t) > CURVE_POINTS:  # evenly thinned, the last point kept
            pick = np.unique(np.linspace(0, len(t) - 1, CURVE_POINTS).round().astype(int))
            t, total = t[pick], total[pick]
        over_time.append(
            {
                "run_id": run_id,
                "arm": arm,
                "points": [[plain(a), plain(b)] for a, b in zip(t, total, strict=True)],
            }
        )
    arms = records(tables.arms, row_columns(VIEW_COST))
    formula = [
        {"run_id": run.run_id, "lines": _formula_lines(tables, run)[1]} for run in tables.runs
    ]
    outages = []
    for run in tables.runs:
        if not run.proxied:  # outages only where the seats went through the proxy
            continue
        calls = tables.model_calls[tables.model_calls["run_id"] == run.run_id]
        for seat in seat_outages(call_records(calls)).values():
            outages.append(
                {
                    "run_id": run.run_id,
                    "arm": seat.arm,
                    "agent": seat.agent,
                    "calls": seat.calls,
                    "failed": seat.failed,
                    "statuses": seat.statuses,
                    "outages": seat.outages,
                    "lost_s": seat.lost_s,
                    "open_at_end": seat.open_at_end,
                }
            )
    return {
        "per_seat": per_seat,
        "over_time": over_time,
        "arms": arms,
        "formula": formula,
        "outages": outages,
    }


def build_sections(tables: Tables, now: float) -> dict[str, dict[str, Any]]:
    """Every section of the page from one build of the tables.

    Args:
        tables: ``analysis.tables.build_tables`` of the run or sweep.
        now: The wall clock (Unix seconds) the time left and queue waits are measured at.

    Returns:
        ``{section name: JSON-ready dict}`` for every name in :data:`SECTIONS`.
    """
    return {
        "run": _run(tables, now),
        "race": _race(tables, now),
        "judge": _judge(tables, now),
        "board": _board(tables),
        "submissions": _submissions(tables),
        "lineage": _lineage(tables),
        "paths": _paths(tables),
        "seats": _seats(tables, now),
        "cost": _cost(tables),
    }


def evaluation_detail(tables: Tables, run_id: str, job_id: int) -> dict[str, Any] | None:
    """One evaluation opened: its stages with durations, the judge's detail and metrics, and the
    commit's diff against its parent (read from the arm's ``submissions.git``, never written).

    Returns:
        None when the run has no such job.
    """
    import json

    run = next((r for r in tables.runs if r.run_id == run_id), None)
    ev = tables.evaluations
    row = ev[(ev["run_id"] == run_id) & (ev["job_id"] == job_id)]
    if run is None or not len(row):
        return None
    r = row.iloc[0]
    with _read_only(run.run_dir / "events.sqlite") as db:
        found = db.execute(
            "SELECT stages, metrics FROM evaluations WHERE job_id = ?", (int(job_id),)
        ).fetchone()
    stages, metrics = ({}, {}) if found is None else (json.loads(found[0]), json.loads(found[1]))
    diff = ""
    commit = str(r["commit"])
    repo = run.run_dir / "arms" / str(r["arm"]) / "submissions.git"
    if _SHA.fullmatch(commit) and repo.is_dir():
        diff = _git(repo, "show", "--no-color", "--no-ext-diff", "--stat", "-p", commit)
    return {
        "run_id": run_id,
        "job_id": int(job_id),
        "arm": r["arm"],
        "agent": r["agent"],
        "commit": commit,
        "verdict": r["verdict"],
        "reason": r["reason"],
        "detail": plain(r["detail"]),
        "stages": [
            {"stage": k, "seconds": plain(v)}
            for k, v in stages.items()
            if isinstance(v, int | float)
        ],
        "metrics": {k: v for k, v in metrics.items() if not isinstance(v, dict | list)},
        "diff": diff[:DIFF_CHARS],
        "diff_truncated": len(diff) > DIFF_CHARS,
    }


def plan_view(path: Path) -> dict[str, Any]:
    """The planner's section for the view (``analysis.plan.cache``: simulated once per state
    of the event logs, kept in ``path/analysis/plan``)."""
    from analysis.plan.cache import plan_section

    return plan_section(Path(path), Path(path) / "analysis" / "plan").view
