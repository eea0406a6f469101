"""The model proxy: a real seat's only way to its vendor's API.

A seat of a vendor's CLI runs on an internal Docker network of its run (no route out, and
containers on it cannot reach each other). The proxy listens on that network's gateway (the
host) and forwards each request to the vendor's API, so the seat reaches the model and nothing
else. It is also where the key lives: the container gets a **seat token** in the key's place
(``sk-swarmlab-seat-...``, one per seat), and the proxy swaps it for the real key on the way
out. The key never enters a container, a command line or a file of the run; a request without a
known seat token is refused (401) and never reaches the vendor.

Every request is recorded as a :class:`ModelCall` (seat, path, status, the vendor's status,
when it started, when the first byte came back, when it ended, bytes each way, ``Retry-After``,
and the tokens the vendor's response reported, read by the API object) into the run's
``model_calls`` table. That is how an endpoint that errors or rate-limits shows
in the results whatever the CLI says about it: the CLIs retry on their own, and some announce
it, some partly, some not at all (``agents.clis``), but every retry is a request through the
proxy. :func:`analysis.model_calls.seat_outages` turns the calls into
the time each seat lost.

With a ``spending`` ledger (:mod:`isolation.spending`: the run's token and cost budgets) every
answered call's usage is counted, and a request of a seat whose budget is spent gets the
vendor's own quota error (429) instead of a forward: recorded with no upstream status and
``error`` ``refused: budget NAME spent``, and ``on_budget`` tells the runner. Calls in flight
when a limit is crossed finish (their tokens count: the overshoot is on record). A seat that
hangs up mid-stream is still charged: the proxy reads the vendor's stream to its end, where the
usage is, before it records the call.

Responses are streamed through as they arrive (server-sent events chunk by chunk), never
buffered. The proxy forwards only the model routes of its vendor's API (under the base URL's
path: generating, counting tokens, listing models), so a seat cannot use the key for anything
else the API offers (files, fine-tuning, batches, admin); anything else is refused with 403 and
recorded, and so is a request declaring a tool the vendor runs itself (web search and fetch,
code execution, remote MCP servers), through which the vendor would reach the network for the
seat. What is the vendor's (routes, server-side tools, auth and billing headers, how a response
reports usage and errors) comes from the API object the proxy is given (:class:`VendorPolicy`;
the vendors' are ``agents.apis``): the proxy names no vendor. It drops headers that would bill
another organisation or project, refuses websocket upgrades (426: the CLIs fall back to HTTP
streaming) and asks the vendor for unencoded bodies. One upstream connection per request (a TLS
handshake each: ~0.1 s against calls of seconds).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import secrets
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

from isolation.fair_use import FairUse

TOKEN_PREFIX = "sk-swarmlab-seat-"
# Headers that belong to one connection (RFC 9110 7.6.1) or carry a caller's credentials: never
# forwarded. The vendor's own auth header is set by the proxy.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# Every header a CLI puts a key in (whatever the API): a seat token is looked for in each.
KEY_HEADERS = ("x-api-key", "x-goog-api-key", "api-key")
CREDENTIALS = frozenset({"authorization", *KEY_HEADERS, "cookie"})
READ_SIZE = 64 * 1024
# A response body is kept (to read its usage) up to this size; a longer one is passed on whole
# but its usage is not read.
KEEP_BYTES = 64 * 1024 * 1024
# A request body larger than this is refused (413) before it is read: a seat cannot make the
# runner, whose threads the proxy runs in, hold gigabytes.
MAX_BODY = 32 * 1024 * 1024
MAX_LINE = 8192
# Connections one container may hold open at once (a CLI needs a handful); more are closed.
MAX_CONNECTIONS_PER_CLIENT = 64
# A seat's connection idle (or not reading what it is sent) for this long is closed.
IDLE_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 30.0
# Calls kept in memory (the event log has them all).
CALLS_KEPT = 10_000
# Headers that would make the vendor treat a call as another method.
OVERRIDES = frozenset({"x-http-method-override", "x-http-method", "x-method-override", "expect"})


class WireUsage(Protocol):
    """The tokens one response reported (``agents.usage.TokenUsage``)."""

    model: str
    input: int
    cache_read: int
    cache_write: int
    output: int
    reasoning: int


class VendorPolicy(Protocol):
    """What the proxy needs of a vendor's API (``agents.apis.VendorApi`` is one).

    Attributes:
        name: the API's name.
        auth_header: the header the vendor reads the key from.
        billing_headers: headers choosing whom a call is billed to (dropped).
        query_kept: query parameters forwarded to a model route (any other is dropped).
    """

    name: str
    auth_header: str
    billing_headers: frozenset[str]
    query_kept: frozenset[str]

    def auth_value(self, key: str) -> str:
        """The value of :attr:`auth_header` carrying ``key``."""
        ...

    def allows(self, method: str, rest: str) -> bool:
        """Whether ``method rest`` (the path after the base URL's path) is a model route."""
        ...

    def server_side_tools(self, body: bytes) -> list[str]:
        """The tools the request body declares that the vendor would run itself."""
        ...

    def wire_usage(self, body: bytes, content_type: str) -> WireUsage | None:
        """The usage a response body reported, or None."""
        ...

    def stream_error(self, body: bytes, content_type: str) -> str | None:
        """An error the vendor sent inside a response body, or None."""
        ...

    def rate_limit_error(self, message: str) -> bytes:
        """The body of the vendor's own 429 answer when its rate limit is hit."""
        ...

    def quota_error(self, message: str) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of the vendor's own answer when a quota is exhausted."""
        ...


class Spending(Protocol):
    """The seats' token and cost budgets (``isolation.spending.SpendingLedger`` is one)."""

    def add_seat(self, token: str, arm: str, agent: str) -> None: ...

    def add(self, token: str, usage: ModelCall) -> None: ...

    def spent(self, token: str) -> str | None: ...


@dataclass
class ModelCall:
    """One request a seat made through the proxy.

    ``status`` is what the seat got back; ``upstream_status`` what the vendor answered (None
    when no answer came: ``error`` says why). ``first_byte_at`` is when the vendor's response
    began (None without one).
    """

    arm: str
    agent: str
    method: str
    path: str
    started_at: float
    status: int = 0
    upstream_status: int | None = None
    error: str = ""
    first_byte_at: float | None = None
    finished_at: float = 0.0
    bytes_up: int = 0
    bytes_down: int = 0
    retry_after: str = ""
    # The usage the vendor reported in the response (analysis.wire_usage), None without one.
    model: str = ""
    input: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None
    reasoning: int | None = None
    # Seconds the call waited at the proxy for its seat's fair-use slot (isolation.fair_use).
    queued_s: float = 0.0

    def set_usage(self, body: bytes, content_type: str, api: VendorPolicy) -> None:
        """Read the usage (and an error the vendor sent inside a 200 stream) from ``body``, as
        ``api`` reads its responses."""
        try:
            usage = api.wire_usage(body, content_type)
            failure = api.stream_error(body, content_type)
        except Exception as exc:  # a body built to break the parser is still a recorded call
            self.error = self.error or f"usage unreadable: {type(exc).__name__}"
            return
        if failure and not self.error and self.upstream_status == 200:
            self.error = f"vendor stream error: {failure}"
        if usage is not None:
            self.model = usage.model
            self.input, self.cache_read, self.cache_write = (
                usage.input,
                usage.cache_read,
                usage.cache_write,
            )
            self.output, self.reasoning = usage.output, usage.reasoning


@dataclass(frozen=True)
class Caller:
    """Whose seat token a request carried."""

    arm: str
    agent: str
    # The token itself (the spending ledger counts by it); not part of the seat's identity.
    token: str = field(default="", repr=False, compare=False)


@dataclass
class ModelProxy:
    """Forwards seats' requests to ``upstream`` (the vendor's base URL, e.g.
    ``https://api.vendor.example/v1``) with the real ``key`` in the API's auth header.

    Args:
        upstream: the vendor's base URL; requests must fall under its path.
        key: the real key (kept in memory only).
        api: the vendor's API (``agents.apis.get_api(name)``): which routes are forwarded,
            which tools are the vendor's own, the auth and billing headers, how a response
            reports its usage.
        server_tools: forward requests that declare tools the vendor runs itself (web search,
            fetch, code execution, remote MCP); refused (403) by default.
        host: the address to listen on (the seats' internal network's gateway).
        port: 0 picks a free one.
        record: called with every finished :class:`ModelCall` (the run's event log); its
            failures are kept in :attr:`record_errors`, never raised into a seat's request.
        timeout_s: socket timeout towards the vendor (a stream silent for this long fails).
        fair_use: per-seat concurrency and rate limits (``isolation.fair_use``); None: none.
        spending: the seats' token and cost budgets (``isolation.spending``): every answered
            call's usage is added to it, and a seat whose budget is spent gets the vendor's
            quota error (429) instead of a forward. None: no such budget.
        on_budget: called with (arm, agent, budget) each time a seat is refused for a spent
            budget (the runner stops the seat then); its failures are kept like ``record``'s.
    """

    upstream: str
    key: str = field(repr=False)
    api: VendorPolicy
    host: str = "127.0.0.1"
    port: int = 0
    record: Callable[[ModelCall], None] | None = None
    timeout_s: float = 600.0
    server_tools: bool = False
    fair_use: FairUse | None = None
    spending: Spending | None = None
    on_budget: Callable[[str, str, str], None] | None = None
    # In the order the calls finished, not started: a seat's next call can end first.
    calls: deque[ModelCall] = field(default_factory=lambda: deque(maxlen=CALLS_KEPT))
    call_count: int = 0
    record_errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"model proxy: upstream {self.upstream!r} is not an http(s) URL")
        if not self.key:
            raise ValueError("model proxy: no key to forward with")
        self._scheme = parts.scheme
        self._upstream_host = parts.hostname
        self._upstream_port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self._seats: dict[str, Caller] = {}
        self._lock = threading.Lock()
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._server = _Server((self.host, self.port), self)
        self._thread: threading.Thread | None = None

    # -- seats ---------------------------------------------------------------------------

    def add_seat(self, arm: str, agent: str) -> str:
        """A new seat token for ``arm``/``agent``: what the seat's container gets as its key."""
        token = TOKEN_PREFIX + secrets.token_hex(24)
        if self.spending is not None:
            self.spending.add_seat(token, arm, agent)
        with self._lock:
            self._seats[token] = Caller(arm, agent, token)
        return token

    def seat_for(self, headers: dict[str, str], query: list[tuple[str, str]]) -> Caller | None:
        """The seat whose token came with a request (in any header a CLI puts a key in, the
        API's own auth header among them)."""
        names = dict.fromkeys((*KEY_HEADERS, self.api.auth_header.lower()))
        offered = [headers.get(h, "") for h in names if h != "authorization"]
        bearer = headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            offered.append(bearer[7:].strip())
        offered += [v for k, v in query if k == "key"]
        with self._lock:
            for token in offered:
                if token and token in self._seats:
                    return self._seats[token]
        return None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def base_url(self) -> str:
        """The base URL a seat uses in place of the vendor's (same path)."""
        host, port = self.address
        return f"http://{host}:{port}{self.base_path}"

    def start(self) -> ModelProxy:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="model-proxy", daemon=True
            )
            self._thread.start()
        return self

    @property
    def refused_connections(self) -> int:
        """Connections closed at once because their container already held too many."""
        return self._server.refused

    def stop(self) -> None:
        """Stop accepting, cut the connections still open (their calls are recorded as cut
        off) and wait briefly for their handlers to record them."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.cut_all(wait_s=5.0)
        self._server.server_close()

    def __enter__(self) -> ModelProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- calls ---------------------------------------------------------------------------

    def _finish(self, call: ModelCall) -> None:
        call.finished_at = time.time()
        with self._lock:
            self.calls.append(call)
            self.call_count += 1
        if self.record is not None:
            try:
                self.record(call)
            except Exception as exc:  # the seat's request is done; the record must not hang it
                with self._lock:
                    self.record_errors.append(repr(exc))

    def allowed(self, method: str, path: str) -> bool:
        """True when ``method path`` is one of the API's model routes under the base path (no
        dot segments, no percent-encoding: the vendor's normalisation cannot turn it into
        another route)."""
        base = self.base_path
        if "%" in path or "//" in path or any(p in (".", "..") for p in path.split("/")):
            return False
        if base and not path.startswith(base + "/"):
            return False
        return self.api.allows(method, path[len(base) :])

    def _upstream_headers(self, headers: dict[str, str]) -> dict[str, str]:
        # Headers the seat named in Connection are hop-by-hop too (RFC 9110 7.6.1).
        named = {h.strip().lower() for h in headers.get("connection", "").split(",")}
        dropped = HOP_BY_HOP | CREDENTIALS | self.api.billing_headers | OVERRIDES | named
        out = {k: v for k, v in headers.items() if k not in dropped}
        out = {k: v for k, v in out.items() if not k.startswith(("x-forwarded-", "forwarded"))}
        out["accept-encoding"] = "identity"
        out[self.api.auth_header] = self.api.auth_value(self.key)
        return out

    def target(self, path: str, query: list[tuple[str, str]]) -> str:
        """The request target upstream: the path and the query parameters the API keeps."""
        kept = [(k, v) for k, v in query if k in self.api.query_kept]
        return path + (f"?{urlencode(kept)}" if kept else "")

    def _connect(self) -> http.client.HTTPConnection:
        """A connection to the vendor, opened within :data:`CONNECT_TIMEOUT_S`; then reads may
        wait :attr:`timeout_s` (a model may think a while before its first byte)."""
        conn: http.client.HTTPConnection
        if self._tls is not None:
            conn = http.client.HTTPSConnection(
                self._upstream_host,
                self._upstream_port,
                timeout=CONNECT_TIMEOUT_S,
                context=self._tls,
            )
        else:
            conn = http.client.HTTPConnection(
                self._upstream_host, self._upstream_port, timeout=CONNECT_TIMEOUT_S
            )
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout_s)
        return conn


class _SeatHandler(BaseHTTPRequestHandler):
    """One connection of a seat: every request on it identified, refused or forwarded by the
    :class:`ModelProxy` its server serves (:attr:`proxy`), and recorded as a :class:`ModelCall`."""

    protocol_version = "HTTP/1.1"
    server_version = "swarmlab-model-proxy"
    timeout = IDLE_TIMEOUT_S  # socket timeout: idle seats and stalled readers go

    def log_message(self, format: str, *args: Any) -> None:  # recorded as ModelCalls
        pass

    @property
    def proxy(self) -> ModelProxy:
        """The proxy this connection's server serves."""
        return cast(_Server, self.server).proxy

    def _line(self) -> bytes:
        line = self.rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise _BadRequest(431, "a line of the request body's framing is too long")
        return line

    def _body(self) -> bytes:
        """The request body, refused (413/400) when too large or badly framed."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size_text = self._line().split(b";")[0].strip()
                if not size_text or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
                    raise _BadRequest(400, "bad chunk size in the request body")
                size = int(size_text, 16)
                if size == 0:
                    while self._line() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                if len(data) + size > MAX_BODY:
                    raise _BadRequest(413, f"request body over {MAX_BODY} bytes")
                data += self.rfile.read(size)
                self._line()
        length_text = (self.headers.get("Content-Length") or "0").strip()
        if not length_text.isdigit():
            raise _BadRequest(400, "bad Content-Length")
        length = int(length_text)
        if length > MAX_BODY:
            raise _BadRequest(413, f"request body over {MAX_BODY} bytes")
        return self.rfile.read(length) if length else b""

    def _refuse(self, call: ModelCall, status: int, message: str) -> None:
        """Answer the seat with ``status`` (the call is recorded by the caller)."""
        call.status, call.error = status, message
        data = json.dumps({"error": {"type": "swarmlab_proxy", "message": message}}).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _forward(self) -> None:
        """Every method: identify the seat, serve the request, record the call."""
        parts = urlsplit(self.path)
        query = parse_qsl(parts.query, keep_blank_values=True)
        headers = {k.lower(): v for k, v in self.headers.items()}
        seat = self.proxy.seat_for(headers, query)
        call = ModelCall(
            seat.arm if seat else "",
            seat.agent if seat else "",
            self.command,
            parts.path[:2000],
            time.time(),
        )
        try:
            self._serve(call, seat, parts.path, query, headers)
        except _BadRequest as exc:
            self.close_connection = True  # what is left of the body is not read
            self._refuse(call, exc.status, exc.message)
        except Exception as exc:  # nothing a seat sends may skip its call's record
            call.error = call.error or f"proxy error: {type(exc).__name__}: {exc}"
            call.status = call.status or 500
            self.close_connection = True
        finally:
            if seat is not None and self.proxy.spending is not None:
                self.proxy.spending.add(seat.token, call)  # what the vendor billed
            self.proxy._finish(call)

    def _serve(
        self,
        call: ModelCall,
        seat: Caller | None,
        path: str,
        query: list[tuple[str, str]],
        headers: dict[str, str],
    ) -> None:
        refusal = self._refusal(seat, path, headers)
        if refusal is not None:
            # Before the body is read (it stays unread: the connection closes).
            self.close_connection = True
            self._refuse(call, *refusal)
            return
        body = self._body()
        call.bytes_up = len(body)
        # After the body is read: a socket closed with unread data is reset, and the
        # seat would see a broken connection instead of the quota error.
        if seat is not None and self._over_budget(call, seat):
            return
        tools = [] if self.proxy.server_tools else self.proxy.api.server_side_tools(body)
        if tools:
            self._refuse(
                call,
                403,
                f"server-side tools not allowed ({', '.join(sorted(set(tools)))}): the"
                " vendor would reach the network for the seat",
            )
            return
        if self.proxy.fair_use is None:
            self._call_vendor(call, self.proxy.target(path, query), body, headers)
            return
        # Over the seat's share a request waits for its slot (isolation.fair_use).
        with self.proxy.fair_use.slot(seat) as grant:
            call.queued_s = round(grant.waited_s, 6)
            if not grant.ok:
                self._rate_limited(call, grant.retry_after)
                return
            self._call_vendor(call, self.proxy.target(path, query), body, headers)

    def _rate_limited(self, call: ModelCall, retry_after: str) -> None:
        """429 with ``Retry-After`` in the vendor's own shape: the CLI retries as it
        does when the vendor's rate limit is hit."""
        message = (
            "swarmlab fair use: this seat's share of the account's rate limit is in"
            f" use; retry after {retry_after} s"
        )
        call.status, call.error, call.retry_after = 429, "fair use: " + message, retry_after
        data = self.proxy.api.rate_limit_error(message)
        try:
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Retry-After", retry_after)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _over_budget(self, call: ModelCall, seat: Caller) -> bool:
        """A seat whose token or cost budget is spent gets the vendor's own quota
        error (recorded: 429, no upstream status, ``error`` naming the budget); True
        when so. Calls in flight when the limit was crossed were not stopped."""
        budget = self.proxy.spending.spent(seat.token) if self.proxy.spending else None
        if budget is None:
            return False
        message = f"swarmlab budget: this seat's {budget} budget is spent"
        status, error = self.proxy.api.quota_error(message)
        call.status, call.error = status, f"refused: budget {budget} spent"
        data = json.dumps(error).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True
        if self.proxy.on_budget is not None:
            try:
                self.proxy.on_budget(seat.arm, seat.agent, budget)
            except Exception as exc:  # the runner's trouble, not the seat's request
                with self.proxy._lock:
                    self.proxy.record_errors.append(repr(exc))
        return True

    def _refusal(
        self, seat: Caller | None, path: str, headers: dict[str, str]
    ) -> tuple[int, str] | None:
        """(status, message) for a request refused on its head alone, or None."""
        if seat is None:
            return 401, "no seat token: the proxy forwards seats' calls only"
        if headers.get("upgrade"):
            return 426, "no protocol upgrade through the proxy: use HTTP"
        if not self.proxy.allowed(self.command, path):
            return 403, f"{self.command} {path}: not a model route of the API"
        return None

    def _call_vendor(
        self, call: ModelCall, target: str, body: bytes, headers: dict[str, str]
    ) -> None:
        try:
            conn = self.proxy._connect()
        except (OSError, http.client.HTTPException) as exc:
            self._refuse(call, 502, f"vendor unreachable: {type(exc).__name__}: {exc}")
            return
        try:
            try:
                conn.request(
                    self.command, target, body or None, self.proxy._upstream_headers(headers)
                )
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self._refuse(call, 502, f"vendor unreachable: {type(exc).__name__}: {exc}")
                return
            call.first_byte_at = time.time()
            call.upstream_status = call.status = response.status
            call.retry_after = (response.getheader("retry-after") or "")[:100]
            self._pass_back(call, response)
        finally:
            conn.close()

    def _seat_gone(self, call: ModelCall, exc: OSError) -> None:
        call.error = f"seat went away: {type(exc).__name__}"
        self.close_connection = True

    def _send_head(self, response: http.client.HTTPResponse, chunked: bool) -> None:
        """The vendor's status and headers (less the hop-by-hop ones), framed anew."""
        bodiless = _bodiless(response.status)
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP | {"date", "server"}:
                self.send_header(key, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif not bodiless:
            self.send_header("Content-Length", str(response.getheader("content-length")))
        self.end_headers()
        self.wfile.flush()

    def _relay(
        self,
        call: ModelCall,
        response: http.client.HTTPResponse,
        chunked: bool,
        kept: bytearray,
    ) -> bool:
        """Pass the body on as it arrives, keeping its start in ``kept``; False when
        either side broke off (``call.error`` says which)."""
        while True:
            try:
                data = response.read1(READ_SIZE)
            except (OSError, http.client.HTTPException) as exc:
                call.error = f"vendor stream broke: {type(exc).__name__}: {exc}"
                self.close_connection = True  # the seat sees a cut-off stream
                return False
            if not data:
                break
            call.bytes_down += len(data)
            if call.bytes_down <= KEEP_BYTES:
                kept += data
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                self.wfile.flush()
            except OSError as exc:
                self._seat_gone(call, exc)
                self._read_to_the_end(call, response, kept)
                return False
        if chunked:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError as exc:
                self._seat_gone(call, exc)
                return False
        return True

    def _read_to_the_end(
        self, call: ModelCall, response: http.client.HTTPResponse, kept: bytearray
    ) -> None:
        """The rest of a response whose seat went away, read and kept, not sent: a
        vendor may report a stream's usage only in its last events (each API module's
        ``usage_of`` reads them), so a seat that hung up before it would otherwise have
        its generation never counted against its budget. Ends with the vendor's
        stream, or on a broken one (what was kept still counts)."""
        while True:
            try:
                data = response.read1(READ_SIZE)
            except (OSError, http.client.HTTPException):
                return
            if not data:
                return
            call.bytes_down += len(data)
            if call.bytes_down <= KEEP_BYTES:
                kept += data

    def _pass_back(self, call: ModelCall, response: http.client.HTTPResponse) -> None:
        bodiless = _bodiless(response.status)
        length = response.getheader("content-length")
        chunked = not bodiless and (length is None or bool(response.chunked))
        kept = bytearray()
        try:
            try:
                self._send_head(response, chunked)
            except OSError as exc:
                self._seat_gone(call, exc)
                return
            if not bodiless:
                self._relay(call, response, chunked, kept)
        finally:
            # What the vendor sent so far, even when cut off: billed tokens are counted.
            if kept and call.bytes_down <= KEEP_BYTES:
                content_type = response.getheader("content-type") or ""
                call.set_usage(bytes(kept), content_type, self.proxy.api)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward


def _bodiless(status: int) -> bool:
    return status in (204, 304) or 100 <= status < 200


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class _Server(ThreadingHTTPServer):
    """A threaded server that caps the connections each client address holds open and can
    cut every open connection when the proxy stops."""

    daemon_threads = True
    # Seats' connections arriving at once (parallel calls of many seats) wait in the listen
    # queue instead of being dropped (a dropped SYN costs its caller a second or more).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], proxy: ModelProxy) -> None:
        super().__init__(address, _SeatHandler)
        self.proxy = proxy
        self.refused = 0
        self._guard = threading.Lock()
        self._per_client: dict[str, int] = {}
        self._open: dict[socket.socket, threading.Thread | None] = {}

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0])
        with self._guard:
            if self._per_client.get(client, 0) >= MAX_CONNECTIONS_PER_CLIENT:
                self.refused += 1
                refuse = True
            else:
                self._per_client[client] = self._per_client.get(client, 0) + 1
                self._open[request] = None
                refuse = False
        if refuse:
            self.shutdown_request(request)
            return
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        with self._guard:
            self._open[request] = thread
        thread.start()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            client = str(client_address[0])
            with self._guard:
                self._per_client[client] = max(0, self._per_client.get(client, 1) - 1)
                self._open.pop(request, None)

    def cut_all(self, wait_s: float) -> None:
        with self._guard:
            open_now = dict(self._open)
        for request in open_now:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)
        deadline = time.time() + wait_s
        for thread in open_now.values():
            if thread is not None:
                thread.join(timeout=max(0.0, deadline - time.time()))
