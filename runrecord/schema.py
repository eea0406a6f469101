"""The event log's schema: the one place its tables, columns and DDL are written down.

A run's ``events.sqlite`` (written by ``runner.events.EventLog``, read by ``analysis.tables``)
holds these tables. ``LATER_COLUMNS`` are the columns added after the first runs were made: a
log written before them lacks them, and ``upgrade`` adds them to a log opened for writing.
"""

from __future__ import annotations

import sqlite3
from functools import cache

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lifecycle (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, arm TEXT NOT NULL,
    agent TEXT NOT NULL, event TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, arm TEXT NOT NULL,
    agent TEXT NOT NULL, request_id TEXT NOT NULL UNIQUE, commit_sha TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '', job_id INTEGER
);
CREATE TABLE IF NOT EXISTS evaluations (
    job_id INTEGER PRIMARY KEY, submission_id INTEGER, arm TEXT NOT NULL, agent TEXT NOT NULL,
    commit_sha TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT NOT NULL, detail TEXT NOT NULL,
    metrics TEXT NOT NULL, stages TEXT NOT NULL, flags TEXT NOT NULL, attempts INTEGER NOT NULL,
    enqueued_at REAL NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL,
    queue_wait_s REAL NOT NULL, settings_hash TEXT NOT NULL DEFAULT '', duplicate_of INTEGER,
    tree TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, arm TEXT NOT NULL,
    author TEXT NOT NULL, role TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    refs TEXT NOT NULL DEFAULT '{}', request_id TEXT
);
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, arm TEXT NOT NULL,
    agent TEXT NOT NULL, model TEXT NOT NULL, input INTEGER NOT NULL, cache_read INTEGER NOT NULL,
    cache_write INTEGER NOT NULL, output INTEGER NOT NULL, reasoning INTEGER NOT NULL,
    cost_estimate REAL, source TEXT NOT NULL, requests INTEGER
);
CREATE TABLE IF NOT EXISTS model_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, arm TEXT NOT NULL, agent TEXT NOT NULL,
    method TEXT NOT NULL, path TEXT NOT NULL, status INTEGER NOT NULL, upstream_status INTEGER,
    error TEXT NOT NULL, started_at REAL NOT NULL, first_byte_at REAL, finished_at REAL NOT NULL,
    bytes_up INTEGER NOT NULL, bytes_down INTEGER NOT NULL, retry_after TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '', input INTEGER, cache_read INTEGER, cache_write INTEGER,
    output INTEGER, reasoning INTEGER, queued_s REAL
);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT, arm TEXT NOT NULL, seat TEXT NOT NULL,
    step INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, tool TEXT NOT NULL DEFAULT '',
    tokens INTEGER, text TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT ''
);
"""

#: Columns added after the first logs were written, per table, with their SQL type: a log
#: made before one of them lacks it (``upgrade`` adds it; readers must not assume it).
LATER_COLUMNS: dict[str, list[tuple[str, str]]] = {
    # A board post's request id: a retried post is stored once.
    "messages": [("request_id", "TEXT")],
    # The judge settings an evaluation was made under; the earlier job whose evaluation of the
    # same tree it reuses (judge.duplicates; NULL: judged itself) and that git tree id.
    "evaluations": [
        ("settings_hash", "TEXT NOT NULL DEFAULT ''"),
        ("duplicate_of", "INTEGER"),
        ("tree", "TEXT NOT NULL DEFAULT ''"),
    ],
    # Distinct API calls a token record counts (or NULL).
    "tokens": [("requests", "INTEGER")],
    # The usage the vendor reported for a model call.
    "model_calls": [
        ("model", "TEXT NOT NULL DEFAULT ''"),
        *((n, "INTEGER") for n in ("input", "cache_read", "cache_write", "output", "reasoning")),
        # Seconds a call waited at the proxy for its seat's fair-use slot (isolation.fair_use).
        ("queued_s", "REAL"),
    ],
}

#: Indexes made after the tables (a board post retried after a gateway crash is stored once;
#: NULL request ids may repeat).
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS messages_request ON messages (request_id);
CREATE INDEX IF NOT EXISTS steps_seat ON steps (arm, seat, step);
"""

#: What a row of ``steps`` is (its ``kind``). ``steps`` mirrors each seat's
#: ``arms/<arm>/agents/<seat>/trajectory.json`` (ATIF), one row per trajectory step, rewritten
#: whole for a seat each time its trajectory is re-read (``runner.trajectories``): ``step`` is
#: the ATIF ``step_id``; ``at`` its time (epoch seconds); ``tool`` the tool a ``tool`` step
#: called (several: comma-joined); ``tokens`` the step's input + output tokens where the CLI
#: reported them (NULL otherwise); ``text`` a short text (at most ``STEP_TEXT_CHARS``); ``source``
#: the CLI whose session records it came from (``scripted`` for the scripted agents).
STEP_KINDS = (
    "system",  # the seat's prompt as the CLI was given it
    "user",  # a user message: the prompt, a keep-going message after a restart or a nudge
    "agent",  # a model reply (its text; tokens)
    "tool",  # a model reply that called tools (tool names; arguments and results in the file)
    "submit",  # a submission the seat made (from events.sqlite's submissions)
    "post",  # a board post the seat made (from events.sqlite's messages)
    "move",  # a scripted agent's move (the scripted agents only)
    "wait",  # a scripted agent waiting (for the judge, the board)
)

#: The longest ``steps.text`` kept (the trajectory file holds more; see runner.trajectories).
STEP_TEXT_CHARS = 200

#: Tables an older log may lack altogether (written before the model proxy existed, or before
#: seats' trajectories were read into ``steps``).
OPTIONAL_TABLES = frozenset({"model_calls", "steps"})


def upgrade(db: sqlite3.Connection) -> None:
    """Create the tables a log lacks and add the columns an older log lacks (idempotent).

    Args:
        db: An open connection to a run's ``events.sqlite``, writable.
    """
    db.executescript(SCHEMA)
    for table, added in LATER_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for name, sql_type in added:
            if name not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}")
    db.executescript(INDEXES)


@cache
def _columns() -> dict[str, tuple[str, ...]]:
    with sqlite3.connect(":memory:") as db:
        db.executescript(SCHEMA)
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = {
            n: tuple(row[1] for row in db.execute(f"PRAGMA table_info({n})"))
            for n in names
            if not n.startswith("sqlite_")
        }
    db.close()
    return out


def event_tables() -> tuple[str, ...]:
    """The event tables (every table but ``meta``), in the schema's order."""
    return tuple(n for n in _columns() if n != "meta")


def columns(table: str) -> tuple[str, ...]:
    """The columns of one table as a log made today has them, in order.

    Raises:
        KeyError: No such table.
    """
    return _columns()[table]
