"""Tidy tables from a run directory (or every job of a sweep), one row per thing.

Read only from what a run wrote to disk: ``events.sqlite`` (opened read-only with ``sqlite3``),
``.hydra/config.yaml`` when the event log holds no config, and ``arms/<arm>/submissions.git`` for
relays. Nothing here imports ``runner``. Every table starts with ``run_id`` and ``seed`` so the
jobs of a sweep stack into one table. Times are Unix seconds (``*_at``) and seconds since the
run started (``t_*_s``). Every table that shows agents carries ``role``, ``agent_kind`` (which says
``scripted (no model)`` for scripted agents) and ``scripted``. Rows are sorted by the explicit keys
named below, so building twice gives byte-identical CSV files.

Tables and columns:

``evaluations`` (by run_id, job_id): run_id, seed, arm, agent, role, agent_kind, scripted, job_id,
    submission_id, commit, verdict, reason, detail, score (the task kind's metric, named in
    ``metric``, counted in ``unit``: the run's ``meta["metric"]``, ``judge.kinds.Metric``),
    metric, unit, baseline_score (the same evaluation's baseline), x_baseline (how many times
    better than that baseline, > 1 better, whatever the metric's direction), b1_ratio,
    tokens_correct (True: the judge found every token correct, i.e. a PASS or a WRONG it flagged
    ``tokens_correct``; False: a token mismatch; empty: tokens not checked), near_tie,
    b1_unresolved, pseudo_agent (the runner's own evaluation: ``champion``, ``rejudge`` or
    ``baseline`` re-judgements, never an agent's work; an older run's ``confirm`` reads as
    ``rejudge``), attempts, enqueued_at, started_at,
    finished_at, t_enqueued_s, t_start_s, t_end_s, duration_s (judge wall time, ``finished_at -
    started_at``), queue_wait_s, settings_hash (the judge settings it was judged under,
    ``judge.settings.settings_hash``; empty in a log made before evaluations recorded it),
    duplicate_of (the earlier job whose verdict this one reuses, the same git ``tree``:
    ``judge.duplicates``; empty: judged itself), tree (the candidate's git tree id as the judge
    read it; empty in older logs), ttft_ms, itl_ms, requests_s, baseline_ttft_ms (a server
    task's median time to first token, inter-token latency and requests/s at the headline
    concurrency, and the same evaluation's baseline's time to first token, as the judge's load
    generator measured them; empty for other kinds).
``submissions`` (by run_id, submission_id): run_id, seed, arm, agent, role, agent_kind, scripted,
    submission_id, request_id, commit, message, at, t_s, job_id, verdict (``not evaluated`` when the
    judge never scored it), reason, score, metric, unit, x_baseline, t_verdict_s.
``messages`` (by run_id, message_id): run_id, seed, arm, message_id, author, role, agent_kind,
    scripted, kind, at, t_s, text, ref_commit (``refs.commit`` if any), refs (JSON), request_id.
``tokens`` (by run_id, token_id): run_id, seed, arm, agent, role, agent_kind, scripted, token_id,
    at, t_s, model, input, cache_read, cache_write, output, reasoning, cost_estimate, source.
``lifecycle`` (by run_id, event_id): run_id, seed, arm, agent, role, agent_kind, scripted, event_id,
    at, t_s, event, reason, code, restarts, detail (JSON).
``arms`` (by run_id, arm order of the run; built by ``analysis.arms_table``): the per-arm row
    projected on the ``arms`` surface: its columns, in order, with their meanings and the other
    surfaces that show them (``summary.csv``, the report, the view) are defined once, in
    ``runrecord.row.ROW``. It keeps every digit; ``summary.csv`` rounds the columns that have
    digits there.
``model_calls`` (by run_id, call_id): run_id, seed, arm, agent, role, agent_kind, scripted,
    call_id, method, path, status (what the seat got back), upstream_status (what the vendor
    answered; empty when it never did), error, failed (the endpoint's failure: 408, 409, 425,
    429, 5xx, unreachable or a broken stream, per ``analysis.model_calls.failed``), started_at,
    first_byte_at, finished_at, t_start_s, t_end_s, duration_s (``finished_at - started_at``),
    bytes_up, bytes_down, retry_after, model, input, cache_read, cache_write, output,
    reasoning (the usage the vendor's response reported, per ``analysis.wire_usage``; empty
    when it reported none), queued_s (seconds the call waited at the proxy for its seat's
    fair-use slot, ``isolation.fair_use``; 0 without limits or in older logs): every HTTP call
    a seat made through the model proxy (``isolation.model_proxy``); a call without a seat
    token has an empty arm and agent. Empty for
    a run without the proxy (its event log may have no ``model_calls`` table at all).
``relays`` (by run_id, arm, to_job, from_job; see ``analysis._git``): run_id, seed, arm, to_job,
    to_agent, to_commit, to_score, to_t_end_s, from_job, from_agent, from_commit, from_score,
    from_t_end_s, to_agent_kind, from_agent_kind: a PASS and the other agent's PASS it first built
    on.

``analysis.report`` adds ``dead_ends`` (columns in ``analysis.report.DEAD_END_COLUMNS``). Files are
written through Arrow: Parquet keeps the dtypes; in the CSV strings are quoted, booleans are
``true``/``false`` and a missing value is an empty field.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import multiprocessing.context
import os
import re
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from analysis.arms_table import ARMS_COLUMNS, arms_table
from judge import Metric, run_metric
from runrecord import (
    LEGACY_AGENTS,
    OPTIONAL_TABLES,
    PSEUDO_AGENTS,
    SCHEMA,
    Phase,
    SeatRecord,
    agent_kind_label,
    agents_phase,
    busy_seconds,
    failed,
    rejudging_started_at,
    run_config,
    seat_outages,
    seat_records,
    start_commit,
)

__all__ = [
    "COLUMNS",
    "TABLES",
    "RunInfo",
    "SeatRecord",
    "Tables",
    "agent_kind_label",
    "build_tables",
    "is_run_dir",
    "is_sweep_dir",
    "load_run",
    "load_sweep",
    "read_run_info",
    "sweep_jobs",
    "write_table",
    "write_tables",
]

TABLES = ("evaluations", "submissions", "messages", "tokens", "lifecycle", "model_calls", "arms")

_AGENT = ["role", "agent_kind", "scripted"]


def phase_busy_s(evaluations: pd.DataFrame, run_seconds: float) -> float:
    """Judge seconds spent inside the agents' phase ``[0, run_seconds]``: each evaluation's
    ``[t_start_s, t_end_s]`` clipped to it (``runrecord.busy_seconds``, so busy <= 100%)."""
    starts, ends = evaluations["t_start_s"].astype(float), evaluations["t_end_s"].astype(float)
    spans = zip(starts, ends, strict=True)
    return float(busy_seconds(spans, Phase(0.0, run_seconds)))


def _names(text: str) -> list[str]:
    """Column names written as one space-separated string: long lists stay readable."""
    return text.split()


# Column order of every table (documented in the module docstring).
COLUMNS: dict[str, list[str]] = {
    "evaluations": _names(
        "run_id seed arm agent role agent_kind scripted job_id submission_id commit verdict "
        "reason detail score metric unit baseline_score x_baseline b1_ratio tokens_correct "
        "near_tie "
        "b1_unresolved pseudo_agent attempts enqueued_at started_at finished_at t_enqueued_s "
        "t_start_s t_end_s duration_s queue_wait_s settings_hash duplicate_of tree "
        "ttft_ms itl_ms requests_s baseline_ttft_ms"
    ),
    "submissions": _names(
        "run_id seed arm agent role agent_kind scripted submission_id request_id commit message "
        "at t_s job_id verdict reason score metric unit x_baseline t_verdict_s"
    ),
    "messages": _names(
        "run_id seed arm message_id author role agent_kind scripted kind at t_s text ref_commit "
        "refs request_id"
    ),
    "tokens": _names(
        "run_id seed arm agent role agent_kind scripted token_id at t_s model input cache_read "
        "cache_write output reasoning cost_estimate source"
    ),
    "lifecycle": _names(
        "run_id seed arm agent role agent_kind scripted event_id at t_s event reason code "
        "restarts detail"
    ),
    "arms": ARMS_COLUMNS,  # analysis.arms_table builds it
    "model_calls": _names(
        "run_id seed arm agent role agent_kind scripted call_id method path status "
        "upstream_status error failed started_at first_byte_at finished_at t_start_s t_end_s "
        "duration_s bytes_up bytes_down retry_after model input cache_read cache_write output "
        "reasoning queued_s"
    ),
}

_SORT = {
    "evaluations": ["run_id", "job_id"],
    "submissions": ["run_id", "submission_id"],
    "messages": ["run_id", "message_id"],
    "tokens": ["run_id", "token_id"],
    "lifecycle": ["run_id", "event_id"],
    "model_calls": ["run_id", "call_id"],
    "relays": ["run_id", "arm", "to_job", "from_job"],
}

# One SQL read per table; JSON fields are pulled out by SQLite (C) rather than json.loads per row,
# which is what keeps a million-event log within seconds.
_SQL = {
    "evaluations": """
        SELECT arm, agent, job_id, submission_id, commit_sha AS "commit", verdict, reason, detail,
            {score} AS score,
            {baseline_score} AS baseline_score,
            json_extract(metrics, '$.x_baseline') AS x_baseline,
            json_extract(metrics, '$.b1_ratio') AS b1_ratio,
            json_extract(flags, '$.tokens_correct') AS flag_tokens_correct,
            json_extract(flags, '$.near_tie') AS near_tie,
            json_extract(flags, '$.b1_unresolved') AS b1_unresolved,
            json_extract(metrics, '$.ttft_ms') AS ttft_ms,
            json_extract(metrics, '$.itl_ms') AS itl_ms,
            json_extract(metrics, '$.requests_s') AS requests_s,
            json_extract(metrics, '$.baseline_ttft_ms') AS baseline_ttft_ms,
            attempts, enqueued_at, started_at, finished_at, queue_wait_s, settings_hash,
            duplicate_of, tree
        FROM evaluations ORDER BY job_id""",
    "submissions": """
        SELECT s.arm, s.agent, s.id AS submission_id, s.request_id, s.commit_sha AS "commit",
            s.message, s."at", s.job_id, e.verdict, e.reason,
            {score} AS score,
            json_extract(e.metrics, '$.x_baseline') AS x_baseline, e.finished_at
        FROM submissions s LEFT JOIN evaluations e ON e.job_id = s.job_id ORDER BY s.id""",
    "messages": """
        SELECT arm, id AS message_id, author, kind, "at", text,
            json_extract(refs, '$.commit') AS ref_commit, refs, request_id
        FROM messages ORDER BY id""",
    "tokens": """
        SELECT arm, agent, id AS token_id, "at", model, input, cache_read, cache_write, output,
            reasoning, cost_estimate, source
        FROM tokens ORDER BY id""",
    "lifecycle": """
        SELECT arm, agent, id AS event_id, "at", event,
            json_extract(detail, '$.reason') AS reason, json_extract(detail, '$.code') AS code,
            json_extract(detail, '$.restarts') AS restarts, detail
        FROM lifecycle ORDER BY id""",
    "model_calls": """
        SELECT arm, agent, id AS call_id, method, path, status, upstream_status, error,
            started_at, first_byte_at, finished_at, bytes_up, bytes_down, retry_after, model,
            input, cache_read, cache_write, output, reasoning, queued_s
        FROM model_calls ORDER BY id""",
}


def _read_columns(name: str) -> list[str]:
    """The columns ``_SQL`` reads from a table, as a log made today has it (the schema is
    ``runrecord.schema``'s: run on an empty copy, so no list of names is written twice)."""
    with closing(sqlite3.connect(":memory:")) as db:
        db.executescript(SCHEMA)
        return [d[0] for d in db.execute(_SQL[name].format(score="NULL")).description]


# Tables an older event log may lack (written before the model proxy existed): read as empty,
# with the columns their read gives.
_OPTIONAL = {name: _read_columns(name) for name in OPTIONAL_TABLES}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: From this many rows on, two processes read the event log (see ``_read_all``).
PARALLEL_ROWS = 200_000


@dataclass
class RunInfo:
    """What one run's metadata says, with the derived times every table uses."""

    run_dir: Path
    run_id: str
    seed: int | None
    experiment: str
    task: str
    status: str
    started_at: float
    deadline: float | None
    ended_at: float | None
    end_at: float
    # When the runner began re-judging each arm's best and start, if it did.
    rejudging_at: float | None
    budget_minutes: float | None
    agent_kind: str
    scripted: bool
    isolation: str
    arms: list[str]
    seats: list[SeatRecord]
    config: dict[str, Any]
    meta: dict[str, Any]
    # What the scores count (name, unit, label, direction): judge.kinds.run_metric.
    metric: Metric
    # The agents' phase: the start to the re-judging (or to the end): runrecord.agents_phase.
    phase: Phase

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def proxied(self) -> bool:
        """True when the seats reached their model through the run's model proxy."""
        return bool((self.meta.get("client") or {}).get("proxy"))

    @property
    def run_seconds(self) -> float:
        """The agents' part of the run: start to the re-judging (or to the end)."""
        return self.phase.seconds

    def start_commit(self, arm: str) -> str | None:
        """The commit the arm started from (``arm.json``; else the run's ``start_commit``)."""
        return start_commit(self.run_dir, arm, self.meta)

    @property
    def target_x_baseline(self) -> float | None:
        spec = (self.config.get("task") or {}).get("spec") or {}
        value = spec.get("target_x_baseline")
        return float(value) if value is not None else None


@dataclass
class Tables:
    """The seven tidy tables of one run or a whole sweep, with each run's facts."""

    runs: list[RunInfo]
    evaluations: pd.DataFrame
    submissions: pd.DataFrame
    messages: pd.DataFrame
    tokens: pd.DataFrame
    lifecycle: pd.DataFrame
    model_calls: pd.DataFrame
    arms: pd.DataFrame
    # One row per relay (see ``analysis._git``); empty when git was not asked or found nothing.
    relays: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Jobs of a sweep that left no event log at all (they failed before the run started).
    missing: list[Path] = field(default_factory=list)

    def items(self) -> Iterator[tuple[str, pd.DataFrame]]:
        for name in TABLES:
            yield name, getattr(self, name)


# -- finding runs ----------------------------------------------------------------------------


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: How deep under a sweep folder job folders are looked for (an override with ``/`` nests one
#: level per slash); a shared folder such as /tmp is never walked to the bottom.
SWEEP_DEPTH = 4


def is_run_dir(path: Path) -> bool:
    """True if ``path`` holds a run's event log (a SQLite file, not just any ``events.sqlite``)."""
    db = Path(path) / "events.sqlite"
    try:
        with db.open("rb") as fh:
            return db.is_file() and fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _subdirs(folder: Path) -> list[Path]:
    """Visible sub-folders, never through a symlink, nothing for a folder we may not read."""
    try:
        with os.scandir(folder) as entries:
            return [
                Path(e.path)
                for e in entries
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def _is_job(path: Path) -> bool:
    return (
        (path / "events.sqlite").is_file()
        or (path / ".hydra" / "config.yaml").is_file()
        or (path / "job.json").is_file()
    )


def sweep_jobs(path: Path) -> list[Path]:
    """The job folders of a Hydra multirun directory, sorted (empty if ``path`` is no sweep).

    A job folder holds an event log, a ``.hydra/config.yaml`` or the runner's ``job.json``; an
    override with a ``/`` nests it deeper, so folders are walked down to the first job folder.
    """
    path = Path(path)
    if not path.is_dir() or is_run_dir(path):
        return []
    jobs = []
    stack = [(p, 1) for p in _subdirs(path)]
    while stack:
        folder, depth = stack.pop()
        if _is_job(folder):
            jobs.append(folder)
        elif folder.name != "analysis" and depth < SWEEP_DEPTH:  # our own output is no job
            stack.extend((p, depth + 1) for p in _subdirs(folder))
    if not jobs or not ((path / "multirun.yaml").is_file() or any(map(is_run_dir, jobs))):
        return []
    return sorted(jobs)


def is_sweep_dir(path: Path) -> bool:
    """True if ``path`` is a sweep: job folders under a ``multirun.yaml`` (or with event logs)."""
    return bool(sweep_jobs(path))


@contextmanager
def _read_only(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Open an event log for reading without ever writing to it (or to its folder)."""
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        db.execute("SELECT 1 FROM meta LIMIT 1")
    except sqlite3.OperationalError:
        # A WAL file in a read-only folder whose -shm cannot be created: read it as a snapshot.
        db = sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)
    with closing(db):
        yield db


def read_run_info(run_dir: Path) -> RunInfo:
    """The metadata of one run, with its end time (``ended_at`` or, unfinished, the last event)."""
    run_dir = Path(run_dir)
    with _read_only(run_dir / "events.sqlite") as db:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
        last = db.execute(
            "SELECT max(m) FROM (SELECT max(finished_at) AS m FROM evaluations"
            ' UNION ALL SELECT max("at") FROM submissions UNION ALL SELECT max("at") FROM'
            ' messages UNION ALL SELECT max("at") FROM lifecycle UNION ALL'
            ' SELECT max("at") FROM tokens)'
        ).fetchone()[0]
    return run_info(run_dir, meta, last)


def run_info(run_dir: Path, meta: dict[str, Any], last: float | None) -> RunInfo:
    """A run's facts from its ``meta`` rows and the time of its last event (``None``: no event
    yet); ``analysis.view`` passes the last event it has read instead of asking SQLite again."""
    config = run_config(run_dir, meta)
    started = float(meta.get("started_at") or last or 0.0)
    ended = meta.get("ended_at")
    end_at = float(ended) if ended is not None else float(last or started)
    kind = str(meta.get("agent_kind") or (config.get("agent") or {}).get("kind") or "unknown")
    scripted = bool(meta.get("scripted", (config.get("agent") or {}).get("scripted", False)))
    arms = list(meta.get("arms") or (config.get("arms") or {}).keys())
    budget = meta.get("budget_minutes", (config.get("budget") or {}).get("minutes"))
    seed = meta.get("seed", config.get("seed"))
    return RunInfo(
        run_dir=run_dir,
        run_id=str(meta.get("run_id") or run_dir.name),
        seed=int(seed) if seed is not None else None,
        experiment=str(meta.get("experiment") or config.get("experiment") or "unknown"),
        task=str(meta.get("task") or (config.get("task") or {}).get("name") or "unknown"),
        status=str(meta.get("status") or "unknown"),
        started_at=started,
        deadline=float(meta["deadline"]) if meta.get("deadline") is not None else None,
        ended_at=float(ended) if ended is not None else None,
        end_at=end_at,
        rejudging_at=rejudging_started_at(meta),
        budget_minutes=float(budget) if budget is not None else None,
        agent_kind=agent_kind_label(kind, scripted),
        scripted=scripted,
        isolation=str(
            meta.get("isolation") or (config.get("isolation") or {}).get("backend") or "unknown"
        ),
        arms=arms,
        seats=seat_records(meta, config, kind, scripted),
        config=config,
        meta=meta,
        metric=run_metric({**meta, "config": config}),
        phase=agents_phase({**meta, "started_at": started, "ended_at": end_at}, last),
    )


# -- building the tables ---------------------------------------------------------------------


# Columns that are numbers even when a table is empty or a column holds only NULLs (pandas would
# make them objects, and arithmetic on them would fail).
_NUMERIC = set(
    _names(
        "at enqueued_at started_at finished_at queue_wait_s score baseline_score x_baseline "
        "b1_ratio flag_tokens_correct near_tie b1_unresolved attempts job_id submission_id "
        "message_id token_id event_id input cache_read cache_write output reasoning "
        "cost_estimate code restarts call_id status upstream_status first_byte_at bytes_up "
        "bytes_down ttft_ms itl_ms requests_s baseline_ttft_ms queued_s"
    )
)


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    for col in df.columns:
        if col in _NUMERIC and df[col].dtype == object:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df


def _json_value(column: str, keys: tuple[str, ...]) -> str:
    """SQL for the first of ``keys`` present in the JSON ``column`` (names that are not plain
    identifiers are skipped: they come from a run's record, never into SQL text)."""
    paths = [f"json_extract({column}, '$.{k}')" for k in keys if _IDENTIFIER.fullmatch(k)]
    return f"COALESCE({', '.join(paths)})" if len(paths) > 1 else paths[0]


def _read(
    db: sqlite3.Connection, name: str, metric: Metric, where: str = "", params: tuple = ()
) -> pd.DataFrame:
    """One table's rows (``where``: an SQL condition on them, for ``analysis.view``'s reads of
    only the rows it has not seen)."""
    sql = _SQL[name]
    if where:
        sql = sql.replace(" ORDER BY ", f" WHERE {where} ORDER BY ")
    if name in ("evaluations", "submissions"):
        column = "metrics" if name == "evaluations" else "e.metrics"
        sql = sql.format(
            score=_json_value(column, metric.score_keys()),
            baseline_score=_json_value(column, metric.baseline_keys()),
        )
    if name == "evaluations":
        have = {row[1] for row in db.execute("PRAGMA table_info(evaluations)")}
        if "settings_hash" not in have:  # a log made before evaluations recorded their settings
            sql = sql.replace("queue_wait_s, settings_hash", "queue_wait_s, '' AS settings_hash")
        if "duplicate_of" not in have:  # ... or before identical trees were recognised
            sql = sql.replace("duplicate_of, tree", "NULL AS duplicate_of, '' AS tree")
    if name == "model_calls":
        have = {row[1] for row in db.execute("PRAGMA table_info(model_calls)")}
        if "queued_s" not in have:  # a log made before the proxy's fair use
            sql = sql.replace("reasoning, queued_s", "reasoning, 0.0 AS queued_s")
    cursor = db.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return _numeric(pd.DataFrame.from_records(cursor.fetchall(), columns=names))


def _read_some(db_path: Path, names: list[str], metric: Metric) -> dict[str, pd.DataFrame]:
    with _read_only(db_path) as db:
        return {name: _read(db, name, metric) for name in names}


def _missing(names: list[str]) -> dict[str, pd.DataFrame]:
    """Empty frames for the optional tables an event log lacks."""
    return {name: _numeric(pd.DataFrame(columns=_OPTIONAL[name])) for name in names}


def _read_all(db_path: Path, metric: Metric) -> dict[str, pd.DataFrame]:
    """Every table's rows, one SQL read each; a large log is read by two processes at once.

    Turning SQLite rows into Python objects is most of the cost and holds the GIL, so threads
    do not help; a forked helper reads about half the rows while this process reads the rest.
    """
    with _read_only(db_path) as db:
        present = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        absent = [n for n in _OPTIONAL if n not in present]
        sizes = {
            n: db.execute(f"SELECT count(*) FROM {n}").fetchone()[0]
            for n in _SQL
            if n not in absent
        }
    context = _fork_context()
    if sum(sizes.values()) < PARALLEL_ROWS or context is None:
        return {**_read_some(db_path, list(sizes), metric), **_missing(absent)}
    mine: list[str] = []
    theirs: list[str] = []
    for name in sorted(sizes, key=lambda n: -sizes[n]):  # greedy: the lighter share gets it
        share = mine if sum(sizes[n] for n in mine) <= sum(sizes[n] for n in theirs) else theirs
        share.append(name)
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            helper = pool.submit(_read_some, db_path, theirs, metric)
            frames = _read_some(db_path, mine, metric)
            frames.update(helper.result())
    except (OSError, BrokenProcessPool):
        frames = _read_some(db_path, list(sizes), metric)
    return {**frames, **_missing(absent)}


def _fork_context() -> multiprocessing.context.BaseContext | None:
    if (os.cpu_count() or 1) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork")


def _with_agents(df: pd.DataFrame, info: RunInfo, key: str = "agent") -> pd.DataFrame:
    """Add run_id, seed, role, agent_kind and scripted by (arm, agent)."""
    seats = pd.DataFrame(
        [(s.arm, s.agent, s.role, s.agent_kind, s.scripted) for s in info.seats]
        + [
            (arm, name, name, kind, False)
            for arm in info.arms
            for name, kind in PSEUDO_AGENTS.items()
        ],
        columns=["arm", key, *_AGENT],
    ).drop_duplicates(["arm", key])
    out = df.merge(seats, on=["arm", key], how="left", sort=False)
    # An author the seats do not know (e.g. the runner itself) is shown as such, never guessed.
    out["role"] = out["role"].fillna("unknown")
    out["agent_kind"] = out["agent_kind"].fillna("unknown")
    out["scripted"] = out["scripted"].fillna(False).astype(bool)
    out.insert(0, "seed", pd.array([info.seed] * len(out), dtype="Int64"))
    out.insert(0, "run_id", info.run_id)
    return out


def _flag(values: pd.Series) -> pd.Series:
    return values.fillna(0).astype(int).astype(bool)


def _current_agents(raw: pd.DataFrame) -> pd.DataFrame:
    """Pseudo-agents under today's names (an older run's ``confirm`` is ``rejudge``)."""
    return raw.assign(agent=raw["agent"].replace(dict(LEGACY_AGENTS)))


# A server task's latencies at the headline concurrency (judge.kinds.server; empty otherwise).
_LATENCY = ("ttft_ms", "itl_ms", "requests_s", "baseline_ttft_ms")


def _evaluations(raw: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    df = _with_agents(_current_agents(raw), info)
    t0 = info.started_at
    verdict = df["verdict"].astype(str)
    tokens = pd.array([pd.NA] * len(df), dtype="boolean")
    tokens[(verdict == "PASS").to_numpy()] = True
    tokens[(df["reason"].isin(["mismatch", "alternating"]) & (verdict == "WRONG")).to_numpy()] = (
        False
    )
    flagged = df["flag_tokens_correct"].notna().to_numpy()
    tokens[flagged] = df.loc[flagged, "flag_tokens_correct"].astype(int).astype(bool).to_numpy()
    df["tokens_correct"] = tokens
    df["near_tie"] = _flag(df["near_tie"])
    df["b1_unresolved"] = _flag(df["b1_unresolved"])
    df["pseudo_agent"] = df["agent"].isin(list(PSEUDO_AGENTS))
    df["settings_hash"] = df["settings_hash"].fillna("").astype(str)
    df["duplicate_of"] = pd.to_numeric(df["duplicate_of"]).astype("Int64")
    df["tree"] = df["tree"].fillna("").astype(str)
    df["t_enqueued_s"] = df["enqueued_at"] - t0
    df["t_start_s"] = df["started_at"] - t0
    df["t_end_s"] = df["finished_at"] - t0
    df["duration_s"] = df["finished_at"] - df["started_at"]
    df["submission_id"] = df["submission_id"].astype("Int64")
    for col in ("score", "baseline_score", "x_baseline", "b1_ratio", *_LATENCY):
        df[col] = df[col].astype(float)
    df["metric"], df["unit"] = info.metric.name, info.metric.unit
    return df[COLUMNS["evaluations"]]


def _submissions(raw: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    df = _with_agents(_current_agents(raw), info)
    df["t_s"] = df["at"] - info.started_at
    df["verdict"] = df["verdict"].fillna("not evaluated")
    df["reason"] = df["reason"].fillna("")
    df["t_verdict_s"] = df["finished_at"].astype(float) - info.started_at
    df["job_id"] = df["job_id"].astype("Int64")
    for col in ("score", "x_baseline"):
        df[col] = df[col].astype(float)
    df["metric"], df["unit"] = info.metric.name, info.metric.unit
    return df[COLUMNS["submissions"]]


def _messages(raw: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    df = _with_agents(raw, info, key="author")
    df["t_s"] = df["at"] - info.started_at
    return df[COLUMNS["messages"]]


def _tokens(raw: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    df = _with_agents(raw, info)
    df["t_s"] = df["at"] - info.started_at
    df["cost_estimate"] = df["cost_estimate"].astype(float)
    return df[COLUMNS["tokens"]]


def _lifecycle(raw: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    df = _with_agents(raw, info)
    df["t_s"] = df["at"] - info.started_at
    df["reason"] = df["reason"].astype(object).where(df["reason"].notna(), None)
    df["code"] = pd.to_numeric(df["code"], errors="coerce").astype("Int64")
    df["restarts"] = pd.to_numeric(df["restarts"], errors="coerce").astype("Int64")
    return df[COLUMNS["lifecycle"]]


_USAGE = ("input", "cache_read", "cache_write", "output", "reasoning")


def _model_calls(raw: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    df = _with_agents(raw, info)
    # The rule itself (analysis.model_calls.failed), row by row: calls are few.
    df["failed"] = np.array([failed(call) for call in raw.to_dict("records")], dtype=bool)
    df["t_start_s"] = df["started_at"] - info.started_at
    df["t_end_s"] = df["finished_at"] - info.started_at
    df["duration_s"] = df["finished_at"] - df["started_at"]
    for col in ("call_id", "status", "upstream_status", "bytes_up", "bytes_down", *_USAGE):
        df[col] = df[col].astype("Int64")
    for col in ("method", "path", "error", "retry_after", "model"):
        df[col] = df[col].astype("str")  # typed even when empty
    df["queued_s"] = df["queued_s"].astype(float).fillna(0.0)
    return df[COLUMNS["model_calls"]]


def load_run(run_dir: Path, *, git: bool = True) -> Tables:
    """Build the seven tables of one run from its directory alone.

    Args:
        run_dir: A run directory (holds ``events.sqlite``).
        git: Count relays from ``arms/<arm>/submissions.git`` (one ``git log`` per arm).

    Returns:
        The tables, with the run's facts in ``runs``.
    """
    run_dir = Path(run_dir)
    info = read_run_info(run_dir)
    raw = _read_all(run_dir / "events.sqlite", info.metric)
    rows = {name: derive(raw[name], info) for name, derive in DERIVE.items()}
    return assemble_run(info, rows, raw["model_calls"], git=git)


def assemble_run(
    info: RunInfo, rows: dict[str, pd.DataFrame], raw_calls: pd.DataFrame, *, git: bool = True
) -> Tables:
    """One run's tables from its row tables (``DERIVE``'s, by name) and its raw model calls:
    the relays and the arms table, which look at every row (``analysis.view`` keeps the row
    tables between reads and calls this on them)."""
    run_dir = info.run_dir
    evaluations, submissions = rows["evaluations"], rows["submissions"]
    messages, tokens = rows["messages"], rows["tokens"]
    lifecycle, model_calls = rows["lifecycle"], rows["model_calls"]
    # Outages only where the seats went through the proxy (as runner/summary.py counts them).
    outages = seat_outages(raw_calls.to_dict("records")) if info.proxied else None
    from analysis._git import RELAY_COLUMNS, relay_table

    relays = None
    frames = [pd.DataFrame(columns=RELAY_COLUMNS)]
    if git:
        relays = {}
        for arm in info.arms:
            repo = run_dir / "arms" / arm / "submissions.git"
            if repo.is_dir():
                ours = evaluations[evaluations["arm"] == arm]
                edges = relay_table(repo, ours, start=info.start_commit(arm))
                relays[arm] = int(edges["to_job"].nunique()) if len(edges) else 0
                frames.append(edges)
    edges = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
    edges.insert(0, "seed", pd.array([info.seed] * len(edges), dtype="Int64"))
    edges.insert(0, "run_id", info.run_id)
    kinds = {(s.arm, s.agent): s.agent_kind for s in info.seats}
    for side in ("to", "from"):
        edges[f"{side}_agent_kind"] = [
            kinds.get(key, "unknown")
            for key in zip(edges["arm"], edges[f"{side}_agent"], strict=True)
        ]
    arms = arms_table(
        info, evaluations, submissions, messages, tokens, lifecycle, relays, outages, model_calls
    )
    return Tables(
        relays=edges,
        runs=[info],
        evaluations=evaluations,
        submissions=submissions,
        messages=messages,
        tokens=tokens,
        lifecycle=lifecycle,
        model_calls=model_calls,
        arms=arms,
    )


#: The row tables, each derived from its raw read and the run's facts alone, row by row.
DERIVE = {
    "evaluations": _evaluations,
    "submissions": _submissions,
    "messages": _messages,
    "tokens": _tokens,
    "lifecycle": _lifecycle,
    "model_calls": _model_calls,
}


def load_sweep(sweep_dir: Path, *, git: bool = True) -> Tables:
    """Stack the tables of every job of a sweep (jobs without an event log are listed apart)."""
    loaded = []
    missing = []
    for job in sweep_jobs(Path(sweep_dir)):
        if is_run_dir(job):
            loaded.append(load_run(job, git=git))
        else:
            missing.append(job)
    if not loaded:
        raise FileNotFoundError(f"{sweep_dir}: no job of this sweep left an event log")
    return stack_runs(loaded, missing)


def stack_runs(loaded: list[Tables], missing: list[Path]) -> Tables:
    """The runs' tables stacked into one sweep's, in seed order."""
    # Seed then run id: the order a reader scans a sweep in, stable across rebuilds.
    loaded.sort(
        key=lambda t: (t.runs[0].seed if t.runs[0].seed is not None else math.inf, t.runs[0].run_id)
    )
    frames = {
        name: pd.concat([getattr(t, name) for t in loaded], ignore_index=True)
        for name in (*TABLES, "relays")
    }
    return Tables(runs=[t.runs[0] for t in loaded], missing=missing, **frames)


def build_tables(path: Path, *, git: bool = True) -> Tables:
    """The tables of a run directory or of every job of a sweep directory.

    Raises:
        FileNotFoundError: ``path`` is neither a run nor a sweep.
    """
    path = Path(path)
    if is_run_dir(path):
        return load_run(path, git=git)
    if is_sweep_dir(path):
        return load_sweep(path, git=git)
    raise FileNotFoundError(
        f"{path}: neither a run directory (no events.sqlite) nor a sweep (no multirun.yaml"
        " with job folders)"
    )


def write_tables(tables: Tables, out_dir: Path) -> list[Path]:
    """Write every table as Parquet and CSV into ``out_dir``; returns the paths written.

    Rows are sorted by each table's keys, so the same input gives byte-identical files. Both
    files come from one Arrow table through Arrow's own writers (the CSV: strings quoted,
    booleans ``true``/``false``, missing values empty), which run outside the GIL and several
    times faster than pandas' CSV writer; the tables are written in parallel threads.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [*tables.items(), ("relays", tables.relays)]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        done = pool.map(lambda job: write_table(job[1], out_dir, job[0]), jobs)
        return [path for pair in done for path in pair]


def write_table(df: pd.DataFrame, out_dir: Path, name: str) -> tuple[Path, Path]:
    """One table as ``name.parquet`` and ``name.csv`` in ``out_dir`` (sorted by its keys)."""
    if name in _SORT and set(_SORT[name]) <= set(df.columns):
        df = df.sort_values(_SORT[name], kind="stable", ignore_index=True)
    table = pa.Table.from_pandas(df, preserve_index=False)
    parquet, csv = out_dir / f"{name}.parquet", out_dir / f"{name}.csv"
    pq.write_table(table, parquet)
    pacsv.write_csv(table, csv, write_options=pacsv.WriteOptions(quoting_style="needed"))
    return parquet, csv


def finite_or_none(value: Any) -> float | None:
    """A float for a finite number; None for NA, NaN and infinities (what tables print as -)."""
    if value is None or value is pd.NA:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None
