"""The critic's probe: one engine served in a scratch tree, a decode longer than the judge's."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

# A decode longer than any the judge runs: 40 + 100 positions, past the KV cache's first 128.
PROBE_PROMPTS = [[(37 * i + 11) % 4096 for i in range(40)], [(53 * i + 5) % 4096 for i in range(9)]]
PROBE_STEPS = 100


class Serve:
    """One engine (``python -I -B harness/serve.py``) in a scratch tree, with timeouts."""

    def __init__(self, tree: Path, timeout: float) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "harness/serve.py"],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.lines.get(timeout=self.timeout)
        if not line:
            raise RuntimeError(f"the engine exited during {message['op']}")
        return json.loads(line)

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def probe(tree: Path, timeout: float) -> tuple[str, list[list[int]] | None]:
    """A batched decode of PROBE_STEPS on PROBE_PROMPTS: ("ok", tokens) or (what failed, None)."""
    engine = Serve(tree, timeout)
    try:
        for message in ({"op": "load"}, {"op": "prefill", "prompts": PROBE_PROMPTS}):
            reply = engine.ask(message)
            if not reply.get("ok"):
                return f"{message['op']} failed: {reply.get('error')}", None
        reply = engine.ask({"op": "decode", "steps": PROBE_STEPS})
        if not reply.get("ok"):
            return f"crash: {reply.get('error')}", None
        return "ok", reply["tokens"]
    except (queue.Empty, RuntimeError, ValueError, OSError) as exc:
        return f"crash: {type(exc).__name__}: {exc}"[:300], None
    finally:
        engine.close()
