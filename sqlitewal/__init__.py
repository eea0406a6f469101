"""SQLite in WAL mode, shared by the files several processes read and write at once: the
judge's queue (``judge.queue``) and a run's event log (``runner.events``). Neither owns it:
the runner's record does not depend on the judge for how it opens a file."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["connect_wal"]


@contextmanager
def connect_wal(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to a SQLite file in WAL mode, autocommit (transactions are explicit),
    waiting up to 30 s for another process's lock; closed on exit."""
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        yield db
    finally:
        db.close()
