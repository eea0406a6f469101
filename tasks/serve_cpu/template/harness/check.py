"""Local check (frozen zone: any change to this file is rejected by the judge).

Run ``python -I -B harness/check.py`` from the repository root. It starts ``harness/server.py``
on a free port and talks to it the way the judge's client does (``POST /v1/completions``,
streaming, greedy). On PUBLIC prompts (a fixed public seed; the judge uses hidden ones) it
checks that

* 16 requests sent one at a time get the baseline's tokens (``harness/public_expected.json``);
* the same 16 sent at once (concurrency 16) get the same tokens, request by request.

It then prints the aggregate output tok/s at concurrency 16 and 1. Those are local, untrusted
numbers: the judge measures its own, against the baseline in the same evaluation. Exit status
0 when every check passes, 1 otherwise. The client functions here are plain stdlib.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = Path(__file__).resolve().parent / "public_expected.json"
MODEL = "serve-cpu-int"
PUBLIC_SEED = 20_251_202
REQUESTS = 16
MAX_TOKENS = 48
PROMPT_LEN = (8, 24)
VOCAB = 4096
TIMEOUT_S = 300.0


def public_prompts(seed: int, count: int, prompt_len: tuple[int, int], vocab: int) -> list:
    """Random prompts: lengths uniform in the inclusive range, ids uniform in [0, vocab)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(prompt_len[0], prompt_len[1] + 1, size=count)
    return [rng.integers(0, vocab, size=int(n)).tolist() for n in lengths]


@dataclass
class Completion:
    """One streamed completion as the client saw it."""

    tokens: list[int] = field(default_factory=list)
    chunks: int = 0
    done: bool = False  # `data: [DONE]` arrived
    finish_reason: str | None = None
    top_logprobs: list[dict] = field(default_factory=list)
    first_token_s: float | None = None
    error: str | None = None


def stream_completion(
    host: str, port: int, prompt: list[int], max_tokens: int, logprobs: int = 0
) -> Completion:
    """One streaming greedy completion; reads ``token_ids`` from every chunk."""
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "return_token_ids": True,
    }
    if logprobs:
        body.update(logprobs=logprobs, return_tokens_as_token_ids=True)
    out, start = Completion(), time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
    try:
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        if response.status != 200:
            out.error = f"HTTP {response.status}: {response.read()[:200]!r}"
            return out
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                out.done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out.error = str(chunk["error"])
                break
            choice = chunk["choices"][0]
            if choice["token_ids"] and out.first_token_s is None:
                out.first_token_s = time.perf_counter() - start
            out.tokens.extend(choice["token_ids"])
            out.chunks += 1
            out.finish_reason = choice["finish_reason"] or out.finish_reason
            if choice.get("logprobs"):
                out.top_logprobs.extend(choice["logprobs"]["top_logprobs"])
    finally:
        conn.close()
    return out


def run_concurrent(
    host: str, port: int, prompts: list, max_tokens: int, concurrency: int, logprobs: int = 0
) -> tuple[list[Completion], float]:
    """Every prompt, `concurrency` requests in flight at a time; results in prompt order and
    the wall time."""
    results: list[Completion | None] = [None] * len(prompts)
    lock, todo = threading.Lock(), list(range(len(prompts)))

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            results[i] = stream_completion(host, port, prompts[i], max_tokens, logprobs)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(min(concurrency, len(prompts)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None], time.perf_counter() - start


def get_json(host: str, port: int, path: str) -> tuple[int, dict]:
    """GET `path`: status and JSON body."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def start_server(tree: Path = ROOT, timeout: float = 120.0) -> tuple[subprocess.Popen, int]:
    """Start ``harness/server.py`` of `tree` on a free port; wait until it answers."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", "harness/server.py", "--host", "127.0.0.1", "--port", "0"],
        cwd=tree,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    for line in proc.stderr:  # the server prints its address once it listens
        match = re.search(r"http://[\d.]+:(\d+)", line)
        if match:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
            port = int(match.group(1))
            while time.monotonic() < deadline:
                try:
                    if get_json("127.0.0.1", port, "/v1/models")[0] == 200:
                        return proc, port
                except OSError:
                    time.sleep(0.05)
            break
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("the server did not come up (see its stderr above)")


def main() -> int:
    parser = argparse.ArgumentParser(description="local check of the server")
    parser.add_argument("--requests", type=int, default=REQUESTS)
    args = parser.parse_args()
    prompts = public_prompts(PUBLIC_SEED, args.requests, PROMPT_LEN, VOCAB)
    expected = json.loads(EXPECTED.read_text())["tokens"][: args.requests]
    proc, port = start_server()
    fails = 0
    try:
        serial, serial_s = run_concurrent("127.0.0.1", port, prompts, MAX_TOKENS, 1)
        together, together_s = run_concurrent("127.0.0.1", port, prompts, MAX_TOKENS, 16)
        for name, results in (("concurrency 1", serial), ("concurrency 16", together)):
            for i, (got, want) in enumerate(zip(results, expected, strict=True)):
                if got.error or not got.done or got.tokens != want:
                    fails += 1
                    first = next(
                        (
                            j
                            for j, (a, b) in enumerate(zip(got.tokens, want, strict=False))
                            if a != b
                        ),
                        min(len(got.tokens), len(want)),
                    )
                    why = got.error or ("no [DONE]" if not got.done else "wrong tokens")
                    print(f"FAIL {name} request {i}: token {first} ({why})")
        n = sum(len(r.tokens) for r in together)
        print(
            f"aggregate {n / together_s:.0f} tok/s at concurrency 16,"
            f" {sum(len(r.tokens) for r in serial) / serial_s:.0f} tok/s at concurrency 1"
            " (local, untrusted)"
        )
    finally:
        proc.kill()
        proc.wait()
    print("OK" if not fails else f"{fails} FAILED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
