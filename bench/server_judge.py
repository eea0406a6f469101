"""Is the server kind's load generator ever the bottleneck?

    .venv/bin/python bench/server_judge.py [--tokens 16] [--requests 400]

Starts a trivial echo SSE server in a child process (stdlib, threads: every request is answered
at once with ``--tokens`` chunks of the contract's shape and ``[DONE]``) and measures, in one run:

- the load generator's own overhead per request: its time per request at concurrency 1
  (``judge.kinds.server.load.stream_request``: HTTP, SSE parsing, bounds, timing) over a bare
  client's (one raw socket, one ``recv`` loop, no parsing) against the same server: the ratio
  is what the judge's client costs beyond the wire;
- at concurrency 1, 4, 16, 64 (``run``): the request rate reached, and the client's own CPU time
  per request (this process's user + system time: the server is another process). The rate is
  bounded by whichever side is slower, on a machine both share; the client's *ceiling*
  (requests per second of its own CPU) is what says whether the client could be the bottleneck:
  a ceiling over the goal of 500 requests/s (``ceiling/goal`` > 1) means it is not, below it.

The ratios come from this one run; the blocks of the two clients are interleaved.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import resource
import socket
import statistics
import sys
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from judge.kinds.server.load import run, stream_request

GOAL_RPS = 500.0


def echo_server(tokens: int) -> ThreadingHTTPServer:
    """A server that answers every completion at once with ``tokens`` one-id chunks."""
    chunk = {"id": "e", "object": "text_completion", "model": "echo"}

    def line(i: int) -> bytes:
        choice = {"index": 0, "text": "x", "token_ids": [i], "logprobs": None}
        return b"data: " + json.dumps(dict(chunk, choices=[choice])).encode() + b"\n\n"

    body = b"".join(line(i) for i in range(tokens)) + b"data: [DONE]\n\n"

    class Echo(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    class Server(ThreadingHTTPServer):
        # listen()'s backlog is read at construction: a burst of 64 connects must not be reset.
        request_queue_size = 1024
        daemon_threads = True

    return Server(("127.0.0.1", 0), Echo)


def _serve(tokens: int, port_out: multiprocessing.connection.Connection) -> None:
    server = echo_server(tokens)
    port_out.send(server.server_address[1])
    server.serve_forever()


def start_echo(tokens: int) -> tuple[multiprocessing.Process, int]:
    """The echo server in a child process (its CPU is not the client's), and its port."""
    here, there = multiprocessing.Pipe()
    child = multiprocessing.Process(target=_serve, args=(tokens, there), daemon=True)
    child.start()
    return child, int(here.recv())


def cpu_s() -> float:
    """This process's CPU time, every thread's, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bare_request(port: int, payload: bytes) -> None:
    """The least a client can do: send the request, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
        )
        while sock.recv(1 << 16):
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--requests", type=int, default=400)
    opts = parser.parse_args()
    child, port = start_echo(opts.tokens)
    body = {"model": "echo", "prompt": [1, 2, 3], "max_tokens": opts.tokens, "stream": True}
    payload = json.dumps(body).encode()
    n = opts.requests

    def per_request(fn) -> tuple[float, float]:
        """Median wall time of one request, and CPU time per request, over `n` requests."""
        times = []
        cpu = cpu_s()
        for _ in range(n):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times), (cpu_s() - cpu) / n

    # Alternate the two clients in blocks so a load burst hits both.
    judge_s, bare_s, judge_cpu, bare_cpu = [], [], [], []
    for _ in range(4):
        wall, cpu = per_request(
            lambda: stream_request(
                "127.0.0.1", port, "/v1/completions", body, time.perf_counter() + 30
            )
        )
        judge_s.append(wall)
        judge_cpu.append(cpu)
        wall, cpu = per_request(lambda: bare_request(port, payload))
        bare_s.append(wall)
        bare_cpu.append(cpu)
    lg, bare = statistics.median(judge_s), statistics.median(bare_s)
    lg_cpu, bare_cpu_s = statistics.median(judge_cpu), statistics.median(bare_cpu)
    print(f"per request at concurrency 1 ({opts.tokens} tokens): load generator"
          f" {1e3 * lg:.3f} ms ({1e3 * lg_cpu:.3f} ms CPU), bare client {1e3 * bare:.3f} ms"
          f" ({1e3 * bare_cpu_s:.3f} ms CPU), ratio {lg / bare:.2f},"
          f" overhead {1e3 * (lg - bare):.3f} ms")  # fmt: skip
    rates, ceilings = {}, {}
    for concurrency in (1, 4, 16, 64):
        cmd = {
            "host": "127.0.0.1",
            "port": port,
            "path": "/v1/completions",
            "model": "echo",
            "requests": [{"prompt": [1, 2, 3], "max_tokens": opts.tokens}] * n,
            "concurrency": concurrency,
            "timeout_s": 120,
        }
        cpu = cpu_s()
        reply = run(cmd)
        per = (cpu_s() - cpu) / n
        bad = Counter(r["kind"] for r in reply["results"] if not r["ok"])
        rates[concurrency] = n / reply["wall_s"]
        ceilings[concurrency] = 1.0 / per if per > 0 else float("inf")
        print(f"concurrency {concurrency:3d}: {rates[concurrency]:8.1f} requests/s reached;"
              f" client {1e3 * per:.3f} ms CPU/request, ceiling {ceilings[concurrency]:8.1f}/s"
              f" ({ceilings[concurrency] / GOAL_RPS:.2f}x the {GOAL_RPS:.0f}/s goal),"
              f" failed: {dict(bad) or 0}")  # fmt: skip
    best = max(rates.values())
    lowest = min(ceilings.values())
    print(
        json.dumps(
            {
                "overhead_ratio": round(lg / bare, 3),
                "overhead_ms": round(1e3 * (lg - bare), 4),
                "max_requests_s": round(best, 1),
                "max_over_goal": round(best / GOAL_RPS, 3),
                "lowest_client_ceiling_s": round(lowest, 1),
                "ceiling_over_goal": round(lowest / GOAL_RPS, 3),
            }
        )
    )
    child.terminate()
    child.join(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
