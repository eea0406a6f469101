"""The live view's HTTP server: the page, one JSON endpoint per section, a cheap version.

Standard library only (``http.server.ThreadingHTTPServer``): the view serves one person's browser
on loopback, a few requests every couple of seconds, so an ASGI stack would add dependencies and
nothing measurable. Every request thread shares one :class:`ViewState`, which rebuilds the
tables only when the run's files changed (one build at a time; a failed build keeps the last good
one, so a run being written shows what is committed, never an error page).
"""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from analysis.tables import Tables, build_tables, is_run_dir, sweep_jobs
from analysis.view.data import (
    SECTIONS,
    _time_left,
    board_search,
    build_sections,
    evaluation_detail,
)
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


#: A rebuild starts at most this often (seconds) ...
MIN_REBUILD_S = 1.0
#: ... and at most once per this many times the last build's duration, so a watched run that
#: writes all the time costs the machine (and the judge beside it) a bounded share of one core.
REBUILD_FACTOR = 4.0


@dataclass
class ViewState:
    """What the request threads share: the run or sweep folder and its last build.

    ``min_rebuild_s`` and ``rebuild_factor`` bound how often the tables are rebuilt while the
    files keep changing (tests set both to 0: every change is read at once).
    """

    path: Path
    min_rebuild_s: float = MIN_REBUILD_S
    rebuild_factor: float = REBUILD_FACTOR
    snapshot: Snapshot | None = None
    error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_start: float = -math.inf

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

    def _due(self, snap: Snapshot | None) -> bool:
        if snap is None:
            return True
        wait = max(self.min_rebuild_s, self.rebuild_factor * snap.build_s)
        return time.monotonic() - self._last_start >= wait

    def current(self) -> Snapshot:
        """The sections for the files as they are now: rebuilt when the version moved and the
        last build is old enough (else the last build, which the page shows until the next).

        Raises:
            RuntimeError: The first build failed (later failures keep the last good build).
        """
        snap = self.snapshot
        if snap is not None and (snap.version == self.version() or not self._due(snap)):
            return snap
        with self._lock:
            snap = self.snapshot
            version = self.version()
            if snap is not None and (snap.version == version or not self._due(snap)):
                return snap
            self._last_start = time.monotonic()
            try:
                tables = build_tables(self.path)
                now = time.time()
                sections = build_sections(tables, now)
            except Exception as exc:  # a half-written log: keep what was read last
                self.error = f"{type(exc).__name__}: {exc}"
                if snap is None:
                    raise RuntimeError(self.error) from exc
                return snap
            encoded = {
                name: _encode({"version": version, "data": data})
                for name, data in sections.items()
                if name not in CLOCKED
            }
            self.error = None
            build_s = time.monotonic() - self._last_start
            self.snapshot = Snapshot(version, now, build_s, tables, sections, encoded)
            return self.snapshot


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
                elif route.startswith("/api/") and route[5:] in SECTIONS:
                    snap = state.current()
                    name = route[5:]
                    if name in snap.encoded:
                        self._send(HTTPStatus.OK, snap.encoded[name], "application/json")
                    else:
                        data = section_now(snap, name)
                        self._json(HTTPStatus.OK, {"version": snap.version, "data": data})
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
