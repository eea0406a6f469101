"""Docker's attach stream, demultiplexed: a process's stdout and stderr from one socket, read
as they arrive with the judge's own deadlines."""

from __future__ import annotations

import errno
import select
import socket
import time
from contextlib import suppress

from judge.protocol import MAX_LINE_BYTES
from judge.sandbox.base import InfrastructureFault

_STDERR_KEEP = 64 * 1024


class LineTooLong(Exception):
    """More than the allowed bytes arrived without a newline."""


class _Stream:
    """Reads Docker's multiplexed attach stream (8-byte frame headers) from a raw socket.

    Frames are consumed as they arrive, never buffered whole (a header may announce up to
    4 GiB), so the judge holds at most one line of stdout plus one read, and a kept tail of
    stderr.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._header = bytearray()
        self._kind = 0
        self._left = 0  # payload bytes of the current frame still to come
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.closed = False

    def hang_up(self) -> None:
        """Shut the socket down both ways; safe to repeat, and after the socket is closed.

        Closing our descriptor is not enough: docker-py's reader of the same socket keeps it
        open. And the read half matters as much as the write half (the process's EOF): output
        nobody reads any more (an engine flooding past the judge's cap, a server logging on, a
        command left at its timeout) fills the socket's buffers and blocks the Docker daemon's
        copy of it; once the writer dies, every later exec in its container and the
        container's removal wait on that copy (measured here: a kill's exec 10.0 s and a
        removal 20.1 s; after a hang-up 0.16 s and 0.06 s). Shut down, the copy fails at once.
        """
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def send(self, data: bytes, deadline: float) -> None:
        """Write all of ``data`` to the process's stdin by ``deadline`` (``perf_counter``).

        A process that stops reading its stdin must not hold the judge: without a deadline
        ``sendall`` waits forever once the pipe and the socket's buffers are full.

        Raises:
            TimeoutError: not all of ``data`` was taken by ``deadline``.
            OSError: the process is gone.
        """
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)  # sendall's timeout bounds the whole call
        self.sock.sendall(data)

    def _recv(self, timeout: float | None) -> bytes:
        """One chunk, waiting at most ``timeout`` seconds (0: never waits, a non-blocking read).

        Raises:
            TimeoutError: nothing arrived in time (BlockingIOError when ``timeout`` is 0).
        """
        try:
            self.sock.settimeout(timeout)
            return self.sock.recv(1 << 16)
        except (TimeoutError, BlockingIOError):
            raise
        except OSError as exc:
            if exc.errno == errno.EBADF:  # our end of the socket is gone: not the engine's doing
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine: {exc}"
                ) from exc
            return b""

    def pump(self, deadline: float | None) -> None:
        """Read at least one chunk, or raise TimeoutError at ``deadline``; sets ``closed``.

        ``None`` waits as long as it takes: only for a drainer thread of its own (a server's
        output), never on a path the judge waits on.
        """
        if self.closed:
            return
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            raise TimeoutError
        chunk = self._recv(remaining)
        if not chunk:
            self.closed = True
            return
        self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        """Demultiplex one chunk of the attach stream, whatever its frame boundaries."""
        view, i = memoryview(chunk), 0
        while i < len(view):
            if self._left == 0:
                take = min(8 - len(self._header), len(view) - i)
                self._header += view[i : i + take]
                i += take
                if len(self._header) == 8:
                    self._kind = self._header[0]
                    self._left = int.from_bytes(self._header[4:8], "big")
                    self._header.clear()
                continue
            take = min(self._left, len(view) - i)
            part = view[i : i + take]
            i += take
            self._left -= take
            if self._kind == 1:
                self.stdout += part
            else:
                self.stderr += part
                if len(self.stderr) > 2 * _STDERR_KEEP:
                    del self.stderr[:-_STDERR_KEEP]

    def ready(self) -> bool:
        """Read what has already arrived, without waiting; whether any stdout is buffered."""
        for _ in range(64):  # bounded: an engine flooding stderr cannot hold the judge here
            if self.stdout or self.closed:
                break
            try:
                readable, _, _ = select.select([self.sock], [], [], 0)
            except (OSError, ValueError) as exc:
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine: {exc}"
                ) from exc
            if not readable:
                break
            # Never a blocking read here: the judge is not waiting on this engine yet, and a
            # wait with no deadline is one an engine could stretch forever.
            try:
                chunk = self._recv(0.0)
            except (TimeoutError, BlockingIOError):
                break
            if not chunk:
                self.closed = True
                break
            self.feed(chunk)
        return bool(self.stdout)

    def read_line(self, deadline: float, limit: int = MAX_LINE_BYTES) -> bytes:
        """The next stdout line, newline stripped. Each byte is scanned once.

        Raises:
            TimeoutError: no full line by ``deadline``.
            EOFError: the stream ended first.
            LineTooLong: more than ``limit`` bytes arrived without a newline.
        """
        start = 0
        while True:
            end = self.stdout.find(b"\n", start)
            if 0 <= end <= limit:
                line = bytes(self.stdout[:end])
                del self.stdout[: end + 1]
                return line
            if end > limit or len(self.stdout) > limit:
                raise LineTooLong
            if self.closed:
                raise EOFError
            start = len(self.stdout)
            self.pump(deadline)
