"""A run's tables kept between reads: each read takes only the rows the event log gained.

``analysis.tables.build_tables`` reads every row of a run each time (seconds for a million
events). The view asks again every couple of seconds while the run goes on, so it keeps, per run,
the row tables it built (``analysis.tables.DERIVE``: each row derived from its raw read and the
run's facts alone) with the highest id it read of each event table, and on the next read asks
SQLite only for rows past it (read-only, beside the runner's WAL writer). What the runner may
change after writing a row is read again: a submission's ``job_id`` and verdict (until it has
its evaluation), the seats' token rows (the runner replaces them), an evaluation of a job below
the highest one read (a re-queued job finishing late), and the run's ``meta``. When the file is
another file (its device and inode moved), rows went missing, or the facts the rows are derived
from changed (start time, seats, arms, metric), the run is read in full again. The relays and the
arms table, which look at every row, are then built by ``analysis.tables.assemble_run`` as a full
read builds them: the tables are the same either way (tests compare them).
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.tables import (
    _OPTIONAL,
    DERIVE,
    RunInfo,
    Tables,
    _read,
    _read_all,
    _read_only,
    assemble_run,
    is_run_dir,
    run_info,
    stack_runs,
    sweep_jobs,
)

__all__ = ["Changes", "LiveRun", "LiveTables"]

#: The id column of each event table, as ``analysis.tables`` names it, and SQLite's own name.
_IDS = {
    "evaluations": ("job_id", "job_id"),
    "submissions": ("submission_id", "s.id"),
    "messages": ("message_id", "id"),
    "tokens": ("token_id", "id"),
    "lifecycle": ("event_id", "id"),
    "model_calls": ("call_id", "id"),
}
#: The time column of each row table the run's last event is taken from (as read_run_info does).
_LAST = {
    "evaluations": "finished_at",
    "submissions": "at",
    "messages": "at",
    "lifecycle": "at",
    "tokens": "at",
}


@dataclass
class Changes:
    """What one read found: the rows added or changed per row table (None where none)."""

    rows: dict[str, pd.DataFrame | None] = field(default_factory=dict)
    #: True when the run was read in full (first read, or the kept rows could not be trusted).
    full: bool = False
    #: True when only the run's ``meta`` moved (its status, end, re-judging).
    meta: bool = False

    def __bool__(self) -> bool:
        return self.full or self.meta or any(df is not None for df in self.rows.values())


def _ids_json(values: Any) -> str:
    return json.dumps([int(v) for v in values])


def _key(info: RunInfo) -> tuple:
    """What every derived row depends on: a change of any of it reads the run anew."""
    seats = [(s.arm, s.agent, s.role, s.agent_kind, s.scripted) for s in info.seats]
    return (
        info.run_id,
        info.seed,
        info.started_at,
        tuple(info.arms),
        tuple(seats),
        json.dumps(info.metric.to_dict(), sort_keys=True, default=str),
    )


def _same(a: Any, b: Any) -> bool:
    if pd.isna(a) or pd.isna(b):
        return bool(pd.isna(a) and pd.isna(b))
    return bool(a == b)


def _concat(have: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``have`` then ``new``, each column typed as one read of all the rows would type it.

    A column that is all NULL in one part reads as ``object`` there and as ``str`` (or a
    number) in the other: the joined column is inferred again, as a full read infers it.
    """
    both = pd.concat([have, new], ignore_index=True)
    for col in both.columns:
        if have[col].dtype != new[col].dtype and both[col].dtype == object:
            both[col] = both[col].infer_objects()
    return both


@dataclass(frozen=True)
class _Read:
    """One run as last read: everything :func:`analysis.tables.assemble_run` needs."""

    generation: int
    info: RunInfo
    rows: dict[str, pd.DataFrame]
    raw_calls: pd.DataFrame


