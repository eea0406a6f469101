"""The judge's durable, serial queue (SQLite, WAL).

An evaluation is claimed and its result written in single transactions, so a judge killed
mid-evaluation leaves the job ``running``; the next worker for that device puts it back in
the queue. A job is therefore never lost and never counted twice.

Every job carries the hash of the judge settings it must be judged under
(``judge.settings.settings_hash``), and a worker claims only jobs of its own hash: a run is never
judged by a service that another run started with other settings.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from judge.verdict import Evaluation
from sqlitewal import connect_wal

POLICIES = ("fifo", "fair")
# Whose turn a job takes under the fair policy: its fair key, else its arm.
_TURN = "COALESCE(NULLIF({t}.fair_key, ''), {t}.arm)"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    arm TEXT NOT NULL,
    agent TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    repo TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'cancelled')),
    device TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    enqueued_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    verdict TEXT,
    result TEXT,
    fair_key TEXT NOT NULL DEFAULT '',
    settings_hash TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    rejudge INTEGER NOT NULL DEFAULT 0,
    tree_id TEXT NOT NULL DEFAULT '',
    duplicate_of INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job_id INTEGER,
    kind TEXT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}'
);
"""


@dataclass(frozen=True)
class Job:
    """A submission waiting for, or under, evaluation."""

    id: int
    arm: str
    agent: str
    label: str
    repo: str
    commit: str
    attempts: int
    enqueued_at: float
    settings_hash: str = ""
    # A deliberate re-judgement (the runner re-measuring a commit): never deduplicated.
    rejudge: bool = False


