"""What every scripted endpoint shares: the script, the HTTP server, the request log and the
usage ledger.

A :class:`ScriptedEndpoint` is a small threaded HTTP server (standard library only) that a
vendor's real CLI talks to as if it were the vendor's API. It plays a :class:`Step` per model
call, chosen by how many replies the conversation in the request already holds after its last
keep-going message (a retried call gets the same step again; a session resumed with the
keep-going message carries its whole history and plays the script from its first step again),
and records what it reported as usage for every reply it sent, so a
test can compare that with what the CLI wrote into its own session record.

Every request is logged (method, path, model, the step played, whether the expected key came
with it); a path the endpoint does not know is logged as unknown and answered 404 with the
vendor's error shape, which real clients treat as "not supported here".
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from arms.prompts import KEEP_GOING, TEMPLATES

# The usage fields every endpoint records, in analysis.tokens.TokenUsage's terms: input is the
# uncached input, output every generated token (reasoning included), reasoning the part of
# output that was reasoning.
USAGE_KEYS = ("input", "cache_read", "cache_write", "output", "reasoning")

# The words the keep-going message opens with (the text before its first colon: the rest names
# the deadline): a user turn holding them is the supervisor's "carry on" to a resumed or
# restarted seat, after which the script starts again.
KEEP_GOING_WORDS = (TEMPLATES / f"{KEEP_GOING}.md").read_text().split(":")[0].strip()


@dataclass(frozen=True)
class Step:
    """One model reply of a script: a shell command to run (a tool call) or a final text.

    ``usage`` holds the numbers the reply reports, in :data:`USAGE_KEYS` terms; each endpoint
    turns them into its vendor's fields (and refuses combinations its vendor cannot express).
    """

    kind: str  # "shell" | "text"
    text: str
    usage: dict[str, int]
    note: str = ""  # a short text the model "says" before its tool call

    def __post_init__(self) -> None:
        if self.kind not in ("shell", "text"):
            raise ValueError(f"step kind {self.kind!r}: shell or text")
        unknown = set(self.usage) - set(USAGE_KEYS)
        if unknown:
            raise ValueError(f"unknown usage keys {sorted(unknown)}; known: {USAGE_KEYS}")


def shell(command: str, usage: dict[str, int], note: str = "") -> Step:
    return Step("shell", command, usage, note)


def text(answer: str, usage: dict[str, int]) -> Step:
    return Step("text", answer, usage)


@dataclass
class Reply:
    """One reply the endpoint sent, with the usage it reported (USAGE_KEYS terms)."""

    path: str
    model: str
    step: int
    kind: str
    stream: bool
    usage: dict[str, int]
    response_id: str
    request_id: str
    # The model's replies in the request's whole history (``step`` counts only those after
    # the last keep-going message): more than ``step`` when a resumed session carried its
    # history.
    history: int = 0


@dataclass
class RequestLog:
    method: str
    path: str
    status: int
    model: str | None = None
    step: int | None = None
    authorized: bool | None = None
    known: bool = True
    at: float = field(default_factory=time.time)
    detail: str = ""


class Response:
    """What a handler returns: a JSON body, or a stream of server-sent events."""

    def __init__(
        self,
        status: int = 200,
        body: Any = None,
        events: list[tuple[str | None, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.events = events
        self.headers = headers or {}


def new_id(prefix: str, n: int = 12) -> str:
    return f"{prefix}{secrets.token_hex(n)}"


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the ``text`` of each of its parts (a
    tool's result, which has none, adds nothing)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def pieces(text: str) -> list[str]:
    """``text`` cut after each space, as a model streams it (joined, they give it back)."""
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


class ScriptedEndpoint:
    """A vendor API on ``http://host:port`` that plays ``script``.

    Subclasses implement :meth:`route` (the vendor's paths) and name the vendor. Use as a
    context manager, or call :meth:`start` and :meth:`stop`.

    Args:
        script: the replies, in order; a conversation past the end gets the last step again.
        host: the address to listen on (for a container on an internal Docker network: that
            network's gateway address, so nothing else reaches it).
        port: 0 picks a free one.
        api_key: the key the client must send (recorded per request as ``authorized``; a
            request without it gets the vendor's 401).
        delay: seconds to wait between streamed events (0: none).
        failures: the first this many model calls are answered with ``failure_status`` in the
            vendor's error shape (a rate limit or an outage), each logged with that status.
        failure_status: 429 (rate limited), 529 (Anthropic: overloaded), 500, 503, ...
        retry_after: the ``Retry-After`` header sent with each failure ('' for none).
        restart_on: a user turn holding this text starts the script again: the model replies
            before it do not count (default: the keep-going message's words; '' for never).
    """

    vendor: ClassVar[str] = ""

    def __init__(
        self,
        script: list[Step],
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str = "",
        delay: float = 0.0,
        failures: int = 0,
        failure_status: int = 429,
        retry_after: str = "1",
        restart_on: str = KEEP_GOING_WORDS,
    ) -> None:
        if not script:
            raise ValueError("an empty script")
        self.script = list(script)
        self.api_key = api_key
        self.delay = delay
        self.failures_left = failures
        self.failure_status = failure_status
        self.retry_after = retry_after
        self.restart_on = restart_on
        self.requests: list[RequestLog] = []
        self.replies: list[Reply] = []
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> ScriptedEndpoint:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name=f"{self.vendor}-endpoint", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ScriptedEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it saw and said ------------------------------------------------------------

    def usage_by_model(self) -> dict[str, dict[str, int]]:
        """The usage this endpoint reported, summed per model (USAGE_KEYS terms)."""
        totals: dict[str, dict[str, int]] = {}
        with self._lock:
            replies = list(self.replies)
        for reply in replies:
            total = totals.setdefault(reply.model, dict.fromkeys(USAGE_KEYS, 0))
            for key in USAGE_KEYS:
                total[key] += reply.usage.get(key, 0)
        return totals

    def unknown_paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests if not r.known]

    def record(self) -> dict[str, Any]:
        """Everything, as JSON-ready data (what ``python -m tests.support.endpoints`` writes)."""
        with self._lock:
            return {
                "vendor": self.vendor,
                "url": self.url,
                "requests": [asdict(r) for r in self.requests],
                "replies": [asdict(r) for r in self.replies],
                "usage_by_model": self.usage_by_model(),
            }

    # -- for subclasses ------------------------------------------------------------------

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Response:
        raise NotImplementedError

    def authorized(self, headers: dict[str, str]) -> bool:
        raise NotImplementedError

    def failure_body(self, status: int) -> Any:
        """The vendor's error body for an injected failure of ``status``."""
        raise NotImplementedError

    def fail(self, entry: RequestLog) -> Response | None:
        """The injected failure for this model call (logged), or None once they are spent."""
        with self._lock:
            if self.failures_left <= 0:
                return None
            self.failures_left -= 1
        entry.status = self.failure_status
        entry.detail = "injected failure"
        self.log(entry)
        headers = {"Retry-After": self.retry_after} if self.retry_after else {}
        body = self.failure_body(self.failure_status)
        return Response(self.failure_status, body, headers=headers)

    def turns(self, history: list[str | None]) -> tuple[int, int]:
        """Where a conversation stands: the model replies after its last user turn holding
        :attr:`restart_on` (all of them when none does), and all of its model replies.

        Args:
            history: the request's conversation in order, one entry per model reply the
                vendor's endpoint counts (``None``) and per user text (the text).
        """
        replies = [i for i, item in enumerate(history) if item is None]
        restarts = [
            i
            for i, item in enumerate(history)
            if item is not None and self.restart_on and self.restart_on in item
        ]
        since = restarts[-1] if restarts else -1
        return sum(1 for i in replies if i > since), len(replies)

    def step_for(self, turn: int) -> tuple[int, Step]:
        index = min(turn, len(self.script) - 1)
        return index, self.script[index]

    def add_reply(self, reply: Reply) -> None:
        with self._lock:
            self.replies.append(reply)

    def log(self, entry: RequestLog) -> None:
        with self._lock:
            self.requests.append(entry)

    # -- HTTP ----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = f"swarmlab-{endpoint.vendor}-endpoint"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: we keep our own
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    raw = self._read_chunked()
                body: Any = None
                if raw:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = raw.decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    response = endpoint.route(method, self.path, headers, body)
                except Exception as exc:  # a bug here must show, not hang the client
                    endpoint.log(RequestLog(method, self.path, 500, detail=repr(exc)))
                    response = Response(500, {"error": {"message": repr(exc)}})
                if response.events is not None:
                    self._stream(response)
                else:
                    self._json(response)

            def _read_chunked(self) -> bytes:
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()

            def _json(self, response: Response) -> None:
                data = json.dumps(response.body).encode() if response.body is not None else b""
                self.send_response(response.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in response.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, response: Response) -> None:
                self.send_response(response.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                for key, value in response.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                for name, data in response.events or []:
                    # A str is sent as it is (Chat Completions' closing "[DONE]").
                    payload = data if isinstance(data, str) else json.dumps(data)
                    frame = (f"event: {name}\n" if name else "") + f"data: {payload}\n\n"
                    chunk = frame.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    if endpoint.delay:
                        time.sleep(endpoint.delay)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        return Handler
