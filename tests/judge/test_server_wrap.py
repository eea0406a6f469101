"""The server kind's mutant proxy (``judge/kinds/server/wrap.py``) in front of a uvicorn +
Starlette server, as real subprocesses on the host (no Docker), spoken to by the judge's load
generator.

uvicorn chunks every streamed body and keeps the connection alive 5 s after it (vLLM and SGLang
serve this way): the proxy must decode that framing and finish a relayed request when its
upstream message ends, not when the upstream closes, or a finished request still counts as in
flight and ``gen_b1_slow_2x`` never slows the next lone one. The proxy's own abuse modes (the
new generated mutants) get the load generator's verdicts here too.

The one time-based assertion is a lower bound made by sleeps (a request the proxy slows by
waiting as long again as it took cannot come back sooner on any machine).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from judge.kinds.server.load import handle
from judge.kinds.server.mutants import _add_wrapper

IDS = [11, 12, 13, 14]
UPSTREAM_WAIT_S = 0.3  # the upstream's sleep before its [DONE]: a lower bound on a request

# A stream of IDS, the events written in pieces that straddle uvicorn's chunks.
APP = f"""
import asyncio, json, sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

async def models(request):
    return JSONResponse({{"object": "list", "data": [{{"id": "m"}}]}})

async def completions(request):
    await request.json()
    async def stream():
        for i in {IDS!r}:
            chunk = {{"choices": [{{"index": 0, "text": "", "token_ids": [i],
                                    "finish_reason": None}}]}}
            event = ("data: " + json.dumps(chunk) + "\\n\\n").encode()
            yield event[:9]
            yield event[9:]
        await asyncio.sleep({UPSTREAM_WAIT_S})
        yield b"data: [DONE]\\n\\n"
    return StreamingResponse(stream(), media_type="text/event-stream")

app = Starlette(routes=[Route("/v1/models", models),
                        Route("/v1/completions", completions, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _two_free_ports() -> int:
    """A port P with P + 1 free too (the proxy serves P, the real server P + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two free ports in a row")


class Proxied:
    """The app behind the proxy in ``mode``, both real subprocesses."""

    def __init__(self, tree: Path, mode: str, **extra: object) -> None:
        tree.mkdir(parents=True, exist_ok=True)
        (tree / "app.py").write_text(APP)
        _add_wrapper(tree, folder="w", settings={"mode": mode, **extra, "serve": [
            "{python}", "-I", "-B", "app.py", "{port}"]})  # fmt: skip
        self.port = _two_free_ports()
        env = {"SWARMLAB_SERVER_HOST": "127.0.0.1", "SWARMLAB_SERVER_PORT": str(self.port)}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "w/wrap.py"], cwd=tree, env=env, start_new_session=True
        )
        ready = {"op": "ready", "host": "127.0.0.1", "port": self.port, "path": "/v1/models"}
        assert handle({**ready, "timeout_s": 60})["ok"], "the proxied app never came up"

    def run(self, timeout_s: float = 30.0, concurrency: int = 1) -> dict:
        return self.runs(timeout_s, concurrency)[0]

    def runs(self, timeout_s: float = 30.0, concurrency: int = 1) -> list[dict]:
        return handle(
            {
                "op": "run",
                "host": "127.0.0.1",
                "port": self.port,
                "path": "/v1/completions",
                "model": "m",
                "requests": [{"prompt": [47, 5], "max_tokens": len(IDS)}] * concurrency,
                "concurrency": concurrency,
                "timeout_s": timeout_s,
            }
        )["results"]

    def close(self) -> None:
        # The proxy and the app it started: one session, ended together.
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator:
    started: list[Proxied] = []

    def start(mode: str, **extra: object) -> Proxied:
        started.append(Proxied(tmp_path / mode, mode, **extra))
        return started[-1]

    yield start
    for p in started:
        p.close()


def test_a_lone_request_is_slowed_each_time_behind_a_keep_alive_server(proxied):
    """``b1_slow`` doubles a request alone in flight. Behind uvicorn, the proxy used to wait
    for the upstream connection's close (5 s of keep-alive) after each stream: the next lone
    request found the last one still in flight and was not slowed."""
    proxy = proxied("b1_slow")
    for attempt in range(3):
        result = proxy.run()
        assert result["ok"] and result["ids"] == IDS, result
        # The upstream took >= UPSTREAM_WAIT_S, and the proxy waited as long again.
        assert result["total_s"] >= 2 * UPSTREAM_WAIT_S, (attempt, result["total_s"])


def test_an_honest_stream_reframed_oddly_is_read_exactly(proxied):
    proxy = proxied("odd_chunks")
    for _ in range(2):
        result = proxy.run()
        assert result["ok"] and result["ids"] == IDS, result


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("slow_headers", "timeout"),
        ("slow_body", "timeout"),
        ("flood_1xx", "protocol"),
        ("status_leak", "protocol"),
    ],
)
def test_the_proxys_abuse_of_http_gets_the_judges_word(proxied, mode, kind):
    proxy = proxied(mode)
    start = time.perf_counter()
    result = proxy.run(timeout_s=1.5)
    assert (result["ok"], result["kind"]) == (False, kind), result
    assert time.perf_counter() - start < 60, "the client held on long past its deadline"
    if mode == "status_leak":
        assert result["detail"] == "HTTP status 547"  # 500 + 47 % 100: private, never shown


def test_lone_requests_slowed_only_after_a_burst_or_at_untimed_lengths(proxied):
    """The B=1 families of issue 24: a fresh server's lone request is untouched (the old
    measurement's only situation), one after a concurrent burst waits as long again; a lone
    request at the b1 block's length is untouched, at any other it waits as long again."""
    after = proxied("b1_slow_after_burst")
    fresh = after.run()
    assert fresh["ok"] and fresh["ids"] == IDS
    burst = after.runs(concurrency=4)
    assert all(r["ok"] and r["ids"] == IDS for r in burst), burst
    for _ in range(2):
        later = after.run()
        assert later["ok"] and later["total_s"] >= 2 * UPSTREAM_WAIT_S, later
    untimed = proxied("b1_slow_untimed", timed_steps=len(IDS) + 1)
    result = untimed.run()
    assert result["ok"] and result["ids"] == IDS and result["total_s"] >= 2 * UPSTREAM_WAIT_S


def test_two_of_every_five_lone_requests_are_three_times_as_slow(proxied):
    proxy = proxied("b1_random_slow")
    slow = [proxy.run()["total_s"] >= 3 * UPSTREAM_WAIT_S for _ in range(5)]
    assert sum(slow) >= 2  # a lower bound by sleeps: a slowed one can never come back sooner


def test_a_lone_request_after_a_lone_one_leaks(proxied):
    proxy = proxied("lone_repeat_leak")
    first = proxy.run()
    assert first["ok"] and first["ids"] == IDS
    second = proxy.run()
    assert second["ok"] and second["ids"] == [i + 1 for i in IDS]