class JudgeQueue:
    """Durable queue of submissions. Safe to open from several processes at once.

    Args:
        path: the SQLite file (created with its schema if missing).
        policy: ``fifo`` (oldest first) or ``fair`` (round-robin by arm: the arm served
            longest ago goes next, then its oldest job). An arm is its ``fair_key`` when the
            job has one, else its name: runs sharing one judge (a parallel sweep) pass
            ``run/arm`` keys, so that every run's arms take turns, rather than all runs' "swarm"
            arms sharing one turn and a run that queued later waiting behind the others.
        settings_hash: the judge settings of this side of the queue: jobs it enqueues carry
            it, and ``claim`` takes only jobs of this hash, or jobs queued with none (a tool
            that names no settings accepts any; the evaluation still records the hash used).
    """

    def __init__(self, path: str | Path, policy: str = "fifo", settings_hash: str = "") -> None:
        if policy not in POLICIES:
            raise ValueError(f"queue policy {policy!r} is not one of {', '.join(POLICIES)}")
        self.path = Path(path)
        self.policy = policy
        self.settings_hash = settings_hash
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
            if "fair_key" not in columns:  # a queue made before fair keys existed
                db.execute("ALTER TABLE jobs ADD COLUMN fair_key TEXT NOT NULL DEFAULT ''")
            if "settings_hash" not in columns:  # a queue made before jobs named their settings
                db.execute("ALTER TABLE jobs ADD COLUMN settings_hash TEXT NOT NULL DEFAULT ''")
            if "owner" not in columns:
                db.execute("ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
            # Queues made before identical trees were recognised.
            if "rejudge" not in columns:
                db.execute("ALTER TABLE jobs ADD COLUMN rejudge INTEGER NOT NULL DEFAULT 0")
            if "tree_id" not in columns:
                db.execute("ALTER TABLE jobs ADD COLUMN tree_id TEXT NOT NULL DEFAULT ''")
            if "duplicate_of" not in columns:
                db.execute("ALTER TABLE jobs ADD COLUMN duplicate_of INTEGER")
            db.execute("CREATE INDEX IF NOT EXISTS jobs_tree ON jobs (tree_id)")

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return connect_wal(self.path)

    def enqueue(
        self,
        *,
        arm: str,
        agent: str,
        repo: str,
        commit: str,
        label: str = "",
        fair_key: str = "",
        rejudge: bool = False,
    ) -> int:
        """Queue one commit (a full sha) of ``repo`` under this queue's settings hash; returns
        the job id. ``fair_key``: whose turn this job takes under the ``fair`` policy (default:
        the arm's name). ``rejudge``: a deliberate re-judgement, always evaluated afresh (never
        answered with an earlier evaluation of the same tree)."""
        with self._connect() as db:
            cur = db.execute(
                "INSERT INTO jobs (arm, agent, label, repo, commit_sha, state, enqueued_at,"
                " fair_key, settings_hash, owner, rejudge)"
                " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                (
                    arm,
                    agent,
                    label,
                    str(repo),
                    commit,
                    time.time(),
                    fair_key,
                    self.settings_hash,
                    process_token(),
                    int(rejudge),
                ),
            )
            job_id = int(cur.lastrowid or 0)
            self._event(
                db,
                job_id,
                "enqueued",
                {"arm": arm, "agent": agent, "commit": commit, "settings": self.settings_hash},
            )
            return job_id

    def _order(self) -> str:
        if self.policy == "fair":
            return (
                "(SELECT COALESCE(MAX(k.started_at), 0) FROM jobs k"
                f" WHERE {_TURN.format(t='k')} = {_TURN.format(t='j')}"
                " AND k.started_at IS NOT NULL), j.id"
            )
        return "j.id"

    def next_turn(self) -> str | None:
        """Whose turn the device is, by policy: the settings hash of the next queued job whose
        submitter is alive, or this queue's own when the next is one of its own settings or of
        none; None when nothing waits. Jobs of a process that is gone (a run killed and not
        resumed) are skipped here: they wait for a worker of their settings, never block one."""
        with self._connect() as db:
            rows = db.execute(
                f"SELECT j.settings_hash, j.owner FROM jobs j WHERE j.state = 'queued'"
                f" ORDER BY {self._order()}"
            ).fetchall()
        alive: dict[str, bool] = {}
        for settings, owner in rows:
            if settings in (self.settings_hash, ""):
                return self.settings_hash
            if owner not in alive:
                alive[owner] = process_alive(owner)
            if alive[owner]:
                return settings
        return None

    def adopt(self, job_ids: list[int]) -> None:
        """Make this process the submitter of ``job_ids`` still queued (a resumed run takes
        over the jobs its killed runner queued, so they count as alive in ``next_turn``)."""
        with self._connect() as db:
            db.executemany(
                "UPDATE jobs SET owner = ? WHERE id = ? AND state = 'queued'",
                [(process_token(), job_id) for job_id in job_ids],
            )

    def claim(self, device: str) -> Job | None:
        """Take the next job of this queue's settings (or of none) by policy and mark it
        running on ``device``; None when there is none."""
        order = self._order()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT j.id FROM jobs j WHERE j.state = 'queued'"
                f" AND j.settings_hash IN (?, '') ORDER BY {order} LIMIT 1",
                (self.settings_hash,),
            ).fetchone()
            if row is None:
                db.execute("COMMIT")
                return None
            db.execute(
                "UPDATE jobs SET state = 'running', device = ?, attempts = attempts + 1,"
                " started_at = ? WHERE id = ?",
                (device, time.time(), row[0]),
            )
            self._event(db, row[0], "started", {"device": device})
            db.execute("COMMIT")
            return self._job(db, row[0])

    def finish(self, job_id: int, evaluation: Evaluation) -> bool:
        """Store the result of a running job; False if it was not running (never twice)."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            cur = db.execute(
                "UPDATE jobs SET state = 'done', verdict = ?, result = ?, finished_at = ?,"
                " tree_id = ?, duplicate_of = ? WHERE id = ? AND state = 'running'",
                (
                    str(evaluation.verdict),
                    evaluation.to_json(),
                    evaluation.finished_at,
                    evaluation.tree,
                    evaluation.duplicate_of,
                    job_id,
                ),
            )
            if cur.rowcount:
                data: dict[str, object] = {"verdict": str(evaluation.verdict)}
                if evaluation.duplicate_of is not None:
                    data["duplicate_of"] = evaluation.duplicate_of
                self._event(db, job_id, "finished", data)
            db.execute("COMMIT")
            return cur.rowcount == 1

    def earlier_evaluation(self, tree: str, job_id: int, *, same_arm: bool) -> Evaluation | None:
        """The first evaluation, finished before now, of the same git tree under this queue's
        settings hash with a verdict other than ERROR, judged afresh (not itself a duplicate):
        the one job ``job_id`` may reuse. ``same_arm``: only one of ``job_id``'s own arm (its
        fair key: the same arm of the same run), else of any arm of this queue.

        The settings compared are those the earlier evaluation was judged under (a job queued
        with none takes its worker's), so nothing judged under other settings is reused.
        """
        sql = (
            "SELECT j.result FROM jobs j WHERE j.state = 'done' AND j.tree_id = ?"
            " AND j.tree_id != '' AND j.verdict != 'ERROR' AND j.duplicate_of IS NULL"
            " AND j.id != ? AND json_extract(j.result, '$.settings_hash') = ?"
        )
        args: tuple = (tree, job_id, self.settings_hash)
        if same_arm:
            sql += (
                f" AND {_TURN.format(t='j')} ="
                f" (SELECT {_TURN.format(t='k')} FROM jobs k WHERE k.id = ?)"
            )
            args += (job_id,)
        with self._connect() as db:
            row = db.execute(sql + " ORDER BY j.finished_at, j.id LIMIT 1", args).fetchone()
        return Evaluation.from_dict(json.loads(row[0])) if row else None

    def requeue(self, job_id: int, why: str, reason: str = "") -> None:
        """Put a running job back (an infrastructure fault, not the candidate's); ``reason``:
        the ERROR's reason, kept in the queue's log (:meth:`requeue_reasons`)."""
        with self._connect() as db:
            db.execute(
                "UPDATE jobs SET state = 'queued', started_at = NULL"
                " WHERE id = ? AND state = 'running'",
                (job_id,),
            )
            self._event(db, job_id, "requeued", {"why": why, "reason": reason})

    def requeue_reasons(self, job_id: int) -> list[str]:
        """The reasons of the ERRORs that put ``job_id`` back, in order (``""`` unknown)."""
        return [
            str(data.get("reason", ""))
            for _, _, kind, data in self.events(job_id)
            if kind == "requeued"
        ]

    def cancel(self, job_ids: list[int], why: str, *, running: bool = False) -> list[int]:
        """Withdraw jobs still waiting (a run past its deadline); returns those withdrawn.
        A job done is left alone, and so is one running unless ``running`` (a run that ended:
        nobody would record its result, so the worker's ``finish`` is refused)."""
        states = ("queued", "running") if running else ("queued", "queued")
        cancelled = []
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            for job_id in job_ids:
                cur = db.execute(
                    "UPDATE jobs SET state = 'cancelled', finished_at = ?"
                    " WHERE id = ? AND state IN (?, ?)",
                    (time.time(), job_id, *states),
                )
                if cur.rowcount:
                    cancelled.append(job_id)
                    self._event(db, job_id, "cancelled", {"why": why})
            db.execute("COMMIT")
        return cancelled

    def recover(self, device: str) -> list[int]:
        """Re-queue jobs left running on ``device`` by a worker that died. Call it only while
        holding that device's lock, so no live worker owns them."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT id FROM jobs WHERE state = 'running' AND device = ?", (device,)
                )
            ]
            for job_id in ids:
                db.execute(
                    "UPDATE jobs SET state = 'queued', started_at = NULL WHERE id = ?", (job_id,)
                )
                self._event(db, job_id, "recovered", {"device": device})
            db.execute("COMMIT")
            return ids

    def result(self, job_id: int) -> Evaluation | None:
        """The finished evaluation of a job, or None while it is queued or running."""
        with self._connect() as db:
            row = db.execute(
                "SELECT result FROM jobs WHERE id = ? AND state = 'done'", (job_id,)
            ).fetchone()
        return Evaluation.from_dict(json.loads(row[0])) if row else None

    def state(self, job_id: int) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return row[0] if row else None

    def wait(self, job_id: int, timeout: float | None = None, poll: float = 0.2) -> Evaluation:
        """Block until ``job_id`` is done; raises TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            evaluation = self.result(job_id)
            if evaluation is not None:
                return evaluation
            state = self.state(job_id)
            if state is None:
                raise KeyError(f"no job {job_id} in {self.path}")
            if state == "cancelled":
                raise LookupError(f"job {job_id} was cancelled")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not done after {timeout} s")
            time.sleep(poll)

    def counts(self, settings_hash: str | None = None) -> dict[str, int]:
        """Number of jobs per state (only those of ``settings_hash``, if given)."""
        sql, args = "SELECT state, COUNT(*) FROM jobs", ()
        if settings_hash is not None:
            sql, args = sql + " WHERE settings_hash = ?", (settings_hash,)
        with self._connect() as db:
            rows = db.execute(sql + " GROUP BY state", args).fetchall()
        return {state: n for state, n in rows}

    def evaluations(self) -> list[Evaluation]:
        """Every finished evaluation, in the order they finished."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT result FROM jobs WHERE state = 'done' ORDER BY finished_at, id"
            ).fetchall()
        return [Evaluation.from_dict(json.loads(r[0])) for r in rows]

    def events(self, job_id: int | None = None) -> list[tuple[float, int | None, str, dict]]:
        """The queue's own log: enqueued, started, finished, requeued, recovered."""
        sql = "SELECT at, job_id, kind, data FROM events"
        args: tuple = ()
        if job_id is not None:
            sql += " WHERE job_id = ?"
            args = (job_id,)
        with self._connect() as db:
            rows = db.execute(sql + " ORDER BY id", args).fetchall()
        return [(at, jid, kind, json.loads(data)) for at, jid, kind, data in rows]

    def _job(self, db: sqlite3.Connection, job_id: int) -> Job:
        row = db.execute(
            "SELECT id, arm, agent, label, repo, commit_sha, attempts, enqueued_at, settings_hash,"
            " rejudge FROM jobs WHERE id = ?",
            (job_id,),
        ).fetchone()
        return Job(*row[:-1], rejudge=bool(row[-1]))

    @staticmethod
    def _event(db: sqlite3.Connection, job_id: int | None, kind: str, data: dict) -> None:
        db.execute(
            "INSERT INTO events (at, job_id, kind, data) VALUES (?, ?, ?, ?)",
            (time.time(), job_id, kind, json.dumps(data, sort_keys=True)),
        )


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the name may hold spaces


def process_token(pid: int | None = None) -> str:
    """``pid:start time``: names one process, not a later one that reuses its pid."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{_start_time(pid) or ''}"


def process_alive(token: str) -> bool:
    """True while the process ``process_token`` named is alive (not a zombie)."""
    pid_text, _, started = token.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    if not Path("/proc/self/stat").exists():  # no /proc: only the pid can tell
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and (not started or fields[19] == started)
