"""Synthetic seat trajectories for the view's seat page: an ATIF ``trajectory.json`` and the
``steps`` rows that mirror it (issue 26), written into an existing run directory.

Used by ``bench/seat_pages.py`` and ``tests/analysis/test_view_seats.py`` (through
``tests.support.bench.load_bench``) (6 seats x 5,000
steps). The ``steps`` DDL is the runner's (``runrecord.schema``); it is repeated here, with
``IF NOT EXISTS``, for logs written before the table existed.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

STEPS_DDL = """
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, arm TEXT NOT NULL, seat TEXT NOT NULL,
    step INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, tool TEXT NOT NULL DEFAULT '',
    tokens INTEGER, text TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT ''
);
"""


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def synthetic_steps(n: int, t0: float, dt: float) -> list[dict]:
    """``n`` ATIF steps from ``t0``, one every ``dt`` seconds: a user prompt, then agent
    replies, every other one calling ``bash`` (its output in the observation)."""
    steps = [{"step_id": 1, "timestamp": _iso(t0), "source": "user", "message": "the prompt"}]
    for i in range(2, n + 1):
        step: dict = {
            "step_id": i,
            "timestamp": _iso(t0 + (i - 1) * dt),
            "source": "agent",
            "message": f"step {i}: thinking about the decode loop",
            "metrics": {"prompt_tokens": 100 + i, "completion_tokens": 20},
        }
        if i % 2 == 0:
            step["tool_calls"] = [
                {
                    "tool_call_id": f"c{i}",
                    "function_name": "bash",
                    "arguments": {"command": f"make test # run {i}"},
                }
            ]
            step["observation"] = {
                "results": [{"source_call_id": f"c{i}", "content": f"ok {i}\n" * 5}]
            }
        steps.append(step)
    return steps


def write_seat(
    run_dir: Path, arm: str, seat: str, steps: list[dict], *, file: bool = True, table: bool = True
) -> None:
    """Write ``steps`` as the seat's ``trajectory.json`` and/or its ``steps`` rows."""
    if file:
        path = Path(run_dir) / "arms" / arm / "agents" / seat / "trajectory.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "schema_version": "ATIF-v1.2",
            "session_id": f"{arm}-{seat}",
            "agent": {"name": "synthetic", "version": "0"},
            "steps": steps,
        }
        path.write_text(json.dumps(doc))
    if table:
        db = sqlite3.connect(Path(run_dir) / "events.sqlite")
        try:
            db.executescript(STEPS_DDL)
            rows = []
            for st in steps:
                calls = st.get("tool_calls") or []
                m = st.get("metrics") or {}
                rows.append(
                    (
                        arm,
                        seat,
                        st["step_id"],
                        datetime.fromisoformat(st["timestamp"].replace("Z", "+00:00")).timestamp(),
                        "tool" if calls else st["source"],
                        ",".join(c["function_name"] for c in calls),
                        (m.get("prompt_tokens", 0) + m.get("completion_tokens", 0)) or None,
                        str(st.get("message", ""))[:200],
                        "synthetic",
                    )
                )
            db.executemany(
                "INSERT INTO steps (arm, seat, step, at, kind, tool, tokens, text, source)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.commit()
        finally:
            db.close()
