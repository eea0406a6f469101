"""What does the model proxy add to a seat's model call? Goal: a few milliseconds against calls
that take seconds at a real vendor.

    .venv/bin/python bench/model_proxy.py [--calls 200] [--events 200]

A local Anthropic Messages endpoint (``tests.support.endpoints``) streams a reply of ``--events``
server-sent events; the same call is made directly and through ``isolation.model_proxy``,
interleaved (direct, proxied, direct, ...) so that machine noise falls on both alike. Prints the
median time to the first byte and to the end of the stream for each, and their ratios, measured
in this run. The proxy here forwards over plain HTTP on loopback: a vendor adds a TLS handshake
per call (the proxy opens one upstream connection per call), not measured here.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.apis import get_api
from isolation.model_proxy import ModelProxy
from tests.support.endpoints import ENDPOINTS, text

KEY = "sk-bench-key"


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
    answer = " ".join(f"word{i}" for i in range(args.events))
    script = [text(answer, {"input": 100, "output": args.events})]
    body = json.dumps(
        {"model": "bench", "max_tokens": 10, "stream": True,
         "messages": [{"role": "user", "content": "go"}],
         # A tool makes it the script's turn (without one the endpoint answers a side call).
         "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}
    ).encode()  # fmt: skip
    with (
        ENDPOINTS["anthropic"](script, api_key=KEY) as endpoint,
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
