"""A seat's page in the view: how each seat spent its time (the ``seats`` section), and one
seat's timeline and transcript (``/api/seat``, loaded per seat and paged).

Sources, best first: the seat's ``arms/<arm>/agents/<seat>/trajectory.json`` (ATIF, written
by ``runner.trajectories``) for the transcript; the ``steps`` table of ``events.sqlite`` (one
row per trajectory step) for the timeline's tool calls and for a transcript without the file;
without either, what ``events.sqlite`` always holds: model calls (the proxy's record),
submissions with their verdicts, board posts and lifecycle events.

Time split per seat, over its alive span (first ``started`` to its last stop, or the run's end):

- **working**: within :data:`IDLE_GAP_S` after any activity (a step, a model call, a
  submission, a post);
- **waiting for a verdict**: a submission of its own not judged yet, and not working;
- **idle**: the rest. An idle stretch is a gap of at least :data:`IDLE_GAP_S` with neither.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.tables import RunInfo, Tables
from analysis.view._values import merge, plain, uncovered_s

#: No activity for this long is idle (the default ``agent.stall_minutes``, issue 26).
IDLE_GAP_S = 600.0
#: Steps per page of a transcript.
PAGE_STEPS = 200
#: A step's text in a page is cut here (the trajectory file keeps it whole).
STEP_CHARS = 4000

_STOPS = ("stopped", "exited", "killed", "finished")


def _of(df: pd.DataFrame, run: RunInfo, arm: str, seat: str, key: str = "agent") -> pd.DataFrame:
    return df[(df["run_id"] == run.run_id) & (df["arm"] == arm) & (df[key] == seat)]


def trajectory_path(run: RunInfo, arm: str, seat: str) -> Path:
    """Where the seat's ATIF trajectory is (it may not exist)."""
    return run.run_dir / "arms" / arm / "agents" / seat / "trajectory.json"


def step_rows(run: RunInfo, arm: str | None = None, seat: str | None = None) -> pd.DataFrame:
    """The ``steps`` table's rows (of one seat when named; empty for a log without it)."""
    cols = ["arm", "seat", "step", "at", "kind", "tool", "tokens", "text", "source"]
    db = run.run_dir / "events.sqlite"
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return pd.DataFrame(columns=cols)
    try:
        where, args = "", []
        if arm is not None and seat is not None:
            where, args = " WHERE arm = ? AND seat = ?", [arm, seat]
        rows = con.execute(f"SELECT {', '.join(cols)} FROM steps{where} ORDER BY step", args)
        return pd.DataFrame(rows.fetchall(), columns=cols)
    except sqlite3.Error:  # a log written before the steps table
        return pd.DataFrame(columns=cols)
    finally:
        con.close()


def _span(tables: Tables, run: RunInfo, arm: str, seat: str, now: float) -> tuple[float, float]:
    end = (run.meta.get("ended_at") or now) - run.started_at
    end = max(0.0, min(end, run.run_seconds or end) if run.finished else end)
    life = _of(tables.lifecycle, run, arm, seat).sort_values("t_s")
    starts = life[life["event"] == "started"]["t_s"]
    begin = float(starts.iloc[0]) if len(starts) else 0.0
    if len(life) and str(life["event"].iloc[-1]) in _STOPS:
        end = float(life["t_s"].iloc[-1])
    return begin, max(begin, end)


def _activity(
    tables: Tables, run: RunInfo, arm: str, seat: str, steps: pd.DataFrame
) -> list[float]:
    times = [float(t) - run.started_at for t in steps["at"]] if len(steps) else []
    calls = _of(tables.model_calls, run, arm, seat)
    times += [float(t) for t in calls["t_start_s"].dropna()]
    times += [float(t) for t in _of(tables.submissions, run, arm, seat)["t_s"]]
    times += [float(t) for t in _of(tables.messages, run, arm, seat, key="author")["t_s"]]
    return sorted(times)


def _waits(tables: Tables, run: RunInfo, arm: str, seat: str, end: float) -> list[tuple]:
    subs = _of(tables.submissions, run, arm, seat)
    out = []
    for t, tv in zip(subs["t_s"], subs["t_verdict_s"], strict=True):
        done = float(tv) if pd.notna(tv) else end
        out.append((float(t), min(done, end)))
    return merge(out)


