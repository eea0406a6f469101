"""The critic's probe: one engine (the task's ``serve``, after its ``build``) run in a scratch
tree, speaking the decode kind's JSON lines (``docs/engine-protocol.md``), asked for a decode
longer than any the judge runs."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

from agents.scripted.card import TaskCard
from agents.scripted.library import ProbeSpec

# One BLAS thread, as the judge runs engines (and the critic shares its CPUs with its arm).
ENGINE_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class Serve:
    """One engine (the card's ``serve`` argv) in a scratch tree, with timeouts."""

    def __init__(self, argv: list[str], tree: Path, timeout: float, folder: Path) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            argv,
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env={**os.environ, **ENGINE_ENV, "SWARMLAB_BUILD": str(folder)},
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


def build(card: TaskCard, tree: Path, folder: Path, timeout: float) -> str | None:
    """Run the task's ``build`` (if it has one) from `tree` into `folder`, as the judge does
    (``{build}`` and ``$SWARMLAB_BUILD`` name the folder): None, or what failed."""
    folder.mkdir(parents=True, exist_ok=True)
    if not card.build:
        return None
    try:
        done = subprocess.run(
            card.argv(card.build, folder),
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **ENGINE_ENV, "SWARMLAB_BUILD": str(folder)},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"build failed: {type(exc).__name__}: {exc}"[:300]
    if done.returncode != 0:
        return f"build failed ({done.returncode}): {(done.stdout + done.stderr).strip()[-200:]}"
    return None


def probe(
    card: TaskCard, spec: ProbeSpec, tree: Path, folder: Path, timeout: float
) -> tuple[str, list[list[int]] | None]:
    """A batched decode of ``spec.steps`` on ``spec``'s prompts by `tree`'s engine, built into
    `folder`: ("ok", tokens) or (what failed, None)."""
    failed = build(card, tree, folder, timeout)
    if failed:
        return failed, None
    try:
        engine = Serve(card.argv(card.serve, folder), tree, timeout, folder)
    except OSError as exc:
        return f"crash: {type(exc).__name__}: {exc}"[:300], None
    try:
        prompts = spec.prompts(card.vocab)
        for message in ({"op": "load"}, {"op": "prefill", "prompts": prompts}):
            reply = engine.ask(message)
            if not reply.get("ok"):
                return f"{message['op']} failed: {reply.get('error')}", None
        reply = engine.ask({"op": "decode", "steps": spec.steps})
        if not reply.get("ok"):
            return f"crash: {reply.get('error')}", None
        return "ok", reply["tokens"]
    except (queue.Empty, RuntimeError, ValueError, OSError) as exc:
        return f"crash: {type(exc).__name__}: {exc}"[:300], None
    finally:
        engine.close()
