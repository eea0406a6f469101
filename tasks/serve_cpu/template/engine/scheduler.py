"""The request scheduler (baseline: one request at a time, first come first served).

``harness/server.py`` calls ``submit`` from each connection's thread; one worker thread runs
the model. This baseline finishes a request before it starts the next, so 16 concurrent
clients get 1/16 of the throughput each: the model never sees more than one row.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter

from harness.api import Request

from .model import Model, greedy, top_logprobs


class Scheduler:
    """Runs every request on one worker thread, one after another."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.waiting: queue.Queue[Request] = queue.Queue()
        self.batch_sizes: Counter[int] = Counter()  # decode steps by how many rows they ran
        self.served = 0

    def start(self) -> None:
        """Start the worker (the server calls it once, before it listens)."""
        threading.Thread(target=self._run, name="scheduler", daemon=True).start()

    def submit(self, request: Request) -> None:
        """Queue a request; its tokens come back through ``request.emit``."""
        self.waiting.put(request)

    def stats(self) -> dict:
        """Counters for ``GET /debug/stats`` (untrusted, for people and tests)."""
        return {
            "scheduler": "serial",
            "served": self.served,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "waiting": self.waiting.qsize(),
        }

    def _run(self) -> None:
        while True:
            request = self.waiting.get()
            try:
                self._generate(request)
            except Exception as exc:  # one bad request must not stop the server
                request.fail(f"{type(exc).__name__}: {exc}")
            self.served += 1

    def _generate(self, request: Request) -> None:
        model = self.model
        cache = model.new_cache(len(request.prompt) + request.max_tokens)
        logits = model.prefill(cache, request.prompt)
        for step in range(request.max_tokens):
            if request.cancelled:
                return
            token = greedy(logits)
            lps = [top_logprobs(logits, request.logprobs)] if request.logprobs else None
            request.emit([token], lps)
            self.batch_sizes[1] += 1
            if step + 1 < request.max_tokens:
                logits = model.forward(cache, token)
        request.finish()
