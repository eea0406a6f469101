"""A progress line while a run works: time left, the judge's queue, evaluations, best per arm."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from judge import JudgeQueue, Metric, run_metric
from runner.events import EventLog
from runner.rejudge import best_pass
from runrecord import CHAMPION, PSEUDO_AGENTS, agent_name


def arm_progress(evaluations: list[dict[str, Any]], arm: str, metric: Metric) -> str:
    """``N evaluated, best ...`` for one arm, by the summary's own rules: the agents' work only
    (not the runner's re-measurements), the best PASS by the task's metric. A continuation's
    best says both ratios, over its starting champion re-measured in this run and over the
    task's baseline (``best 3.96x champion (5.59x baseline)``): a bare "4.04x" said neither."""
    mine = [
        e for e in evaluations if e["arm"] == arm and agent_name(e["agent"]) not in PSEUDO_AGENTS
    ]
    best = best_pass(evaluations, arm, metric)
    if best is None:
        return f"{len(mine)} evaluated, no PASS yet"
    metrics = json.loads(best["metrics"])
    x_baseline = f"{metrics.get('x_baseline', 0.0):.2f}x baseline"
    champions = [
        metric.score(json.loads(e["metrics"]))
        for e in evaluations
        if e["arm"] == arm and e["agent"] == CHAMPION and e["verdict"] == "PASS"
    ]
    score = metric.score(metrics)
    if champions and champions[0] and score:
        x_champion = metric.ratio(score, champions[0])
        return f"{len(mine)} evaluated, best {x_champion:.2f}x champion ({x_baseline})"
    return f"{len(mine)} evaluated, best {x_baseline}"


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
        metric = run_metric(self.events.meta())
        for arm in self.arms:
            parts.append(f"{arm}: {arm_progress(evaluations, arm, metric)}")
        return " | ".join(parts)

    def maybe_print(self, deadline: float, force: bool = False) -> None:
        if self.every_s <= 0 and not force:
            return
        now = time.monotonic()
        if force or now - self._last >= self.every_s:
            self._last = now
            print(self.line(deadline), file=sys.stderr, flush=True)
