"""The planner's section for the report and the view, computed once per state of the event logs
and kept in a folder (``plan/`` beside ``report.md``; the view uses ``DIR/analysis/plan``).

A stamp (size and modification time of every run's ``events.sqlite`` and its WAL, and the
grid's settings) is written beside the files; the plan is simulated again only when the stamp
moves, so the report and the view of a finished run pay for it once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.plan.build import LABEL, Plan, make_plan, render, write_plan
from analysis.plan.fit import run_dirs

__all__ = ["PlanSection", "plan_section", "plan_stamp"]

#: The report's grid: one simulation per row, team sizes up to one past each judge's knee
#: (a saturated judge stays saturated; the largest teams cost the most events).
REPORT_GRID: dict[str, Any] = {"replications": 1, "draws": 100, "past_knee": 1}
#: Bump when the cached files' shape changes, so old caches are made again.
CACHE_VERSION = 1
STAMP = "stamp.json"
SECTION = "section.md"
VIEW = "view.json"


@dataclass
class PlanSection:
    """The planner's section: its Markdown (``section``) and the view's data (``view``)."""

    section: str
    view: dict[str, Any]


def plan_stamp(path: Path) -> str:
    """What the plan of ``path`` (a run or a sweep) depends on: every event log's size and
    modification time (a ``stat`` each), the grid and the cache's version."""
    parts = [f"v{CACHE_VERSION}", json.dumps(REPORT_GRID, sort_keys=True)]
    try:
        dirs = run_dirs([path])
    except ValueError:
        dirs = []
    for run in dirs:
        for name in ("events.sqlite", "events.sqlite-wal"):
            try:
                st = os.stat(run / name)
            except OSError:
                parts.append(f"{run.name}/{name}:-")
                continue
            if name.endswith("-wal") and st.st_size == 0:
                parts.append(f"{run.name}/{name}:-")  # an empty WAL holds nothing
            else:
                parts.append(f"{run.name}/{name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, bool):
        return value
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def _view(plan: Plan, figure: Path) -> dict[str, Any]:
    """The view's data: the team table (each judge's knee row marked), the knees, the replay
    table of every run and the figure as a ``data:`` address (the page opens offline)."""
    knee_of = {
        (float(r.speed), int(r.devices)): _plain(r.knee_seats_per_arm)
        for r in plan.knees.itertuples()
    }
    team = _rows(plan.team)
    for row in team:
        row["knee"] = (
            knee_of.get((float(row["speed"]), int(row["devices"]))) == row["seats_per_arm"]
        )
    return {
        "label": LABEL,
        "reason": None,
        "horizon_s": plan.horizon_s,
        "runs": [r.run_id for r in plan.runs],
        "past_knee": plan.past_knee,
        "team": team,
        "knees": _rows(plan.knees),
        "replays": [{"run_id": k, "rows": _rows(v)} for k, v in plan.replays.items()],
        "self_replay": [
            {"run_id": run_id, "quantity": name, **{k: _plain(x) for k, x in v.items()}}
            for run_id, errors in plan.self_replay.items()
            for name, v in errors.items()
        ],
        "notes": plan.notes,
        "figure": "data:image/png;base64," + base64.b64encode(figure.read_bytes()).decode(),
    }


def not_enough(reason: str) -> PlanSection:
    """The one-line section of a run too small to plan from."""
    text = f"## Planner ({LABEL})\n\nNot enough to plan: {reason}.\n"
    return PlanSection(text, {"label": LABEL, "reason": f"not enough to plan: {reason}"})


def _writable(out: Path, stamp: str) -> Path:
    """``out``, or a folder of this user's temporary space standing in for it when the run's
    folder cannot be written (a run copied read-only, another user's run): a report or a view
    of such a run still gets its plan, computed again where the cache cannot be kept."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return out
    except OSError:
        key = hashlib.sha256(f"{out.resolve()}|{stamp}".encode()).hexdigest()[:16]
        spare = Path(tempfile.gettempdir()) / f"swarmlab-plan-{os.getuid()}" / key
        spare.mkdir(parents=True, exist_ok=True)
        return spare


def plan_section(path: Path, out: Path, *, figure: str | None = None) -> PlanSection:
    """The planner's section of ``path`` (a run or a sweep), from the files in ``out`` when
    they were made from the event logs as they are now, else simulated (the report's grid,
    :data:`REPORT_GRID`) and written there.

    Args:
        path: The run or sweep folder.
        out: The plan's folder (its tables, ``plan.png``, ``plan.md`` and the cache's files).
        figure: The figure's path as the Markdown names it (default: ``<out's name>/plan.png``,
            for a report beside ``out``).

    Returns:
        The section; a run with nothing judged gets one line saying so.
    """
    ref = figure or f"{out.name}/plan.png"
    stamp = f"{plan_stamp(path)}|figure:{ref}"
    try:
        if json.loads((out / STAMP).read_text()).get("stamp") == stamp:
            return PlanSection((out / SECTION).read_text(), json.loads((out / VIEW).read_text()))
    except (OSError, ValueError):
        pass  # no cache, or a broken one: made again
    out = _writable(out, stamp)
    try:
        plan = make_plan([path], **REPORT_GRID)
    except ValueError as exc:  # nothing judged (or no run): the report is still made
        made = not_enough(str(exc))
    else:
        write_plan(plan, out)
        made = PlanSection(render(plan, figure=ref), _view(plan, out / "plan.png"))
    out.mkdir(parents=True, exist_ok=True)
    (out / SECTION).write_text(made.section)
    (out / VIEW).write_text(json.dumps(made.view, allow_nan=False))
    (out / STAMP).write_text(json.dumps({"stamp": stamp}))
    return made