@dataclass
class LiveRun:
    """One run directory's row tables as last read, and the tables assembled from them.

    :meth:`read` is cheap (the new rows); :meth:`assemble` (the relays and the arms table, over
    every row) is what a full build costs beyond the read, done only when asked.
    """

    run_dir: Path
    last: _Read | None = None
    identity: tuple[int, int] | None = None
    absent: frozenset[str] = frozenset()
    key: tuple | None = None
    _tables: tuple[int, Tables] | None = None

    def read(self) -> Changes:
        """Read what the event log gained since the last call.

        Returns:
            The rows added or changed (``full`` when everything was read again).
        """
        db_path = self.run_dir / "events.sqlite"
        st = os.stat(db_path)
        identity = (st.st_dev, st.st_ino)
        last = self.last
        with _read_only(db_path) as db:
            db.execute("BEGIN")  # one snapshot for every table read below
            meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
            present = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            absent = frozenset(n for n in _OPTIONAL if n not in present)
            # The highest id of each table (an index lookup) says whether rows came; a count
            # (a scan) only where rows may come below it (evaluations) or go (tokens).
            tops = {
                n: db.execute(f"SELECT max({_IDS[n][1].removeprefix('s.')}) FROM {n}").fetchone()[0]
                or 0
                for n in DERIVE
                if n not in absent
            }
            counts = {
                n: db.execute(f"SELECT count(*) FROM {n}").fetchone()[0]
                for n in ("evaluations", "tokens")
                if n not in absent
            }
            probe = run_info(self.run_dir, meta, None)
            fresh = (
                last is None
                or identity != self.identity
                or absent != self.absent
                or _key(probe) != self.key
                # Rows gone from a table the runner only appends to: another log.
                or any(tops[n] < _top(last.rows[n], _IDS[n][0]) for n in tops if n != "tokens")
                or counts.get("evaluations", 0) < len(last.rows["evaluations"])
            )
            raw = None if fresh else self._read_new(db, probe, tops, counts)
        generation = last.generation + 1 if last else 1
        if fresh:
            got = _read_all(db_path, probe.metric)
            rows = {name: derive(got[name], probe) for name, derive in DERIVE.items()}
            info = run_info(self.run_dir, meta, _last_event(rows))
            self.last = _Read(generation, info, rows, got["model_calls"])
            self.identity, self.absent, self.key = identity, absent, _key(info)
            return Changes(rows=dict(rows), full=True)
        rows, changed, raw_calls = self._merge(raw, probe)
        changes = Changes(rows=changed)
        if not changes:
            if meta == last.info.meta:
                return changes
            changes.meta = True
        info = run_info(self.run_dir, meta, _last_event(rows))
        self.last = _Read(generation, info, rows, raw_calls)
        return changes

    def assemble(self, *, git: bool = True) -> Tables:
        """The run's tables from the rows last read (kept until the next read changes them)."""
        last, done = self.last, self._tables
        if last is None:
            raise RuntimeError(f"{self.run_dir}: not read yet")
        if done is not None and done[0] == last.generation:
            return done[1]
        tables = assemble_run(last.info, last.rows, last.raw_calls, git=git)
        self._tables = (last.generation, tables)
        return tables

    def _read_new(
        self, db: sqlite3.Connection, info: RunInfo, tops: dict[str, int], counts: dict[str, int]
    ) -> dict[str, pd.DataFrame | None]:
        """Per table, the rows to add or replace (None where its count did not move)."""
        assert self.last is not None
        out: dict[str, pd.DataFrame | None] = {}
        for name in DERIVE:
            col, sql_id = _IDS[name]
            have = self.last.rows[name]
            if name in self.absent:
                out[name] = None
                continue
            if name == "tokens":  # replaced per seat by the runner: all of it, when it moved
                moved = counts[name] != len(have) or tops[name] != _top(have, col)
                out[name] = _read(db, name, info.metric) if moved else None
                continue
            top = _top(have, col)
            where, params = f"{sql_id} > ?", (top,)
            # Submissions the runner still completes: a job id set, then its evaluation.
            open_ = (
                have.loc[have["verdict"] == "not evaluated", col] if name == "submissions" else []
            )
            if len(open_):
                where = f"({where} OR s.id IN (SELECT value FROM json_each(?)))"
                params = (top, _ids_json(open_))
            elif tops[name] == top and (name != "evaluations" or counts[name] == len(have)):
                out[name] = None
                continue
            new = _read(db, name, info.metric, where, params)
            if name == "evaluations" and len(have) + len(new) != counts[name]:
                # A job below the highest read finished late: find which by id.
                known = set(have[col].tolist()) | set(new[col].tolist())
                ids = [j for (j,) in db.execute("SELECT job_id FROM evaluations") if j not in known]
                late = _read(db, name, info.metric, "job_id IN (SELECT value FROM json_each(?))",
                             (_ids_json(ids),))  # fmt: skip
                new = _concat(new, late) if len(new) else late
            out[name] = new
        return out

    def _merge(
        self, raw: dict[str, pd.DataFrame | None], info: RunInfo
    ) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame | None], pd.DataFrame]:
        """The row tables with the new rows in (replacing rows of the same id), the rows that
        changed, and the raw model calls."""
        assert self.last is not None
        rows: dict[str, pd.DataFrame] = {}
        changed: dict[str, pd.DataFrame | None] = {}
        raw_calls = self.last.raw_calls
        for name, derive in DERIVE.items():
            have, new = self.last.rows[name], raw[name]
            rows[name], changed[name] = have, None
            if new is None:
                continue
            col = _IDS[name][0]
            got = derive(new, info)
            if name == "tokens":
                rows[name], changed[name] = got, got
                continue
            top = _top(have, col)
            again = (got[col] <= top).to_numpy(bool)  # rows read before: open submissions
            if again.any():  # one read again unchanged is no change
                mine = have[have[col].isin(got.loc[again, col].tolist()).to_numpy(bool)]
                before = dict(zip(mine[col].tolist(), mine["job_id"].tolist(), strict=True))
                same = [
                    _same(before.get(i), j) and v == "not evaluated"
                    for i, j, v in zip(got[col], got["job_id"], got["verdict"], strict=True)
                ]
                got = got[~(np.array(same, dtype=bool) & again)].reset_index(drop=True)
                again = (got[col] <= top).to_numpy(bool)
            if not len(got):
                continue
            if name == "model_calls":
                raw_calls = _concat(raw_calls, new) if len(raw_calls) else new
            keep = have
            if again.any():  # replaced: the rows read before go, the new ones take their place
                keep = have[~have[col].isin(got.loc[again, col].tolist()).to_numpy(bool)]
            both = _concat(keep, got) if len(keep) else got
            if len(keep) and got[col].min() < keep[col].max():
                both = both.sort_values(col, kind="stable", ignore_index=True)
            rows[name], changed[name] = both, got
        return rows, changed, raw_calls


