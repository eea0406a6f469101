"""The live view's HTTP server: the page, one JSON endpoint per section, and the poll.

Standard library only (``http.server.ThreadingHTTPServer``): the view serves one person's browser
on loopback, a few requests every couple of seconds, so an ASGI stack would add dependencies and
nothing measurable. Every request thread shares one :class:`ViewState`, which reads the run's
new rows only when its files changed (``analysis.view.live``) and hands them to the page's poll
(``/api/changes?since=N``), and rebuilds the sections from the tables, throttled, one build at
a time; a failed read or build keeps the last good one, so a run being written shows what is
committed, never an error page. ``/api/version`` stays for scripts: it answers the version of
the sections served.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pandas as pd

from analysis.tables import Tables, is_run_dir, sweep_jobs
from analysis.view.data import (
    SECTIONS,
    _time_left,
    board_search,
    build_sections,
    change_rows,
    evaluation_detail,
)
from analysis.view.live import LiveTables
from analysis.view.page import render

__all__ = ["PORT_TRIES", "Snapshot", "ViewState", "bind", "make_handler"]

#: How many ports after the asked one are tried when it is in use.
PORT_TRIES = 50


@dataclass
class Snapshot:
    """One build of every section, and the version of the files it was built from."""

    version: str
    built_at: float
    build_s: float
    tables: Tables
    sections: dict[str, dict[str, Any]]
    # Sections without a clock-dependent value, encoded once per build.
    encoded: dict[str, bytes] = field(default_factory=dict)
    #: The read (``ViewState.seq``) the sections were built from.
    seq: int = 0


#: A rebuild starts at most this often (seconds) ...
MIN_REBUILD_S = 1.0
#: ... and at most once per this many times the last build's duration, so a watched run that
#: writes all the time costs the machine (and the judge beside it) a bounded share of one core.
REBUILD_FACTOR = 4.0
#: Reads whose new rows are kept for a page that asks what changed since (``/api/changes``);
#: a page further behind loads every section again.
KEPT_CHANGES = 200


@dataclass
class ViewState:
    """What the request threads share: the run or sweep folder, its tables kept between reads
    (``analysis.view.live``), the rows each read added, and the last build of the sections.

    A read (cheap: only the rows the logs gained) happens whenever the files moved; the new
    rows go to the pages at once (``/api/changes``). Rebuilding the sections (the arms table,
    the formulas, the lineage: over every row) is bounded by ``min_rebuild_s`` and
    ``rebuild_factor`` and, with ``background``, runs in a thread of its own so that no request
    waits for it (tests set both bounds to 0 and no background: every change is built at once).
    """

    path: Path
    min_rebuild_s: float = MIN_REBUILD_S
    rebuild_factor: float = REBUILD_FACTOR
    background: bool = False
    snapshot: Snapshot | None = None
    error: str | None = None
    #: Reads that found something; the rows of the latest ``KEPT_CHANGES`` of them.
    seq: int = 0
    changes: deque = field(default_factory=lambda: deque(maxlen=KEPT_CHANGES))
    #: The last read that read everything again (a page behind it loads every section).
    reset_seq: int = 0
    live: LiveTables | None = None
    _files: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _read_lock: threading.Lock = field(default_factory=threading.Lock)
    _building: threading.Thread | None = None
    _last_start: float = -math.inf
    _plan: dict[str, Any] | None = None
    _plan_at: float = -math.inf
    _plan_lock: threading.Lock = field(default_factory=threading.Lock)

    def plan(self) -> dict[str, Any]:
        """The planner's section (``analysis.plan.cache``: a stat when the logs did not move).
        While a run writes, simulated again at most every :data:`PLAN_EVERY_S` seconds: it
        costs seconds, and a plan of a run in progress is a sketch anyway."""
        from analysis.view.data import plan_view

        with self._plan_lock:
            if self._plan is None or time.monotonic() - self._plan_at >= PLAN_EVERY_S:
                try:
                    self._plan = plan_view(self.path)
                except Exception as exc:  # a half-written log: say so, try again later
                    self._plan = {"reason": f"no plan yet ({type(exc).__name__}: {exc})"}
                self._plan_at = time.monotonic()
            return self._plan

    def __post_init__(self) -> None:
        self.live = LiveTables(self.path)

    def run_dirs(self) -> list[Path]:
        """The run folders whose files make the version (a sweep's jobs, listed anew)."""
        if is_run_dir(self.path):
            return [self.path]
        return [job for job in sweep_jobs(self.path) if is_run_dir(job)]

    def version(self) -> str:
        """A token that changes whenever a run writes: the size and modification time of each
        event log and its WAL (a ``stat`` each, the database is not opened)."""
        parts = []
        for run in self.run_dirs():
            for name in ("events.sqlite", "events.sqlite-wal"):
                try:
                    st = os.stat(run / name)
                except OSError:
                    st = None
                # An empty WAL holds nothing (our own reader creates one where none was, and a
                # checkpoint that empties it writes the database, whose stat moves).
                if st is None or (name.endswith("-wal") and st.st_size == 0):
                    parts.append(f"{run.name}/{name}:-")
                else:
                    parts.append(f"{run.name}/{name}:{st.st_size}:{st.st_mtime_ns}")
        return "|".join(parts)

    def read(self) -> int:
        """Read what the logs gained when their files moved; returns the read's number.

        Raises:
            Exception: The read failed (a half-written or broken log): ``error`` says why and
                what was read before stays.
        """
        with self._read_lock:
            files = self.version()
            if files == self._files:
                return self.seq
            assert self.live is not None
            changes = self.live.read()
            self._files = files
            if changes:
                self.seq += 1
                if changes.full or changes.meta:
                    self.reset_seq = self.seq
                    self.changes.clear()
                else:
                    rows = change_rows(changes.rows, self._evaluations())
                    self.changes.append((self.seq, rows))
            return self.seq

    def _evaluations(self) -> pd.DataFrame:
        assert self.live is not None
        frames = [r.last.rows["evaluations"] for r in self.live.runs.values() if r.last]
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def changes_since(self, since: int) -> dict[str, Any] | None:
        """The rows the reads after ``since`` added, merged; None when the page must load
        every section again (a full read since, or changes no longer kept)."""
        with self._read_lock:
            kept = list(self.changes)
            seq, reset = self.seq, self.reset_seq
        if since >= seq:
            return {"evaluations": [], "submissions": [], "messages": []}
        if since < reset or not kept or kept[0][0] > since + 1:
            return None
        out: dict[str, list] = {"evaluations": [], "submissions": [], "messages": []}
        for at, rows in kept:
            if at > since:
                for name, values in rows.items():
                    out[name].extend(values)
        return out

    def _due(self, snap: Snapshot | None) -> bool:
        if snap is None:
            return True
        wait = max(self.min_rebuild_s, self.rebuild_factor * snap.build_s)
        return time.monotonic() - self._last_start >= wait

    def current(self) -> Snapshot:
        """The sections for the files as last read: the files read again when they moved, the
        sections rebuilt when a read found something and the last build is old enough (else
        the last build, which the page shows until the next; with ``background`` the rebuild
        runs in its own thread and this returns at once).

        Raises:
            RuntimeError: The first build failed (later failures keep the last good build).
        """
        try:
            self.read()
        except Exception as exc:  # a half-written log: keep what was read last
            self.error = f"{type(exc).__name__}: {exc}"
            if self.snapshot is None:
                raise RuntimeError(self.error) from exc
            return self.snapshot
        snap = self.snapshot
        if snap is not None and (snap.seq == self.seq or not self._due(snap)):
            return snap
        if snap is not None and self.background:
            with self._lock:
                if self._building is None or not self._building.is_alive():
                    self._last_start = time.monotonic()
                    self._building = threading.Thread(target=self._build_quietly, daemon=True)
                    self._building.start()
            return snap
        return self._build()

    def _build_quietly(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._build(started=True)

    def _build(self, started: bool = False) -> Snapshot:
        with self._lock if not started else contextlib.nullcontext():
            snap = self.snapshot
            seq, files = self.seq, self._files or ""
            if snap is not None and snap.seq == seq:
                return snap
            if not started:
                self._last_start = time.monotonic()
            began = time.monotonic()
            try:
                assert self.live is not None
                # Outside the read lock, so the pages' reads go on meanwhile: the tables may
                # hold rows of a read after ``seq`` too (the page drops rows it holds).
                tables = self.live.assemble()
                now = time.time()
                sections = build_sections(tables, now)
            except Exception as exc:  # a half-written log: keep what was read last
                self.error = f"{type(exc).__name__}: {exc}"
                if snap is None:
                    raise RuntimeError(self.error) from exc
                return snap
            encoded = {
                name: _encode({"version": files, "seq": seq, "data": data})
                for name, data in sections.items()
                if name not in CLOCKED
            }
            self.error = None
            build_s = time.monotonic() - began
            self.snapshot = Snapshot(files, now, build_s, tables, sections, encoded, seq)
            return self.snapshot


#: Seconds between two simulations of the planner's section while the logs move.
PLAN_EVERY_S = 60.0

#: Sections with a value that depends on the moment of the request (time left).
CLOCKED = frozenset({"run", "race"})


def _encode(payload: Any) -> bytes:
    return json.dumps(payload, allow_nan=False).encode()


def section_now(snap: Snapshot, name: str) -> dict[str, Any]:
    """A section with its clock-dependent values (time left) at the moment of the request."""
    data = snap.sections[name]
    now = time.time()
    if name == "race":
        data = {**data, "time_left_s": _time_left(snap.tables.runs[0], now)}
    elif name == "run":
        runs = [
            {**r, "time_left_s": _time_left(info, now)}
            for r, info in zip(data["runs"], snap.tables.runs, strict=True)
        ]
        data = {**data, "runs": runs, "now": now}
    return data


LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _allowed_hosts(host: str, port: int) -> set[str] | None:
    """The Host headers answered (None: any, for a server its user put on the network).

    A page on another site that rebinds its name to 127.0.0.1 sends its own Host header:
    answering only our own names keeps the run's data in this machine's browsers.
    """
    if host not in LOOPBACK:
        return None
    names = {"127.0.0.1", "localhost", "[::1]"}
    return {n for name in names for n in (name, f"{name}:{port}")}


def _seat_answer(state: ViewState, query: dict[str, list[str]]) -> tuple[int, Any]:
    """``/api/seat?run=&arm=&seat=[&offset=&q=&step=]``: one seat's page (``analysis.view.seats``),
    read per request from the run's files: a transcript is never held for every seat."""
    from analysis.view.seats import PAGE_STEPS, seat_page

    def arg(name: str) -> str:
        return query.get(name, [""])[0]

    snap = state.current()
    run = next((r for r in snap.tables.runs if r.run_id == arg("run")), None)
    if run is None and len(snap.tables.runs) == 1 and not arg("run"):
        run = snap.tables.runs[0]
    seat = next(
        (s for s in (run.seats if run else []) if s.arm == arg("arm") and s.agent == arg("seat")),
        None,
    )
    if run is None or seat is None:
        return HTTPStatus.NOT_FOUND, {"error": "no such seat"}
    try:
        offset = max(0, int(arg("offset") or 0))
        step = int(arg("step")) if arg("step") else None
    except ValueError:
        return HTTPStatus.BAD_REQUEST, {"error": "offset and step must be numbers"}
    page = seat_page(
        snap.tables, run, seat.arm, seat.agent, time.time(), offset, PAGE_STEPS, arg("q"),
        at_step=step,
    )  # fmt: skip
    return HTTPStatus.OK, {"version": snap.version, "data": page}


def make_handler(state: ViewState, host: str, port: int) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``state`` (GET only, fixed paths)."""
    allowed = _allowed_hosts(host, port)

    class Handler(BaseHTTPRequestHandler):
        server_version = "swarmlab-view"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the terminal is the user's; requests every two seconds would drown it

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header(
                "Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; img-src data:",
            )
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, _encode(payload), "application/json")

        def do_GET(self) -> None:
            if allowed is not None and self.headers.get("Host", "") not in allowed:
                self._json(HTTPStatus.FORBIDDEN, {"error": "unknown Host header"})
                return
            url = urlsplit(self.path)
            route = url.path
            try:
                if route in ("/", "/index.html"):
                    self._send(HTTPStatus.OK, render(None).encode(), "text/html; charset=utf-8")
                elif route == "/api/version":
                    # The poll: a stat when nothing changed; a (throttled) rebuild when the
                    # files moved, so the sections the page asks for next are ready.
                    snap = state.current()
                    self._json(
                        HTTPStatus.OK,
                        {
                            "version": snap.version,
                            "files": state.version(),
                            "build_s": snap.build_s,
                            "error": state.error,
                        },
                    )
                elif route == "/api/changes":
                    # The page's poll: the rows the reads after the one it holds added (cheap:
                    # only new rows are read), and which read the sections were built from
                    # (a rebuild, throttled, in the background, when something changed).
                    try:
                        since = int(parse_qs(url.query).get("since", ["0"])[0])
                    except ValueError:
                        self._json(HTTPStatus.BAD_REQUEST, {"error": "since must be a number"})
                        return
                    snap = state.current()
                    rows = state.changes_since(since)
                    self._json(
                        HTTPStatus.OK,
                        {
                            "seq": state.seq,
                            "sections_seq": snap.seq,
                            "reset": rows is None,
                            "rows": rows,
                            "files": state.version(),
                            "build_s": snap.build_s,
                            "error": state.error,
                        },
                    )
                elif route.startswith("/api/") and route[5:] in SECTIONS:
                    snap = state.current()
                    name = route[5:]
                    if name in snap.encoded:
                        self._send(HTTPStatus.OK, snap.encoded[name], "application/json")
                    else:
                        data = section_now(snap, name)
                        payload = {"version": snap.version, "seq": snap.seq, "data": data}
                        self._json(HTTPStatus.OK, payload)
                elif route == "/api/seat":
                    self._json(*_seat_answer(state, parse_qs(url.query)))
                elif route == "/api/plan":
                    self._json(HTTPStatus.OK, {"data": state.plan()})
                elif route == "/api/board/search":
                    query = parse_qs(url.query)
                    snap = state.current()
                    found = board_search(
                        snap.tables,
                        query.get("q", [""])[0],
                        query.get("arm", [""])[0],
                        query.get("run", [""])[0],
                    )
                    self._json(HTTPStatus.OK, {"version": snap.version, "data": found})
                elif route == "/api/evaluation":
                    query = parse_qs(url.query)
                    snap = state.current()
                    try:
                        job = int(query.get("job", [""])[0])
                    except ValueError:
                        self._json(HTTPStatus.BAD_REQUEST, {"error": "job must be a number"})
                        return
                    run_id = query.get("run", [snap.tables.runs[0].run_id])[0]
                    detail = evaluation_detail(snap.tables, run_id, job)
                    if detail is None:
                        self._json(HTTPStatus.NOT_FOUND, {"error": "no such evaluation"})
                    else:
                        self._json(HTTPStatus.OK, {"version": snap.version, "data": detail})
                else:
                    self._json(HTTPStatus.NOT_FOUND, {"error": "not found"})
            except RuntimeError as exc:  # nothing readable yet: the page waits and polls again
                self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)})

    return Handler


def bind(state: ViewState, host: str, port: int) -> tuple[ThreadingHTTPServer, list[int]]:
    """A server on ``host`` at ``port`` or, when that is in use, the next free one.

    Returns:
        The server (not yet serving) and the ports found in use before it.

    Raises:
        OSError: No port free among ``PORT_TRIES`` (or another error binding).
    """
    busy: list[int] = []
    for candidate in range(port, port + PORT_TRIES) if port else [0]:
        try:
            server = ThreadingHTTPServer((host, candidate), make_handler(state, host, candidate))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            busy.append(candidate)
            continue
        if not port:  # the OS picked one: the handler must know which
            actual = server.server_address[1]
            server.RequestHandlerClass = make_handler(state, host, actual)
        server.daemon_threads = True
        return server, busy
    raise OSError(errno.EADDRINUSE, f"ports {port}-{port + PORT_TRIES - 1} are all in use")