def _split(
    begin: float, end: float, activity: list[float], waits: list[tuple]
) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """Working spans, waiting spans (not working) and idle stretches, clipped to the span."""
    working = merge([(t, min(t + IDLE_GAP_S, end)) for t in activity if begin <= t <= end])
    waiting: list[tuple] = []
    for a, b in waits:  # the parts of each wait that no working span covers
        cursor = a
        for s, e in working:
            if e <= cursor or s >= b:
                continue
            if s > cursor:
                waiting.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < b:
            waiting.append((cursor, b))
    busy = merge(working + waiting)
    idle, cursor = [], begin
    for s, e in busy:
        if s > cursor:
            idle.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < end:
        idle.append((cursor, end))
    return working, merge(waiting), idle


def seats_overview(tables: Tables, now: float) -> dict[str, Any]:
    """The ``seats`` section: per run, arm and seat, its seconds working, waiting for a verdict
    and idle, its step count and whether it has a trajectory file."""
    rows = []
    for run in tables.runs:
        steps = step_rows(run)
        counts = steps.groupby(["arm", "seat"]).size().to_dict() if len(steps) else {}
        for seat in run.seats:
            arm, name = seat.arm, seat.agent
            own = steps[(steps["arm"] == arm) & (steps["seat"] == name)] if len(steps) else steps
            begin, end = _span(tables, run, arm, name, now)
            working, waiting, _ = _split(
                begin,
                end,
                _activity(tables, run, arm, name, own),
                _waits(tables, run, arm, name, end),
            )
            rows.append(
                {
                    "run_id": run.run_id,
                    "arm": arm,
                    "seat": name,
                    "role": seat.role,
                    "alive_s": end - begin,
                    "working_s": sum(e - s for s, e in working),
                    "waiting_s": sum(e - s for s, e in waiting),
                    "idle_s": uncovered_s([(begin, end)], working + waiting),
                    "steps": int(counts.get((arm, name), 0)),
                    "trajectory": trajectory_path(run, arm, name).is_file(),
                }
            )
    return {"idle_gap_s": IDLE_GAP_S, "seats": rows}


def _epoch(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # ATIF content parts
        return "\n".join(_text(v.get("text", v) if isinstance(v, dict) else v) for v in value)
    return json.dumps(value, ensure_ascii=False)


def _cut(text: str) -> str:
    if len(text) <= STEP_CHARS:
        return text
    return text[:STEP_CHARS] + f" … (+{len(text) - STEP_CHARS} chars)"


def transcript_steps(run: RunInfo, arm: str, seat: str) -> tuple[list[dict[str, Any]], str]:
    """The seat's whole transcript as page rows, and where it came from (``trajectory.json``,
    ``steps table`` or ``none``)."""
    path = trajectory_path(run, arm, seat)
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("steps"), list):
            # The steps table says what each step was (a scripted agent's move, submit, post
            # or wait); the file's own fields say only who spoke and whether it called tools.
            rows = step_rows(run, arm, seat)
            kinds = dict(zip(rows["step"], rows["kind"], strict=True)) if len(rows) else {}
            out = []
            for n, st in enumerate(doc["steps"]):
                if not isinstance(st, dict):
                    continue
                calls = st.get("tool_calls") or []
                results = (st.get("observation") or {}).get("results") or []
                metrics = st.get("metrics") or {}
                tokens = sum(
                    int(metrics.get(k) or 0) for k in ("prompt_tokens", "completion_tokens")
                )
                at = _epoch(st.get("timestamp"))
                kind = kinds.get(st.get("step_id")) or (
                    "tool" if calls else str(st.get("source") or "agent")
                )
                out.append(
                    {
                        "step": plain(st.get("step_id", n + 1)),
                        "t_s": at - run.started_at if at is not None else None,
                        "kind": str(kind),
                        "tool": ",".join(str(c.get("function_name", "")) for c in calls),
                        "tokens": tokens or None,
                        "text": _cut(_text(st.get("message"))),
                        "calls": [
                            {
                                "name": str(c.get("function_name", "")),
                                "args": _cut(_text(c.get("arguments"))),
                            }
                            for c in calls
                            if isinstance(c, dict)
                        ],
                        "results": [
                            _cut(_text(r.get("content"))) for r in results if isinstance(r, dict)
                        ],
                    }
                )
            return out, "trajectory.json"
    steps = step_rows(run, arm, seat)
    if len(steps):
        return [
            {
                "step": int(r.step),
                "t_s": float(r.at) - run.started_at,
                "kind": str(r.kind),
                "tool": str(r.tool or ""),
                "tokens": plain(r.tokens),
                "text": str(r.text or ""),
                "calls": [],
                "results": [],
            }
            for r in steps.itertuples(index=False)
        ], "steps table"
    return [], "none"


