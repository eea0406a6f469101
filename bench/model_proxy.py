"""What does the model proxy add to a seat's model call? Goal: a few milliseconds against calls
that take seconds at a real vendor.

    .venv/bin/python bench/model_proxy.py [--calls 200] [--events 200]

A local Anthropic Messages endpoint (:class:`StreamingMessages`: the stream shaped as the real
API and ``tests/support/endpoints`` shape it; the bench depends on no test helper) streams a
reply of ``--events`` server-sent events; the same call is made directly and through
``isolation.model_proxy``, interleaved (direct, proxied, direct, ...) so that machine noise
falls on both alike. Prints the median time to the first byte and to the end of the stream for
each, and their ratios, measured in this run. The proxy here forwards over plain HTTP on
loopback: a vendor adds a TLS handshake per call (the proxy opens one upstream connection per
call), not measured here.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.apis import get_api
from isolation.model_proxy import ModelProxy

KEY = "sk-bench-key"


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """Usage in the Messages API's fields."""
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message_events(words: int, input_tokens: int = 100) -> list[bytes]:
    """One streamed Messages reply of ``words`` text deltas (one output token each), its
    server-sent events in the real API's order, each as it goes on the wire."""
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": _usage(input_tokens, 1),
            },
        },
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": f"word{i}" + (" " if i < words - 1 else "")}}
            for i in range(words)
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": _usage(input_tokens, words),
        },
        {"type": "message_stop"},
    ]  # fmt: skip
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


class StreamingMessages:
    """``POST /v1/messages`` on loopback answering every call with the same streamed reply
    (chunked, one chunk per event), for the calls that bring ``key`` in ``x-api-key``."""

    def __init__(self, key: str, events: list[bytes]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/messages" or self.headers.get("x-api-key") != outer.key:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in outer.events:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.key, self.events = key, events
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        """Where it listens."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """Its base URL (the API's paths go under it)."""
        host, port = self.address
        return f"http://{host}:{port}"

    def __enter__(self) -> StreamingMessages:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def one_call(host: str, port: int, key: str, body: bytes) -> tuple[float, float, int]:
    """Seconds to the first byte and to the end of the stream; bytes received."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request(
        "POST", "/v1/messages", body, {"x-api-key": key, "content-type": "application/json"}
    )
    response = conn.getresponse()
    first = response.read1(65536)
    first_at = time.perf_counter()
    size = len(first) + len(response.read())
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}")
    return first_at - started, time.perf_counter() - started, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls each way")
    parser.add_argument("--events", type=int, default=200, help="words in the streamed reply")
    args = parser.parse_args(argv)
    body = json.dumps(
        {"model": "bench", "max_tokens": 10, "stream": True,
         "messages": [{"role": "user", "content": "go"}],
         # A tool makes it the script's turn (without one the endpoint answers a side call).
         "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
    ).encode()  # fmt: skip
    with (
        StreamingMessages(KEY, message_events(args.events)) as endpoint,
        ModelProxy(endpoint.url, KEY, get_api("anthropic")) as proxy,
    ):
        token = proxy.add_seat("bench", "w1")
        direct_at = endpoint.address
        proxy_at = proxy.address
        times: dict[str, list[tuple[float, float, int]]] = {"direct": [], "proxy": []}
        for i in range(args.calls * 2):
            if i % 2 == 0:
                times["direct"].append(one_call(*direct_at, KEY, body))
            else:
                times["proxy"].append(one_call(*proxy_at, token, body))
    median = {
        way: (statistics.median(t[0] for t in rows), statistics.median(t[1] for t in rows))
        for way, rows in times.items()
    }
    size = times["proxy"][0][2]
    print(f"{args.calls} calls each way, interleaved; streamed reply {size} bytes")
    for way, (first, end) in median.items():
        print(f"  {way:6s}  first byte {first * 1000:7.2f} ms   end {end * 1000:7.2f} ms")
    d, p = median["direct"], median["proxy"]
    print(
        f"  proxy/direct  first byte {p[0] / d[0]:.2f}x   end {p[1] / d[1]:.2f}x"
        f"   (+{(p[1] - d[1]) * 1000:.2f} ms a call)"
    )
    ok = all(c.status == 200 and c.output == args.events for c in proxy.calls)
    print(f"  every proxied call recorded with its usage: {ok} ({len(proxy.calls)} calls)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
