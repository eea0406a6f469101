"""The load generator's HTTP client against RFC 9112's cases, on raw sockets (no Docker).

Each server here writes exact bytes: an honest stream framed in ways a real server or a proxy
may frame it (chunked with events straddling chunk boundaries, chunk extensions, trailers,
1xx responses before the final one, obs-fold, bare LF, a connection kept alive after the
stream), and the ways a candidate can abuse the framing (headers or a body trickled a byte at
a time, an endless run of ``100 Continue``, conflicting framing). An honest stream must be
read exactly; every abuse must end in the judge's word for it by the request's one deadline:
``timeout`` (charged under the confirm-timeout rule), never a hang that the sidecar's own
wait turns into the judge's ERROR.

No assertion here is on a measured time except "it returned at all" (a generous bound that
the old client, whose deadline bounded each read and not the request, never met).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from judge.kinds.server.load import handle

# Far longer than any deadline below: a client still reading by then holds on forever.
RETURNED_BY_S = 60.0


def _event(ids: list[int], finish: str | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "text": "", "token_ids": ids, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


STREAM = _event([3]) + _event([4, 5]) + _event([6], "length") + b"data: [DONE]\n\n"
IDS = [3, 4, 5, 6]
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def chunked(body: bytes, size: int, ext: bytes = b"", trailer: bytes = b"") -> bytes:
    """``body`` in chunks of ``size`` bytes (events straddle them), each size line carrying
    ``ext``, then the last chunk and ``trailer`` fields."""
    out = b""
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + b"0\r\n" + trailer + b"\r\n"


class RawServer:
    """Accepts connections on 127.0.0.1 and runs ``serve(conn)`` for each, in a thread; the
    request is read (up to its blank line and Content-Length body) before ``serve`` runs."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.serve = serve
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += conn.recv(65536)
            self.serve(conn)
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


@pytest.fixture
def served() -> Iterator[Callable[[Callable[[socket.socket], None]], RawServer]]:
    servers: list[RawServer] = []

    def start(serve: Callable[[socket.socket], None]) -> RawServer:
        servers.append(RawServer(serve))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def run_one(port: int, timeout_s: float = 10.0, op: str = "run") -> dict:
    """One request through the load generator, in a thread that must return by
    ``RETURNED_BY_S`` (a client that never returns fails the test instead of hanging it)."""
    command = {
        "op": op,
        "host": "127.0.0.1",
        "port": port,
        "path": "/v1/completions",
        "model": "m",
        "concurrency": 1,
        "timeout_s": timeout_s,
    }
    if op == "run":
        command["requests"] = [{"prompt": [1, 2], "max_tokens": 4}]
    elif op == "score":
        command["requests"] = [{"prompt": [1, 2], "continuation": [7, 8]}]
    else:
        command.update(path="/v1/models")
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(handle(command)), daemon=True)
    thread.start()
    thread.join(RETURNED_BY_S)
    assert not thread.is_alive(), "the client was still reading long past its deadline"
    return out if op == "ready" else out["results"][0]


def writes(*pieces: bytes, hold_s: float = 0.0) -> Callable[[socket.socket], None]:
    """A server that writes ``pieces`` (each sent on its own), then keeps the connection open
    for ``hold_s`` (a keep-alive server) and closes it."""

    def serve(conn: socket.socket) -> None:
        for piece in pieces:
            conn.sendall(piece)
            time.sleep(0.01)
        time.sleep(hold_s)
        conn.close()

    return serve


# -- honest framings: read exactly ------------------------------------------------------------

HONEST = {
    # uvicorn (vLLM's, SGLang's front) chunks every streamed body; a proxy may re-chunk it
    # anywhere, so an event straddles chunk boundaries.
    "chunked, events straddling chunks": SSE_HEAD
    + b"Transfer-Encoding: chunked\r\n\r\n"
    + chunked(STREAM, 7),
    "chunked, one byte a chunk": SSE_HEAD
    + b"Transfer-Encoding: chunked\r\n\r\n"
    + chunked(STREAM, 1),
    "chunk extensions and trailer fields": SSE_HEAD
    + b"Transfer-Encoding: chunked\r\nTrailer: X-Done\r\n\r\n"
    + chunked(STREAM, 13, ext=b';name="v";x=1', trailer=b"X-Done: yes\r\n"),
    "informational responses first": b"HTTP/1.1 100 Continue\r\n\r\n"
    + b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    + SSE_HEAD
    + b"Content-Length: %d\r\n\r\n" % len(STREAM)
    + STREAM,
    "obs-fold in a header": SSE_HEAD
    + b"X-Folded: one\r\n  two\r\nConnection: close\r\n\r\n"
    + STREAM,
    "bare LF line ends in the head": b"HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\n"
    + STREAM,
    "HTTP/1.0, the body until close": b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    + STREAM,
}


