"""The run's event log: one SQLite file (WAL) in the run directory holding everything that
happened — submissions, evaluations (verdict, metrics, stage timings, queue wait), board
messages, agent lifecycle, token usage, the seats' calls through the model proxy, and the
run's own metadata. ``analysis`` reads only this file (and what else the run wrote to disk)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from runrecord import schema
from sqlitewal import connect_wal

# The tables and their columns are the run record's (runrecord.schema, the one place the DDL
# lives); analysis.tables reads what they say.
SCHEMA = schema.SCHEMA


def _rows(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


class EventLog:
    """Append-mostly event store of one run. Safe to open from several processes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as db:
            # The tables, and the columns an older log lacks (a resumed run's log).
            schema.upgrade(db)

    def connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return connect_wal(self.path)

    # -- metadata ------------------------------------------------------------------------

    def set_meta(self, **values: Any) -> None:
        with self.connect() as db:
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def meta(self) -> dict[str, Any]:
        with self.connect() as db:
            return {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}

    # -- events --------------------------------------------------------------------------

    def lifecycle(self, arm: str, agent: str, event: str, **detail: Any) -> None:
        with self.connect() as db:
            db.execute(
                "INSERT INTO lifecycle (at, arm, agent, event, detail) VALUES (?, ?, ?, ?, ?)",
                (time.time(), arm, agent, event, json.dumps(detail, sort_keys=True)),
            )

    def add_submission(
        self, arm: str, agent: str, request_id: str, commit: str, message: str = ""
    ) -> tuple[int, int | None]:
        """Record a submission once per request id; returns (submission id, job id or None).
        A request seen before returns its existing row, so a retried request never doubles."""
        with self.connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT id, job_id FROM submissions WHERE request_id = ?", (request_id,)
            ).fetchone()
            if row is None:
                cur = db.execute(
                    "INSERT INTO submissions (at, arm, agent, request_id, commit_sha, message)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (time.time(), arm, agent, request_id, commit, message),
                )
                row = (int(cur.lastrowid or 0), None)
            db.execute("COMMIT")
            return row[0], row[1]

    def set_job(self, submission_id: int, job_id: int) -> None:
        with self.connect() as db:
            db.execute("UPDATE submissions SET job_id = ? WHERE id = ?", (job_id, submission_id))

    def add_evaluation(self, submission_id: int | None, evaluation: Any) -> bool:
        """Store a judge ``Evaluation`` once; False if it was already stored."""
        e = evaluation
        with self.connect() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO evaluations (job_id, submission_id, arm, agent,"
                " commit_sha, verdict, reason, detail, metrics, stages, flags, attempts,"
                " enqueued_at, started_at, finished_at, queue_wait_s, settings_hash,"
                " duplicate_of, tree) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.job_id,
                    submission_id,
                    e.arm,
                    e.agent,
                    e.commit,
                    str(e.verdict),
                    e.reason,
                    e.detail,
                    json.dumps(e.metrics, sort_keys=True),
                    json.dumps(e.stages, sort_keys=True),
                    json.dumps(e.flags, sort_keys=True),
                    e.attempts,
                    e.enqueued_at,
                    e.started_at,
                    e.finished_at,
                    e.queue_wait_s,
                    getattr(e, "settings_hash", ""),
                    getattr(e, "duplicate_of", None),
                    getattr(e, "tree", ""),
                ),
            )
            return cur.rowcount == 1

    def post(self, arm: str, author: str, role: str, kind: str, text: str, **refs: Any) -> int:
        """Append a board message (authors are set by the gateway, never by the agent)."""
        return self.add_message(arm, author, role, kind, text, refs)[0]

    def add_message(
        self,
        arm: str,
        author: str,
        role: str,
        kind: str,
        text: str,
        refs: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> tuple[int, bool]:
        """Append a board message once per ``request_id``; returns (message id, created).
        A request seen before returns its existing message, so a retried post never doubles."""
        with self.connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = None
            if request_id is not None:
                row = db.execute(
                    "SELECT id FROM messages WHERE request_id = ?", (request_id,)
                ).fetchone()
            created = row is None
            if row is None:
                cur = db.execute(
                    "INSERT INTO messages (at, arm, author, role, kind, text, refs, request_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        time.time(),
                        arm,
                        author,
                        role,
                        kind,
                        text,
                        json.dumps(refs or {}, sort_keys=True),
                        request_id,
                    ),
                )
                row = (int(cur.lastrowid or 0),)
            db.execute("COMMIT")
            return row[0], created

    def add_tokens(
        self,
        arm: str,
        agent: str,
        model: str,
        source: str,
        *,
        input: int,
        cache_read: int,
        cache_write: int,
        output: int,
        reasoning: int,
        cost_estimate: float | None = None,
    ) -> None:
        with self.connect() as db:
            db.execute(
                "INSERT INTO tokens (at, arm, agent, model, input, cache_read, cache_write,"
                " output, reasoning, cost_estimate, source) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    time.time(),
                    arm,
                    agent,
                    model,
                    input,
                    cache_read,
                    cache_write,
                    output,
                    reasoning,
                    cost_estimate,
                    source,
                ),
            )

    def set_tokens(self, arm: str, agent: str, source: str, usages: Iterable[Any]) -> int:
        """Replace every token row of one agent with ``usages`` (``analysis.tokens.TokenUsage``
        per model, read from the agent's whole session record), in one transaction: reading
        the same records again, periodically or after a restart, never counts twice.
        Returns the rows written."""
        rows = [
            (
                time.time(),
                arm,
                agent,
                u.model,
                u.input,
                u.cache_read,
                u.cache_write,
                u.output,
                u.reasoning,
                u.cost_estimate,
                source,
                u.requests,
            )
            for u in usages
        ]
        with self.connect() as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM tokens WHERE arm = ? AND agent = ?", (arm, agent))
            db.executemany(
                "INSERT INTO tokens (at, arm, agent, model, input, cache_read, cache_write,"
                " output, reasoning, cost_estimate, source, requests)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            db.execute("COMMIT")
        return len(rows)

    def add_model_call(self, call: Any) -> None:
        """Record one request a seat made through the model proxy (``isolation.model_proxy``)."""
        with self.connect() as db:
            db.execute(
                "INSERT INTO model_calls (arm, agent, method, path, status, upstream_status,"
                " error, started_at, first_byte_at, finished_at, bytes_up, bytes_down,"
                " retry_after, model, input, cache_read, cache_write, output, reasoning,"
                " queued_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    call.arm,
                    call.agent,
                    call.method,
                    call.path,
                    call.status,
                    call.upstream_status,
                    call.error,
                    call.started_at,
                    call.first_byte_at,
                    call.finished_at,
                    call.bytes_up,
                    call.bytes_down,
                    call.retry_after,
                    call.model,
                    call.input,
                    call.cache_read,
                    call.cache_write,
                    call.output,
                    call.reasoning,
                    getattr(call, "queued_s", 0.0),
                ),
            )

    def replace_steps(self, arm: str, seat: str, rows: Iterable[dict[str, Any]]) -> int:
        """Replace one seat's rows of ``steps`` (its trajectory, re-read whole each time).

        Args:
            arm: The seat's arm.
            seat: The seat (agent name).
            rows: One dict per step: ``step``, ``at``, ``kind``, and optionally ``tool``,
                ``tokens``, ``text``, ``source`` (runrecord.schema says what each holds).

        Returns:
            How many rows the seat has now.
        """
        values = [
            (
                arm,
                seat,
                int(r["step"]),
                float(r["at"]),
                str(r["kind"]),
                str(r.get("tool") or ""),
                r.get("tokens"),
                str(r.get("text") or "")[: schema.STEP_TEXT_CHARS],
                str(r.get("source") or ""),
            )
            for r in rows
        ]
        with self.connect() as db:
            # One transaction: a reader sees the seat's old steps or its new ones, never none.
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM steps WHERE arm = ? AND seat = ?", (arm, seat))
            db.executemany(
                "INSERT INTO steps (arm, seat, step, at, kind, tool, tokens, text, source)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                values,
            )
            db.execute("COMMIT")
        return len(values)

    # -- reads ---------------------------------------------------------------------------

    def table(self, name: str, where: str = "", args: tuple = ()) -> list[dict[str, Any]]:
        """All rows of one table (``where`` is a trusted SQL fragment with ``?`` args)."""
        if name not in schema.event_tables():
            raise ValueError(f"no table {name!r}")
        with self.connect() as db:
            return _rows(db.execute(f"SELECT * FROM {name} {where} ORDER BY rowid", args))

    def messages(self, arm: str, since: int = 0) -> list[dict[str, Any]]:
        return self.table("messages", "WHERE arm = ? AND id > ?", (arm, since))

    def pending_jobs(self) -> list[dict[str, Any]]:
        """Submissions queued with the judge whose evaluation is not stored yet."""
        with self.connect() as db:
            return _rows(
                db.execute(
                    "SELECT s.* FROM submissions s LEFT JOIN evaluations e ON e.job_id = s.job_id"
                    " WHERE s.job_id IS NOT NULL AND e.job_id IS NULL ORDER BY s.id"
                )
            )

    def unqueued_submissions(self) -> list[dict[str, Any]]:
        return self.table("submissions", "WHERE job_id IS NULL")
