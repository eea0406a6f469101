"""Local check (frozen zone: any change to this file is rejected by the judge).

Run ``python -I -B harness/check.py`` from the repository root. It drives the engine the way
the judge does: it starts ``harness/serve.py`` as a subprocess and speaks the JSON-lines engine
protocol to it. On PUBLIC prompts (a fixed public seed; the judge uses hidden ones) it checks:

* every row of a B=16 batched decode equals, token for token, the same prompt decoded alone;
* every row equals the baseline engine's output (``harness/public_expected.json``);
* outputs stay right when batched and single-sequence runs alternate in one process.

It then prints B=16 aggregate and B=1 decode throughput. Those are local, untrusted numbers:
the judge measures its own, on its own machine, against the baseline built in the same
evaluation. Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import queue
import runpy
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = Path(__file__).resolve().parent / "public_expected.json"
PUBLIC_SEED = 20_250_101
BATCH = 16
STEPS = 64
PROMPT_LEN = (8, 24)
TIMEOUT_S = 300.0


def public_prompts(
    seed: int, batch: int, prompt_len: tuple[int, int], vocab: int
) -> list[list[int]]:
    """Random prompts: lengths uniform in the inclusive range, ids uniform in [0, vocab)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(prompt_len[0], prompt_len[1] + 1, size=batch)
    return [rng.integers(0, vocab, size=int(n)).tolist() for n in lengths]


class Server:
    """One engine process speaking the protocol over stdin/stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "harness/serve.py"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def request(self, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Send one request; return the response and the seconds it took, timed here."""
        assert self.proc.stdin is not None
        start = time.perf_counter()
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(f"no answer to {message['op']} within {TIMEOUT_S:.0f} s") from None
        elapsed = time.perf_counter() - start
        if not line:
            raise RuntimeError(f"the engine exited during {message['op']}")
        response = json.loads(line)
        if not response.get("ok"):
            raise RuntimeError(f"{message['op']} failed: {response.get('error')}")
        return response, elapsed

    def run(self, prompts: list[list[int]], steps: int) -> tuple[list[list[int]], float, float]:
        """reset, prefill, decode; return tokens, prefill seconds and decode seconds."""
        self.request({"op": "reset"})
        _, prefill_s = self.request({"op": "prefill", "prompts": prompts})
        response, decode_s = self.request({"op": "decode", "steps": steps, "margins": False})
        return response["tokens"], prefill_s, decode_s

    def close(self) -> None:
        """Close stdin and wait for the process; kill it if it lingers."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed B=16 runs (best is shown)")
    args = parser.parse_args()

    vocab = runpy.run_path(str(ROOT / "engine" / "config.py"))["CONFIG"].vocab
    prompts = public_prompts(PUBLIC_SEED, BATCH, PROMPT_LEN, vocab)
    expected = json.loads(EXPECTED.read_text())
    if expected["prompts"] != prompts or expected["steps"] != STEPS:
        print("harness/public_expected.json does not match the public prompts", file=sys.stderr)
        return 1
    want: list[list[int]] = expected["tokens"]
    failures: list[str] = []

    def compare(label: str, got: list[list[int]], rows: list[int]) -> None:
        for got_row, row in zip(got, rows, strict=True):
            if got_row != want[row]:
                at = next(
                    (i for i, (a, b) in enumerate(zip(got_row, want[row], strict=False)) if a != b),
                    min(len(got_row), len(want[row])),
                )
                failures.append(f"{label}: row {row} differs from the baseline at step {at}")

    server = Server()
    try:
        _, load_s = server.request({"op": "load"})
        batched: list[float] = []
        prefills: list[float] = []
        for i in range(max(1, args.repeat)):
            tokens, prefill_s, decode_s = server.run(prompts, STEPS)
            compare(f"B={BATCH} batched run {i + 1}", tokens, list(range(BATCH)))
            batched.append(decode_s)
            prefills.append(prefill_s)
        # Single-sequence runs right after batched ones, in the same process.
        singles: list[float] = []
        for row in range(BATCH):
            tokens, _, decode_s = server.run([prompts[row]], STEPS)
            compare("B=1 run", tokens, [row])
            singles.append(decode_s)
        # Alternate modes: small batch, single, ragged batch, single.
        for rows in ([0, 1, 2, 3], [7], [15, 4, 9], [3]):
            tokens, _, _ = server.run([prompts[r] for r in rows], STEPS)
            compare(f"alternating B={len(rows)}", tokens, rows)
    except RuntimeError as exc:
        failures.append(str(exc))
        batched = []
    finally:
        server.close()

    for line in failures[:20]:
        print(f"FAIL  {line}")
    if failures:
        print(f"FAIL  {len(failures)} problem(s); the judge would score this WRONG")
        return 1
    print(f"OK    B={BATCH} batched rows equal single runs and the baseline, token for token")
    print("OK    alternating batched / single runs in one process")
    print("Local, untrusted timings (the judge measures its own):")
    print(
        f"      load {load_s:.2f} s; prefill B={BATCH} (prompts {PROMPT_LEN[0]}-{PROMPT_LEN[1]}) "
        f"best {min(prefills):.3f} s"
    )
    print(
        f"      B={BATCH} aggregate decode: {BATCH * STEPS / min(batched):.1f} tok/s "
        f"(best of {len(batched)}, {min(batched):.3f} s for {STEPS} steps)"
    )
    print(
        f"      B=1 decode: {len(singles) * STEPS / sum(singles):.1f} tok/s "
        f"(mean over {len(singles)} prompts)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
