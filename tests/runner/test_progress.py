"""The progress line, on a real event log and judge queue (SQLite)."""

from __future__ import annotations

import time
from pathlib import Path

from judge.kinds import Metric
from judge.queue import JudgeQueue
from judge.verdict import Evaluation, Verdict
from runner.events import EventLog
from runner.progress import Progress
from runrecord import CHAMPION

BASELINE_SCORE = 100.0
LATENCY = Metric("latency_ms", "ms", "p50 request latency", higher_is_better=False)


def _judged(
    events: EventLog, arm: str, agent: str, job: int, verdict: Verdict, score: float,
    metric: Metric | None = None,
) -> None:  # fmt: skip
    sid, _ = events.add_submission(arm, agent, f"{arm}/{agent}/{job}", f"{job:040x}", "move")
    events.set_job(sid, job)
    x = (metric or Metric("m", "u", "l")).ratio(score, BASELINE_SCORE)
    metrics = {"score": score, "baseline_score": BASELINE_SCORE, "x_baseline": x}
    events.add_evaluation(
        sid, Evaluation(job_id=job, arm=arm, agent=agent, commit=f"{job:040x}", verdict=verdict,
                        metrics=metrics if verdict == Verdict.PASS else {})
    )  # fmt: skip


def test_a_continuation_says_over_what_its_best_is(tmp_path: Path) -> None:
    """The demo's continuation printed "best 4.04x" while its summary said 5.59x over the
    baseline and 3.96x over the champion: the line now says which, by the summary's rules
    (agents' PASSes only, best by the metric, over the champion re-measured in this run)."""
    events = EventLog(tmp_path / "events.sqlite")
    queue = JudgeQueue(tmp_path / "queue.sqlite")
    _judged(events, "continuation", CHAMPION, 1, Verdict.PASS, 141.0)
    _judged(events, "continuation", "w1", 2, Verdict.PASS, 404.0)
    _judged(events, "continuation", "w2", 3, Verdict.PASS, 559.0)
    _judged(events, "continuation", "w2", 4, Verdict.WRONG, 900.0)
    _judged(events, "solo", "w1", 5, Verdict.PASS, 250.0)
    _judged(events, "solo", "w1", 6, Verdict.PASS, 250.0)
    progress = Progress(events, queue, ["continuation", "solo", "swarm"], every_s=60)
    line = progress.line(time.time() + 90)
    parts = line.split(" | ")
    assert parts[2] == "continuation: 3 evaluated, best 3.96x champion (5.59x baseline)"
    assert parts[3] == "solo: 2 evaluated, best 2.50x baseline"
    assert parts[4] == "swarm: 0 evaluated, no PASS yet"
    assert parts[1] == "judge: 0 queued, 0 running"


def test_a_lower_is_better_metric_takes_the_minimum_as_best(tmp_path: Path) -> None:
    """A latency's best is its lowest value: 40 ms (2.5x better than the baseline's 100 ms),
    not the highest one; the continuation's ratio over its champion is inverted alike."""
    events = EventLog(tmp_path / "events.sqlite")
    events.set_meta(metric=LATENCY.to_dict())
    queue = JudgeQueue(tmp_path / "queue.sqlite")
    _judged(events, "continuation", CHAMPION, 1, Verdict.PASS, 80.0, LATENCY)
    _judged(events, "continuation", "w1", 2, Verdict.PASS, 90.0, LATENCY)
    _judged(events, "continuation", "w1", 3, Verdict.PASS, 40.0, LATENCY)
    _judged(events, "continuation", "w1", 4, Verdict.PASS, 60.0, LATENCY)
    line = Progress(events, queue, ["continuation"], every_s=60).line(time.time() + 90)
    assert line.split(" | ")[2] == "continuation: 3 evaluated, best 2.00x champion (2.50x baseline)"
