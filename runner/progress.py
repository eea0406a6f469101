"""A progress line while a run works: time left, the judge's queue, evaluations, best per arm."""

from __future__ import annotations

import json
import sys
import time

from judge.queue import JudgeQueue
from runner.events import EventLog


class Progress:
    def __init__(
        self, events: EventLog, queue: JudgeQueue, arms: list[str], every_s: float
    ) -> None:
        self.events, self.queue, self.arms, self.every_s = events, queue, arms, every_s
        self._last = 0.0

    def line(self, deadline: float) -> str:
        left = max(0, int(deadline - time.time()))
        counts = self.queue.counts()
        waiting, running = counts.get("queued", 0), counts.get("running", 0)
        parts = [
            f"[{left // 60:02d}:{left % 60:02d} left]",
            f"judge: {waiting} queued, {running} running",
        ]
        evaluations = self.events.table("evaluations")
        for arm in self.arms:
            mine = [e for e in evaluations if e["arm"] == arm]
            best = max(
                (
                    json.loads(e["metrics"]).get("x_baseline", 0.0)
                    for e in mine
                    if e["verdict"] == "PASS"
                ),
                default=None,
            )
            best_text = f"best {best:.2f}x" if best else "no PASS yet"
            parts.append(f"{arm}: {len(mine)} evaluated, {best_text}")
        return " | ".join(parts)

    def maybe_print(self, deadline: float, force: bool = False) -> None:
        if self.every_s <= 0 and not force:
            return
        now = time.monotonic()
        if force or now - self._last >= self.every_s:
            self._last = now
            print(self.line(deadline), file=sys.stderr, flush=True)
