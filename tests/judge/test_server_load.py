"""The server kind's load generator against real HTTP servers on the host (no Docker): the
contract's stream is read right, and every way a server can break it has the judge's word."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from judge.kinds import get_kind
from judge.kinds.server.evaluator import first_difference, margins_array
from judge.kinds.server.load import chunk_tokens, handle

STUB = Path(__file__).with_name("server_stub.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stub() -> Iterator[int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(STUB), "--port", str(port), "--step-ms", "1"],
        stdout=subprocess.DEVNULL,
    )
    try:
        assert handle(_ready(port, 20))["ok"]
        yield port
    finally:
        proc.kill()
        proc.wait()


def _ready(port: int, timeout: float) -> dict:
    return {"op": "ready", "host": "127.0.0.1", "port": port, "path": "/v1/models",
            "timeout_s": timeout}  # fmt: skip


def _run(port: int, prompts: list[list[int]], max_tokens: int = 6, **extra) -> dict:
    return handle(
        {
            "op": "run",
            "host": "127.0.0.1",
            "port": port,
            "path": "/v1/completions",
            "model": "m",
            "requests": [{"prompt": p, "max_tokens": max_tokens} for p in prompts],
            "concurrency": len(prompts),
            "timeout_s": extra.pop("timeout_s", 10),
            **extra,
        }
    )


def _expected(prompt: list[int], steps: int, vocab: int = 512) -> list[int]:
    sys.path.insert(0, str(STUB.parent))
    try:
        from server_stub import next_token
    finally:
        sys.path.remove(str(STUB.parent))
    context, out = list(prompt), []
    for _ in range(steps):
        out.append(next_token(context, vocab))
        context.append(out[-1])
    return out


def test_concurrent_streams_return_each_prompts_own_greedy_ids(stub):
    prompts = [[1, 2, 3], [9, 8], [100, 200, 300, 400], [5]]
    reply = _run(stub, prompts, max_tokens=7)
    assert reply["ok"]
    results = reply["results"]
    assert [r["ids"] for r in results] == [_expected(p, 7) for p in prompts]
    for r in results:
        assert r["ok"] and len(r["itl_s"]) == 6 and 0 < r["ttft_s"] <= r["total_s"]
        assert r["margins"] is None
    assert reply["wall_s"] >= max(r["total_s"] for r in results)


def test_margins_and_ids_read_from_logprobs(stub):
    reply = _run(stub, [[4, 5]], logprobs=True)
    assert reply["results"][0]["margins"] == [pytest.approx(2.4)] * 6
    via_logprobs = _run(stub, [[4, 5]], token_source="logprobs")
    assert via_logprobs["results"][0]["ids"] == _expected([4, 5], 6)


def test_a_port_nobody_listens_on_is_not_ready_and_a_request_there_is_a_crash():
    port = _free_port()
    assert handle(_ready(port, 0.3)) == {"ok": False, "kind": "timeout"}
    assert _run(port, [[1]])["results"][0]["kind"] == "crash"


class _Bad(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = ""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = type(self).mode
        self.send_response(500 if mode == "status" else 200)
        ctype = "application/json" if mode == "ctype" else "text/event-stream"
        self.send_header("Content-Type", ctype)
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = {"choices": [{"index": 0, "text": "", "token_ids": [3], "finish_reason": None}]}
        good = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        if mode == "garbage":
            self.wfile.write(b"data: {not json\n\n")
        elif mode == "truncated":
            self.wfile.write(good)
        elif mode == "long":
            self.wfile.write(b"data: " + b"x" * (1 << 17) + b"\n\n")
        elif mode == "strings":
            self.wfile.write(b'data: {"choices": [{"token_ids": ["3"]}]}\n\n')
        elif mode == "hang":
            self.wfile.write(good)
            self.wfile.flush()
            time.sleep(3)
        elif mode == "usage":
            self.wfile.write(good + b'data: {"usage": {"completion_tokens": 999}}\n\n')
            self.wfile.write(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("status", "protocol"),
        ("ctype", "protocol"),
        ("garbage", "protocol"),
        ("truncated", "protocol"),
        ("long", "protocol"),
        ("strings", "protocol"),
        ("hang", "timeout"),
    ],
)
def test_a_broken_stream_is_the_judges_word_for_it(mode, kind):
    handler = type("H", (_Bad,), {"mode": mode})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = _run(server.server_address[1], [[1]], timeout_s=1.0)["results"][0]
    finally:
        server.shutdown()
        server.server_close()
    assert (result["ok"], result["kind"]) == (False, kind), result


def test_usage_is_never_counted():
    handler = type("H", (_Bad,), {"mode": "usage"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = _run(server.server_address[1], [[1]])["results"][0]
    finally:
        server.shutdown()
        server.server_close()
    assert result["ok"] and result["ids"] == [3]


def test_chunk_shapes():
    assert chunk_tokens({"usage": {"completion_tokens": 5}}, "token_ids") == ([], [], False)
    with pytest.raises(ValueError):
        chunk_tokens({"choices": [{"token_ids": [True]}]}, "token_ids")
    with pytest.raises(ValueError):
        chunk_tokens({"choices": [{"token_ids": [1]}, {"token_ids": [2]}]}, "token_ids")
    ids, margins, done = chunk_tokens(
        {"choices": [{"logprobs": {"tokens": ["token_id:7"], "top_logprobs": [
            {"token_id:7": -0.5, "token_id:2": -0.75}]}, "finish_reason": "length"}]},
        "logprobs",
    )  # fmt: skip
    assert (ids, margins, done) == ([7], [0.25], True)


def test_first_difference_names_the_first_request_and_token():
    ref = np.array([[1, 2, 3], [4, 5, 6]])
    assert first_difference([[1, 2, 3], [4, 5, 6]], ref) is None
    assert first_difference([[1, 2, 3], [4, 0, 6]], ref) == (1, 1, 1)
    assert first_difference([[1, 2], [4, 5, 6]], ref) == (1, 0, 2)  # short: truncated
    assert first_difference([[1, 2, 3, 9], [4, 5, 6]], ref) == (1, 0, 3)  # past max_tokens
    assert first_difference([[1, 2, 3]], ref) == (1, 1, 0)
    m = margins_array([[0.5, None], [2.0, 1.0, 3.0, 9.0]], (2, 3))
    assert m[0, 0] == 0.5 and np.isinf(m[0, 1]) and m[1, 2] == 3.0


def test_the_kind_is_registered_with_its_metric_and_reasons():
    from omegaconf import OmegaConf

    kind = get_kind("server")
    task = OmegaConf.create({"timing": {"batch": 16}, "frozen": ["harness/**"]})
    metric = kind.metric(task)
    assert metric.name == "out_tok_s" and metric.higher_is_better and "c=16" in metric.label
    reasons = kind.required_reasons(task)
    assert {"WRONG (mismatch)", "WRONG (b1_regression)", "REJECT (frozen_zone)"} <= set(reasons)