def _top(rows: pd.DataFrame, col: str) -> int:
    return int(rows[col].max()) if len(rows) else 0


def _last_event(rows: dict[str, pd.DataFrame]) -> float | None:
    """The time of the run's last event, as ``analysis.tables.read_run_info`` asks SQLite."""
    values = []
    for name, column in _LAST.items():
        col = rows[name][column].to_numpy(float)
        if len(col) and not np.isnan(col).all():
            values.append(float(np.nanmax(col)))
    return max(values) if values else None


@dataclass
class LiveTables:
    """The tables of a run or sweep directory kept between reads (one :class:`LiveRun` per
    run): :meth:`read` takes what the logs gained, :meth:`assemble` returns what
    :func:`analysis.tables.build_tables` would return for the files as read."""

    path: Path
    git: bool = True
    runs: dict[Path, LiveRun] = field(default_factory=dict)
    missing: list[Path] = field(default_factory=list)
    _tables: tuple[tuple, Tables] | None = None

    def read(self) -> Changes:
        """Read what every run's log gained; the rows of every run stacked, as a sweep's are.

        Raises:
            FileNotFoundError: ``path`` is neither a run nor a sweep (or none of its jobs has
                an event log yet).
        """
        path = Path(self.path)
        if is_run_dir(path):
            dirs, missing = [path], []
        else:
            jobs = sweep_jobs(path)
            dirs = [j for j in jobs if is_run_dir(j)]
            missing = [j for j in jobs if not is_run_dir(j)]
            if not dirs:
                raise FileNotFoundError(f"{path}: no run, or no job of a sweep with an event log")
        full = set(dirs) != set(self.runs) or missing != self.missing
        self.runs = {d: self.runs.get(d) or LiveRun(d) for d in dirs}
        self.missing = missing
        changed: dict[str, list[pd.DataFrame]] = {name: [] for name in DERIVE}
        meta = False
        for run in self.runs.values():
            got = run.read()
            full |= got.full
            meta |= got.meta
            for name, df in got.rows.items():
                if df is not None and len(df):
                    changed[name].append(df)
        stacked = {
            name: pd.concat(frames, ignore_index=True) if frames else None
            for name, frames in changed.items()
        }
        return Changes(rows=stacked, full=full, meta=meta)

    def assemble(self) -> Tables:
        """The tables of the files as last read (a sweep's jobs stacked in seed order)."""
        runs = list(self.runs.values())
        key = tuple((r.run_dir, r.last.generation if r.last else 0) for r in runs)
        done = self._tables
        if done is not None and done[0] == key:
            return done[1]
        loaded = [r.assemble(git=self.git) for r in runs]
        tables = loaded[0] if is_run_dir(self.path) else stack_runs(loaded, list(self.missing))
        self._tables = (key, tables)
        return tables
