"""Local check (frozen zone: any change to this file is rejected by the judge).

Run ``python3 -I -B harness/check.py`` from the repository root (standard library only). It
compiles the engine with the judge's flags into ``$SWARMLAB_BUILD/check`` (or ``build/`` in
the repository when that variable is unset), starts the program, and speaks the JSON-lines
engine protocol to it the way the judge does. On PUBLIC prompts (a fixed public seed; the judge
uses hidden ones) it checks:

* every row of a B=16 batched decode equals, token for token, the same prompt decoded alone;
* every row equals the baseline engine's output (``harness/public_expected.json``);
* outputs stay right when batched and single-sequence runs alternate in one process.

It then prints B=16 aggregate and B=1 throughput (prefill + decode). Those are local,
untrusted numbers: the judge measures its own, on its own machine, against the baseline built
in the same evaluation. Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = Path(__file__).resolve().parent / "public_expected.json"
# The judge's build command (the task's `build`), with {build} the output folder.
BUILD = [
    "gcc", "-std=c11", "-O2", "-ffp-contract=off", "-fno-math-errno",
    "-falign-functions=64", "-falign-loops=64", "-falign-jumps=64",
    "-o", "{build}/serve", "harness/serve.c", "engine/weights.c", "engine/model.c", "-lm",
]  # fmt: skip
VOCAB = 3000
PUBLIC_SEED = 20_250_101
BATCH = 16
STEPS = 64
PROMPT_LEN = (8, 24)
TIMEOUT_S = 300.0
_MASK = (1 << 64) - 1


def public_prompts(
    seed: int, batch: int, prompt_len: tuple[int, int], vocab: int
) -> list[list[int]]:
    """Prompts from splitmix64(seed): lengths uniform in the inclusive range, ids in [0, vocab)
    (the judge's generator, fed hidden seeds)."""
    state = seed & _MASK

    def draw() -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & _MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    lo, hi = prompt_len
    prompts = []
    for _ in range(batch):
        length = lo + draw() % (hi - lo + 1)
        prompts.append([draw() % vocab for _ in range(length)])
    return prompts


def build(folder: Path) -> Path:
    """Compile the engine into `folder`; return the program's path."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [part.replace("{build}", str(folder)) for part in BUILD]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return folder / "serve"


class Server:
    """One engine process speaking the protocol over stdin/stdout."""

    def __init__(self, program: Path) -> None:
        self.proc = subprocess.Popen(
            [str(program)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.request({"op": "load"})

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

    def run(self, prompts: list[list[int]], steps: int) -> tuple[list[list[int]], float]:
        """prefill, decode, reset; return the tokens and the seconds of all three."""
        _, prefill_s = self.request({"op": "prefill", "prompts": prompts})
        response, decode_s = self.request({"op": "decode", "steps": steps, "margins": False})
        _, reset_s = self.request({"op": "reset"})
        return response["tokens"], prefill_s + decode_s + reset_s

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
    parser.add_argument("--build-dir", type=Path, default=None, help="where to compile")
    parser.add_argument("--write-expected", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    where = os.environ.get("SWARMLAB_BUILD")
    folder = args.build_dir or (Path(where) / "check" if where else ROOT / "build")
    program = build(folder.resolve())
    prompts = public_prompts(PUBLIC_SEED, BATCH, PROMPT_LEN, VOCAB)
    if args.write_expected:  # the task author's tool: the baseline's outputs become the truth
        server = Server(program)
        tokens, _ = server.run(prompts, STEPS)
        server.close()
        record = {"seed": PUBLIC_SEED, "prompts": prompts, "steps": STEPS, "tokens": tokens}
        EXPECTED.write_text(json.dumps(record) + "\n")
        return 0
    expected = json.loads(EXPECTED.read_text())
    if expected["prompts"] != prompts or expected["steps"] != STEPS:
        print("harness/public_expected.json does not match the public prompts", file=sys.stderr)
        return 1
    want: list[list[int]] = expected["tokens"]
    failures: list[str] = []

    def compare(label: str, got: list[list[int]], rows: list[int]) -> None:
        for got_row, row in zip(got, rows, strict=True):
            if got_row != want[row]:
                step = next(
                    (i for i, (a, b) in enumerate(zip(got_row, want[row], strict=False)) if a != b),
                    min(len(got_row), len(want[row])),
                )
                failures.append(f"{label}: row {row} differs from the baseline at step {step}")

    server = Server(program)
    try:
        batched, _ = server.run(prompts, STEPS)
        compare("B=16", batched, list(range(BATCH)))
        for row in range(BATCH):
            single, _ = server.run([prompts[row]], STEPS)
            compare("B=1", single, [row])
        # Alternate sizes in one process: state that survives reset shows up here.
        for size in (4, 1, 16, 2, 1, 8):
            rows = list(range(size))
            got, _ = server.run([prompts[r] for r in rows], STEPS)
            compare(f"alternating B={size}", got, rows)
        best16 = min(server.run(prompts, STEPS)[1] for _ in range(max(1, args.repeat)))
        best1 = min(server.run([prompts[0]], STEPS)[1] for _ in range(max(1, args.repeat)))
    finally:
        server.close()
    for line in failures[:20]:
        print("FAIL", line)
    print(f"B=16 aggregate: {BATCH * STEPS / best16:.0f} tok/s (prefill + decode, local)")
    print(f"B=1: {STEPS / best1:.0f} tok/s (prefill + decode, local)")
    print("OK" if not failures else f"{len(failures)} failure(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
