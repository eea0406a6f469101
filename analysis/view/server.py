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
from analysis.view.data import SECTIONS, _time_left, build_sections, evaluation_detail
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


@dataclass
class ViewState:
    """What the request threads share: the run or sweep folder and its last build."""

    path: Path
    snapshot: Snapshot | None = None
    error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

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
                    parts.append(f"{run.name}/{name}:-")
                    continue
                parts.append(f"{run.name}/{name}:{st.st_size}:{st.st_mtime_ns}")
        return "|".join(parts)

    def current(self) -> Snapshot:
        """The sections for the files as they are now (rebuilt only when the version moved).

        Raises:
            RuntimeError: The first build failed (later failures keep the last good build).
        """
        version = self.version()
        snap = self.snapshot
        if snap is not None and snap.version == version:
            return snap
        with self._lock:
            snap = self.snapshot
            version = self.version()
            if snap is not None and snap.version == version:
                return snap
            began = time.monotonic()
            try:
                tables = build_tables(self.path)
                now = time.time()
                sections = build_sections(tables, now)
            except Exception as exc:  # a half-written log: keep what was read last
                self.error = f"{type(exc).__name__}: {exc}"
                if snap is None:
                    raise RuntimeError(self.error) from exc
                return snap
            self.error = None
            self.snapshot = Snapshot(version, now, time.monotonic() - began, tables, sections)
            return self.snapshot


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


def _allowed_hosts(host: str, port: int) -> set[str]:
    # A page on another site that rebinds its name to 127.0.0.1 sends its own Host header:
    # answering only our own names keeps the run's data on this machine's browser.
    names = {host, "127.0.0.1", "localhost", "[::1]"}
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
            body = json.dumps(payload, allow_nan=False).encode()
            self._send(status, body, "application/json")

        def do_GET(self) -> None:
            if self.headers.get("Host", "") not in allowed:
                self._json(HTTPStatus.FORBIDDEN, {"error": "unknown Host header"})
                return
            url = urlsplit(self.path)
            route = url.path
            try:
                if route in ("/", "/index.html"):
                    self._send(HTTPStatus.OK, render(None).encode(), "text/html; charset=utf-8")
                elif route == "/api/version":
                    snap = state.snapshot
                    self._json(
                        HTTPStatus.OK,
                        {
                            "version": state.version(),
                            "built": snap.version if snap else None,
                            "build_s": snap.build_s if snap else None,
                            "error": state.error,
                        },
                    )
                elif route.startswith("/api/") and route[5:] in SECTIONS:
                    snap = state.current()
                    data = section_now(snap, route[5:])
                    self._json(HTTPStatus.OK, {"version": snap.version, "data": data})
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