@pytest.mark.parametrize("name", list(HONEST))
def test_an_honest_stream_is_read_whatever_its_framing(served, name):
    raw = HONEST[name]
    # Sent in odd pieces too: the client must not care where reads split the bytes.
    server = served(writes(*[raw[i : i + 5] for i in range(0, len(raw), 5)]))
    result = run_one(server.port)
    assert result["ok"] and result["ids"] == IDS, result


def test_a_connection_kept_alive_after_the_stream_does_not_hold_the_request(served):
    """uvicorn keeps a connection open 5 s after a stream (vLLM too): the request ends at the
    end of its message, not when the server closes."""
    raw = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(STREAM, 64)
    server = served(writes(raw, hold_s=RETURNED_BY_S))
    result = run_one(server.port)
    assert result["ok"] and result["ids"] == IDS, result


def test_a_chunked_scoring_reply_is_decoded(served):
    reply = {"choices": [{"logprobs": {"token_logprobs": [None, -0.5, -0.25, -0.125, -1.0]}}]}
    body = json.dumps(reply).encode()
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = served(writes(raw + chunked(body, 9), hold_s=RETURNED_BY_S))
    result = run_one(server.port, op="score")
    assert result["ok"] and result["logprobs"] == [-0.25, -0.125], result


# -- abuse: the judge's word for it, by the deadline ------------------------------------------


def trickle(head: bytes, endless: bytes, every_s: float = 0.05) -> Callable[[socket.socket], None]:
    """Writes ``head``, then ``endless`` one byte every ``every_s``, over and over: each read
    gets a byte in time, the request never completes."""

    def serve(conn: socket.socket) -> None:
        conn.sendall(head)
        while True:
            for byte in endless:
                conn.sendall(bytes([byte]))
                time.sleep(every_s)

    return serve


ABUSE = {
    # Slow loris: every read returns a byte long before its timeout.
    "headers trickled a byte at a time": (
        trickle(b"HTTP/1.1 200 OK\r\n", b"X-Pad: aaaaaaaaaaaaaaaa\r\n"),
        "timeout",
    ),
    "a body trickled a byte at a time": (
        trickle(SSE_HEAD + b"Connection: close\r\n\r\n", b": never a line end "),
        "timeout",
    ),
    "a chunked body trickled a byte at a time": (
        trickle(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\nffff\r\n", b"data: "),
        "timeout",
    ),
    "100 Continue, slowly, forever": (
        trickle(b"", b"HTTP/1.1 100 Continue\r\n\r\n", every_s=0.01),
        "timeout",
    ),
    # Fast: the cap on informational responses ends it at once.
    "100 Continue flooded": (
        writes(*[b"HTTP/1.1 100 Continue\r\n\r\n" * 200] * 50),
        "protocol",
    ),
    "Content-Length and chunked both": (
        writes(
            SSE_HEAD
            + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(STREAM, 64)
        ),
        "protocol",
    ),
    "two Content-Lengths": (
        writes(SSE_HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + STREAM),
        "protocol",
    ),
    "a transfer coding other than chunked": (
        writes(SSE_HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(STREAM, 64)),
        "protocol",
    ),
    "101 Switching Protocols unasked": (
        writes(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n" + SSE_HEAD + b"\r\n"),
        "protocol",
    ),
    "a bad chunk size": (
        writes(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + STREAM),
        "protocol",
    ),
    "a chunked body cut short": (
        writes(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(STREAM, 64)[:40]),
        "protocol",
    ),
    "a head that never ends": (
        writes(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * (1 << 20)),
        "protocol",
    ),
    "a status other than 200": (
        writes(b"HTTP/1.1 599 LEAK\r\nContent-Length: 0\r\n\r\n"),
        "protocol",
    ),
    "no response at all": (writes(), "crash"),
}


@pytest.mark.parametrize("name", list(ABUSE))
def test_abused_framing_gets_the_judges_word_by_the_deadline(served, name):
    serve, kind = ABUSE[name]
    server = served(serve)
    result = run_one(server.port, timeout_s=1.5)
    assert (result["ok"], result["kind"]) == (False, kind), result


def test_readiness_is_bounded_by_its_deadline_too(served):
    """A server trickling its readiness answer: not ready when ``timeout_s`` is up, and the
    command returns (before, each poll's reads were bounded one by one)."""
    server = served(trickle(b"HTTP/1.1 200 OK\r\n", b"X-Pad: aaaaaaaaaaaaaaaa\r\n"))
    assert run_one(server.port, timeout_s=1.0, op="ready") == {"ok": False, "kind": "timeout"}
