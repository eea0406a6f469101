"""The model proxy (``isolation.model_proxy``) in front of real local endpoints speaking the
vendors' protocols (``tests.support.endpoints``), and the outages computed from what it recorded
(``analysis.model_calls``). Real sockets, real HTTP; no container needed."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.apis import VendorApi, get_api
from analysis.model_calls import failed, seat_outages
from isolation.model_proxy import TOKEN_PREFIX, ModelCall, ModelProxy
from runner.events import EventLog
from tests.support.endpoints import ENDPOINTS, USAGE_KEYS, session_script

KEY = "sk-real-vendor-key-0123456789"


class _AnyRoute(VendorApi):
    """Every path under the base path, any method: a test's local endpoint only."""

    name = "any"
    routes = (("*", re.compile(r"(/.*)?")),)


ANY_ROUTE = _AnyRoute()


def _post(
    proxy: ModelProxy, path: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    host, port = proxy.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        headers = {"content-type": "application/json", **headers}
        conn.request("POST", path, json.dumps(body), headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _anthropic_call(stream: bool = True) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
    }


@pytest.fixture
def anthropic():
    with ENDPOINTS["anthropic"](session_script("anthropic"), api_key=KEY) as endpoint:
        yield endpoint


def test_a_seat_token_is_swapped_for_the_key_and_the_call_is_recorded(anthropic, tmp_path):
    events = EventLog(tmp_path / "events.sqlite")
    with ModelProxy(
        anthropic.url, KEY, get_api("anthropic"), record=events.add_model_call
    ) as proxy:
        token = proxy.add_seat("swarm", "w1")
        assert token.startswith(TOKEN_PREFIX) and KEY not in token
        status, _, body = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
    assert status == 200, body
    assert b"message_stop" in body  # the whole stream came through
    assert [r.authorized for r in anthropic.requests] == [True]
    assert anthropic.replies and anthropic.replies[0].path == "/v1/messages"
    (row,) = events.table("model_calls")
    assert (row["arm"], row["agent"], row["method"], row["path"]) == (
        "swarm", "w1", "POST", "/v1/messages",
    )  # fmt: skip
    assert row["status"] == row["upstream_status"] == 200 and row["error"] == ""
    # The tokens the vendor's response reported, read on the wire by the proxy.
    (reply,) = anthropic.replies
    assert row["model"] == reply.model
    assert {k: row[k] for k in USAGE_KEYS} == {k: reply.usage.get(k, 0) for k in USAGE_KEYS}
    assert row["started_at"] <= row["first_byte_at"] <= row["finished_at"]
    assert row["bytes_down"] == len(body) and row["bytes_up"] > 0
    assert KEY.encode() not in body and KEY not in json.dumps(row)


def test_without_a_seat_token_nothing_reaches_the_vendor(anthropic):
    with ModelProxy(anthropic.url, KEY, get_api("anthropic")) as proxy:
        proxy.add_seat("swarm", "w1")
        for headers in ({}, {"x-api-key": KEY}, {"x-api-key": TOKEN_PREFIX + "0" * 48}):
            status, _, body = _post(proxy, "/v1/messages", _anthropic_call(), headers)
            assert status == 401, body
            assert KEY.encode() not in body
    assert anthropic.requests == []
    assert [c.status for c in proxy.calls] == [401, 401, 401]
    assert all(c.arm == "" and c.upstream_status is None for c in proxy.calls)
    assert seat_outages([c.__dict__ for c in proxy.calls]) == {}  # no seat, no outage


def test_only_the_apis_model_routes_are_forwarded_and_upgrades_are_refused():
    endpoint = ENDPOINTS["openai"](session_script("openai"), api_key=KEY)
    with endpoint, ModelProxy(endpoint.url + "/v1", KEY, get_api("openai")) as proxy:
        token = proxy.add_seat("solo", "w1")
        auth = {"authorization": f"Bearer {token}"}
        assert proxy.base_url.endswith("/v1")
        # Elsewhere on the vendor's API the key could upload files, fine-tune, read the org.
        refused = [
            "/admin/keys", "/v1x/responses", "/v1/files", "/v1/fine_tuning/jobs",
            "/v1/responses/../files", "/v1/%2e%2e/files", "/v1//responses", "/v1/responses/x",
        ]  # fmt: skip
        for path in refused:
            status, _, body = _post(proxy, path, {}, auth)
            assert status == 403 and b"not a model route" in body, (path, status)
        upgrade = {**auth, "connection": "Upgrade", "upgrade": "websocket"}
        assert _post(proxy, "/v1/responses", {}, upgrade)[0] == 426
        # An absolute-form target names another host: only its path is used, upstream.
        host, port = proxy.address
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("GET", "http://evil.example/v1/models", headers=auth)
        assert conn.getresponse().status == 200
        conn.close()
        # Headers that would bill another organisation or project never leave the proxy.
        billing = {**auth, "OpenAI-Organization": "org-other", "OpenAI-Project": "proj-other"}
        status, _, _ = _post(proxy, "/v1/responses", {"model": "m", "input": "hi"}, billing)
        assert status == 200
    assert [(r.method, r.path) for r in endpoint.requests] == [
        ("GET", "/v1/models"), ("POST", "/v1/responses"),
    ]  # fmt: skip
    assert all(r.authorized for r in endpoint.requests)
    assert [c.status for c in proxy.calls].count(403) == len(refused)


@pytest.mark.parametrize(
    ("api", "base", "method", "path", "ok"),
    [
        ("anthropic", "", "POST", "/v1/messages", True),
        ("anthropic", "", "POST", "/v1/messages/count_tokens", True),
        ("anthropic", "", "GET", "/v1/models/claude-sonnet-4-5", True),
        ("anthropic", "", "POST", "/v1/messages/batches", False),
        ("anthropic", "", "GET", "/v1/messages", False),
        ("anthropic", "", "POST", "/v1/files", False),
        ("anthropic", "/anthropic", "POST", "/anthropic/v1/messages", True),
        ("anthropic", "/anthropic", "POST", "/v1/messages", False),
        ("openai", "/v1", "POST", "/v1/chat/completions", True),
        ("openai", "/v1", "GET", "/v1/models", True),
        ("openai", "/v1", "POST", "/v1/responses/compact", True),
        ("openai", "/v1", "POST", "/v1/batches", False),
        ("openai", "/v1", "DELETE", "/v1/models/ft-mine", False),
        ("gemini", "", "POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", True),
        ("gemini", "", "POST", "/v1beta/models/gemini-2.5-pro:countTokens", True),
        ("gemini", "", "GET", "/v1beta/models", True),
        ("gemini", "", "POST", "/v1beta/tunedModels", False),
        ("gemini", "", "POST", "/v1beta/models/x:batchGenerateContent", False),
        ("gemini", "", "POST", "/upload/v1beta/files", False),
    ],
)
def test_the_model_routes_of_each_api(api, base, method, path, ok):
    proxy = ModelProxy(f"https://vendor.example{base}", KEY, get_api(api))
    try:
        assert proxy.allowed(method, path) is ok
    finally:
        proxy.stop()


def test_a_key_in_the_url_is_a_seat_token_and_never_forwarded():
    endpoint = ENDPOINTS["gemini"](session_script("gemini"), api_key=KEY)
    with endpoint, ModelProxy(endpoint.url, KEY, get_api("gemini")) as proxy:
        token = proxy.add_seat("solo", "w1")
        status, _, body = _post(
            proxy,
            f"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={token}",
            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            {},
        )
    assert status == 200, body
    (request,) = endpoint.requests
    assert request.authorized and "key=" not in request.path and "alt=sse" in request.path


class _HeldStream(BaseHTTPRequestHandler):
    """A chunked event stream of :meth:`frames`; at a None it waits for ``release`` (set by
    the test), and it pauses ``pause_s`` before each frame."""

    protocol_version = "HTTP/1.1"
    release = threading.Event()
    pause_s = 0.0

    def log_message(self, *args: Any) -> None:
        pass

    def frames(self) -> list[bytes | None]:
        raise NotImplementedError

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for frame in self.frames():
            if frame is None:
                self.release.wait(20)
                continue
            time.sleep(self.pause_s)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


class _SlowStream(_HeldStream):
    """Sends one event, then waits until the test has read it before sending the last."""

    release = threading.Event()

    def frames(self) -> list[bytes | None]:
        return [b"data: first\n\n", None, b"data: last\n\n"]


@pytest.fixture
def slow_stream():
    """The URL of an upstream that streams one event and holds the last one back until
    ``_SlowStream.release`` is set."""
    _SlowStream.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _SlowStream.release.set()
        server.shutdown()
        server.server_close()


def _first_event(proxy: ModelProxy) -> tuple[http.client.HTTPConnection, Any]:
    """A seat's streamed call through ``proxy``, read up to its first event."""
    token = proxy.add_seat("solo", "w1")
    host, port = proxy.address
    conn = http.client.HTTPConnection(host, port, timeout=15)
    conn.request("POST", "/stream", b"{}", {"authorization": f"Bearer {token}"})
    response = conn.getresponse()
    # The upstream holds its last event back until we have the first: a proxy that buffered
    # the stream would time out here.
    assert response.read1(1024) == b"data: first\n\n"
    return conn, response


def test_a_stream_is_passed_on_as_it_arrives_not_when_it_ends(slow_stream):
    with ModelProxy(slow_stream, KEY, ANY_ROUTE) as proxy:
        conn, response = _first_event(proxy)
        _SlowStream.release.set()
        assert response.read() == b"data: last\n\n"
        conn.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_vendor_is_a_502_and_a_recorded_failure():
    with ModelProxy(f"http://127.0.0.1:{_closed_port()}", KEY, get_api("anthropic")) as proxy:
        token = proxy.add_seat("solo", "w1")
        status, _, body = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
    assert status == 502 and b"vendor unreachable" in body
    (call,) = proxy.calls
    assert call.upstream_status is None and failed(call.__dict__)
    outage = seat_outages([call.__dict__])[("solo", "w1")]
    assert outage.failed == 1 and outage.statuses == {"unreachable": 1} and outage.open_at_end


@pytest.mark.parametrize(("vendor", "status"), [("anthropic", 429), ("anthropic", 529)])
def test_rate_limits_are_passed_on_and_the_time_until_recovery_is_lost(vendor, status):
    endpoint = ENDPOINTS[vendor](
        session_script(vendor), api_key=KEY, failures=2, failure_status=status, retry_after="3"
    )
    with endpoint, ModelProxy(endpoint.url, KEY, get_api("anthropic")) as proxy:
        token = proxy.add_seat("solo", "w1")
        auth = {"x-api-key": token}
        seen = [_post(proxy, "/v1/messages", _anthropic_call(), auth) for _ in "abc"]
    assert [s for s, _, _ in seen] == [status, status, 200]
    assert seen[0][1].get("Retry-After") == "3"
    assert json.loads(seen[0][2])["type"] == "error"
    calls = [c.__dict__ for c in proxy.calls]
    assert [c["retry_after"] for c in calls] == ["3", "3", ""]
    outage = seat_outages(calls)[("solo", "w1")]
    assert (outage.calls, outage.failed, outage.outages) == (3, 2, 1)
    assert outage.statuses == {str(status): 2} and not outage.open_at_end
    assert outage.lost_s == pytest.approx(calls[2]["started_at"] - calls[0]["started_at"], abs=1e-3)


def _call(start: float, status: int | None, end: float | None = None, **kw: Any) -> dict:
    base = ModelCall("a", "s", "POST", "/v1/messages", start, status or 0, status, **kw)
    base.finished_at = end if end is not None else start + 1
    return base.__dict__


def test_outages_open_on_a_failure_and_close_on_the_next_answered_call():
    calls = [
        _call(0, 200),
        _call(10, 429, 10.5),
        _call(12, 529, 13),
        _call(20, None, 20.1, error="vendor unreachable: ConnectionRefusedError"),
        _call(25, 200),  # recovery: 15 s lost
        _call(30, 404),  # the caller's fault, answered: not a failure
        _call(40, 200, 41, error="vendor stream broke: IncompleteRead"),
        _call(50, 500, 51),  # open at the end: closed at its end, 11 s
    ]
    outage = seat_outages(calls)[("a", "s")]
    assert outage.failed == 5 and outage.outages == 2 and outage.open_at_end
    assert outage.statuses == {
        "429": 1, "529": 1, "unreachable": 1, "200 stream broke": 1, "500": 1,
    }  # fmt: skip
    assert outage.lost_s == pytest.approx(15 + 11)


def test_a_refusal_by_the_relay_does_not_end_an_outage():
    calls = [_call(0, 429), _call(1, None, error=""), _call(5, 200)]
    calls[1]["status"] = 426  # refused by the proxy: never reached the vendor
    outage = seat_outages(calls)[("a", "s")]
    assert outage.failed == 1 and outage.lost_s == pytest.approx(5)


# -- what an adversarial seat may send -------------------------------------------------------


def _raw(proxy: ModelProxy, data: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes to the proxy; what came back until it closed (or the timeout)."""
    with socket.create_connection(proxy.address, timeout=timeout) as conn:
        conn.sendall(data)
        out = b""
        try:
            while chunk := conn.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def test_bodies_too_large_or_badly_framed_are_refused_before_they_are_read(anthropic):
    with ModelProxy(anthropic.url, KEY, get_api("anthropic")) as proxy:
        token = proxy.add_seat("solo", "w1")
        head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\n"
        # 20 GB announced, nothing sent: refused at once, the connection closed.
        huge = _raw(proxy, f"{head}Content-Length: 20000000000\r\n\r\n".encode())
        assert huge.startswith(b"HTTP/1.1 413"), huge[:100]
        for length in ("-1", "abc", "1e9"):
            bad = _raw(proxy, f"{head}Content-Length: {length}\r\n\r\n".encode())
            assert bad.startswith(b"HTTP/1.1 400"), (length, bad[:100])
        chunks = _raw(proxy, f"{head}Transfer-Encoding: chunked\r\n\r\n-1\r\nx\r\n".encode())
        assert chunks.startswith(b"HTTP/1.1 400"), chunks[:100]
        endless = _raw(proxy, f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + b"1" * 20000)
        assert endless.startswith(b"HTTP/1.1 431"), endless[:100]
    assert anthropic.requests == []  # nothing reached the vendor
    assert sorted(c.status for c in proxy.calls) == [400, 400, 400, 400, 413, 431]


def test_a_chunked_body_and_keep_alive_requests_are_forwarded(anthropic):
    with ModelProxy(anthropic.url, KEY, get_api("anthropic")) as proxy:
        token = proxy.add_seat("solo", "w1")
        body = json.dumps(_anthropic_call(stream=False)).encode()
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\n"
        first = f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + chunked
        second = f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        out = _raw(proxy, first + second)  # two requests on one connection
    assert out.count(b"HTTP/1.1 200") == 2, out[:300]
    assert [r.authorized for r in anthropic.requests] == [True, True]
    assert [c.status for c in proxy.calls] == [200, 200]


def test_a_seat_cannot_hold_more_than_its_share_of_connections(anthropic, monkeypatch):
    monkeypatch.setattr("isolation.model_proxy.MAX_CONNECTIONS_PER_CLIENT", 3)
    with ModelProxy(anthropic.url, KEY, get_api("anthropic")) as proxy:
        token = proxy.add_seat("solo", "w1")
        held = [socket.create_connection(proxy.address, timeout=10) for _ in range(3)]
        try:
            time.sleep(0.3)
            extra = _raw(proxy, b"GET /v1/models HTTP/1.1\r\n\r\n", timeout=5)
            assert extra == b""  # closed at once, unanswered
            assert proxy.refused_connections == 1
        finally:
            for conn in held:
                conn.close()
        time.sleep(0.3)  # their handlers notice and free the slots
        status, _, _ = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
        assert status == 200


def test_a_seat_that_goes_away_mid_stream_is_recorded_with_what_was_sent(slow_stream):
    with ModelProxy(slow_stream, KEY, ANY_ROUTE) as proxy:
        conn, _ = _first_event(proxy)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        _SlowStream.release.set()  # the last event meets a closed seat
        deadline = time.time() + 10
        while not proxy.calls and time.time() < deadline:
            time.sleep(0.05)
    (call,) = proxy.calls
    assert call.status == 200 and call.error.startswith("seat went away"), call
    assert not failed(call.__dict__)  # the seat's doing, not the endpoint's


def _sse(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class _UsageAtTheEnd(_HeldStream):
    """Anthropic's stream: input usage first, the output tokens only in ``message_delta`` at
    the end, which it sends once the test has hung up, after many chunks (a write to the closed
    seat fails before the usage arrives)."""

    release = threading.Event()
    pause_s = 0.01

    def frames(self) -> list[bytes | None]:
        start = {"type": "message_start", "message": {"model": "claude-x", "usage": {
            "input_tokens": 11, "output_tokens": 1}}}  # fmt: skip
        delta = {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "word "}}  # fmt: skip
        end = [
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"output_tokens": 4321}},
            {"type": "message_stop"},
        ]  # fmt: skip
        return [_sse(start), None, *[_sse(delta)] * 40, _sse(*end)]


def test_a_seat_that_hangs_up_before_the_usage_is_still_charged_for_it():
    """A seat may not dodge its token budget by hanging up before the vendor's usage arrives:
    the proxy reads the stream to its end and counts what the vendor reported."""
    _UsageAtTheEnd.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _UsageAtTheEnd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        upstream = f"http://127.0.0.1:{server.server_address[1]}"
        with ModelProxy(upstream, KEY, get_api("anthropic")) as proxy:
            token = proxy.add_seat("solo", "w1")
            host, port = proxy.address
            conn = http.client.HTTPConnection(host, port, timeout=15)
            body = json.dumps(_anthropic_call()).encode()
            conn.request("POST", "/v1/messages", body, {"x-api-key": token})
            assert b"message_start" in conn.getresponse().read1(4096)
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            _UsageAtTheEnd.release.set()  # the end of the stream meets a closed seat
            deadline = time.time() + 10
            while not proxy.calls and time.time() < deadline:
                time.sleep(0.05)
    finally:
        _UsageAtTheEnd.release.set()
        server.shutdown()
        server.server_close()
    (call,) = proxy.calls
    assert call.error.startswith("seat went away"), call
    assert (call.input, call.output) == (11, 4321), call


def test_stopping_the_proxy_cuts_and_records_the_calls_in_flight(slow_stream):
    proxy = ModelProxy(slow_stream, KEY, ANY_ROUTE).start()
    conn, _ = _first_event(proxy)
    threading.Timer(1.0, _SlowStream.release.set).start()  # the vendor goes on later
    proxy.stop()  # the run ends with the stream still open
    conn.close()
    assert proxy.call_count == 1, list(proxy.calls)
    (call,) = proxy.calls
    assert call.error.startswith("seat went away"), call


class _ErrorInStream(BaseHTTPRequestHandler):
    """A 200 stream that turns into Anthropic's overloaded error half way."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        events = [
            {"type": "message_start", "message": {"model": "m", "usage": {
                "input_tokens": 11, "output_tokens": 1}}},
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]  # fmt: skip
        data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_an_error_inside_a_200_stream_is_a_failure_and_its_tokens_count():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ErrorInStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        upstream = f"http://127.0.0.1:{server.server_address[1]}"
        with ModelProxy(upstream, KEY, get_api("anthropic")) as proxy:
            token = proxy.add_seat("solo", "w1")
            status, _, _ = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200
    (call,) = proxy.calls
    assert call.error == "vendor stream error: overloaded_error" and call.input == 11
    outage = seat_outages([call.__dict__])[("solo", "w1")]
    assert outage.statuses == {"200 overloaded_error": 1} and outage.open_at_end


def test_a_body_built_to_break_the_usage_parser_is_still_recorded():
    call = ModelCall("a", "s", "POST", "/v1/messages", 0.0, 200, 200)
    api, overflow = get_api("anthropic"), b'{"type":"message","usage":{"output_tokens":1e999}}'
    call.set_usage(b"[" * 100_000 + b"]" * 100_000, "application/json", api)
    call.set_usage(overflow, "application/json", api)
    assert call.output is None  # nothing readable, nothing invented
    assert call.error == "usage unreadable: OverflowError"


def test_an_outage_needs_an_answered_generation_call_to_end():
    calls = [
        _call(0, 529, 1),
        _call(2, 200, 3),
        _call(5, 200, 6),
    ]
    calls[1]["path"] = "/v1/messages/count_tokens"  # answered, but not a model reply
    outage = seat_outages(calls)[("a", "s")]
    assert outage.lost_s == pytest.approx(5) and outage.outages == 1


def test_a_long_failed_call_does_not_stretch_a_later_outage():
    calls = [
        _call(0, 200, 1000, error="vendor stream broke: IncompleteRead"),  # 0 .. 1000
        _call(10, 200, 11),  # recovery: 10 s lost
        _call(20, 529, 21),  # open at the end: 1 s, not 1000 - 20
    ]
    outage = seat_outages(calls)[("a", "s")]
    assert outage.lost_s == pytest.approx(11) and outage.open_at_end


@pytest.mark.parametrize(
    ("api", "tools", "extra", "found"),
    [
        ("anthropic", [{"type": "web_search_20250305", "name": "web_search"}], {}, True),
        ("anthropic", [{"type": "web_fetch_20250910", "name": "web_fetch"}], {}, True),
        ("anthropic", [{"name": "Bash", "input_schema": {}}], {}, False),
        ("anthropic", [{"type": "bash_20250124", "name": "bash"}], {}, False),  # runs at the seat
        ("anthropic", [], {"mcp_servers": [{"type": "url", "url": "https://x"}]}, True),
        ("openai", [{"type": "web_search"}], {}, True),
        ("openai", [{"type": "mcp", "server_url": "https://x"}], {}, True),
        ("openai", [{"type": "function", "name": "shell"}, {"type": "custom"}], {}, False),
        ("openai", [], {"web_search_options": {}}, True),
        ("gemini", [{"googleSearch": {}}], {}, True),
        ("gemini", [{"urlContext": {}}], {}, True),
        ("gemini", [{"functionDeclarations": [{"name": "run_shell_command"}]}], {}, False),
    ],
)
def test_tools_the_vendor_runs_itself_are_found(api, tools, extra, found):
    body = json.dumps({"model": "m", "tools": tools, **extra}).encode()
    assert bool(get_api(api).server_side_tools(body)) is found


def test_a_request_with_a_server_side_tool_never_reaches_the_vendor(anthropic):
    web = {**_anthropic_call(), "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    with ModelProxy(anthropic.url, KEY, get_api("anthropic")) as proxy:
        token = proxy.add_seat("solo", "w1")
        status, _, body = _post(proxy, "/v1/messages", web, {"x-api-key": token})
        assert status == 403 and b"web_search_20250305" in body
        plain = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
        assert plain[0] == 200
    assert len(anthropic.requests) == 1  # only the plain call
    with ModelProxy(anthropic.url, KEY, get_api("anthropic"), server_tools=True) as proxy:
        token = proxy.add_seat("solo", "w1")
        _post(proxy, "/v1/messages", web, {"x-api-key": token})
    assert len(anthropic.requests) == 2  # with server_tools=True it was forwarded