class _StepFinder:
    """The last step at or before a time (+1 s: the clocks of two writers): the one that made
    a submission or a post. Bisected: a seat has thousands of steps and of submissions."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        timed = [(st["t_s"], n, st["step"]) for n, st in enumerate(steps) if st["t_s"] is not None]
        timed.sort()
        self.times = [t for t, _, _ in timed]
        self.steps = [s for _, _, s in timed]

    def __call__(self, t_s: float) -> Any:
        i = bisect.bisect_right(self.times, t_s + 1.0)
        return self.steps[i - 1] if i else None


def seat_page(
    tables: Tables,
    run: RunInfo,
    arm: str,
    seat: str,
    now: float,
    offset: int = 0,
    limit: int = PAGE_STEPS,
    query: str = "",
    transcript: tuple[list[dict[str, Any]], str] | None = None,
    at_step: int | None = None,
) -> dict[str, Any]:
    """One seat's page: its timeline whole and one page of its transcript.

    Args:
        tables: The view's tables.
        run: The seat's run.
        arm: The seat's arm.
        seat: The seat's name.
        now: The wall clock (a live run's spans end here).
        offset: The first transcript row of the page (after the search).
        limit: Rows per page (``0``: all of them, as the export inlines).
        query: Only steps whose text, tool, arguments or results hold this (case-insensitive).
        transcript: :func:`transcript_steps` when the caller has read it.
        at_step: Start the page that holds this step instead (``offset`` ignored).

    Returns:
        ``timeline`` (model calls, tool calls, submissions with verdicts and the step that made
        each, posts, lifecycle, waits, idle stretches) and ``transcript`` (``total`` rows after
        the search, ``offset``, ``steps``, ``source``).
    """
    steps, source = transcript or transcript_steps(run, arm, seat)
    step_at = _StepFinder(steps)
    begin, end = _span(tables, run, arm, seat, now)
    table_steps = step_rows(run, arm, seat)
    working, waiting, idle = _split(
        begin,
        end,
        _activity(tables, run, arm, seat, table_steps),
        _waits(tables, run, arm, seat, end),
    )
    subs = _of(tables.submissions, run, arm, seat).sort_values("submission_id")
    posts = _of(tables.messages, run, arm, seat, key="author").sort_values("t_s")
    life = _of(tables.lifecycle, run, arm, seat).sort_values("t_s")
    calls = _of(tables.model_calls, run, arm, seat)
    tools = table_steps[table_steps["kind"] == "tool"] if len(table_steps) else table_steps
    timeline = {
        "begin_s": begin,
        "end_s": end,
        "model_calls": [
            [plain(t), plain(d)]
            for t, d in zip(calls["t_start_s"], calls["duration_s"], strict=True)
        ],
        "tools": [
            [float(a) - run.started_at, str(tl), int(s)]
            for a, tl, s in zip(tools["at"], tools["tool"], tools["step"], strict=True)
        ],
        "submissions": [
            {
                "submission_id": int(r.submission_id),
                "job_id": plain(r.job_id),
                "t_s": float(r.t_s),
                "t_verdict_s": plain(r.t_verdict_s),
                "verdict": str(r.verdict),
                "x": plain(r.x_baseline),
                "commit": str(r.commit),
                "step": step_at(float(r.t_s)),
            }
            for r in subs.itertuples(index=False)
        ],
        "posts": [
            {
                "message_id": int(r.message_id),
                "t_s": float(r.t_s),
                "kind": str(r.kind),
                "text": str(r.text)[:200],
                "step": step_at(float(r.t_s)),
            }
            for r in posts.itertuples(index=False)
        ],
        "lifecycle": [
            {"t_s": float(t), "event": str(e)}
            for t, e in zip(life["t_s"], life["event"], strict=True)
            if e != "request_refused"
        ],
        "working": working,
        "waits": waiting,
        "idle": [s for s in idle if s[1] - s[0] >= IDLE_GAP_S or s[0] == begin],
    }
    q = query.strip().lower()
    found = steps
    if q:
        found = [
            st
            for st in steps
            if q in st["text"].lower()
            or q in st["tool"].lower()
            or any(q in c["args"].lower() for c in st["calls"])
            or any(q in r.lower() for r in st["results"])
        ]
    if at_step is not None and limit:
        index = next((i for i, st in enumerate(found) if st["step"] == at_step), 0)
        offset = index - index % limit
    page = found[offset : offset + limit] if limit else found
    return {
        "run_id": run.run_id,
        "arm": arm,
        "seat": seat,
        "timeline": timeline,
        "transcript": {
            "source": source,
            "total": len(found),
            "all": len(steps),
            "offset": offset,
            "query": query,
            "steps": page,
        },
    }
