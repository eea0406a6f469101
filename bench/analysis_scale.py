"""How long do the tables and figures of a very large run take? Goal: under 15 s for a million
events on a 2-CPU machine.

    .venv/bin/python bench/analysis_scale.py [--events 1000000] [--keep DIR]

Writes a synthetic run (the runner's real event-log schema; a mix of evaluations, submissions,
board messages, lifecycle events and token records, with realistic JSON in every field the
analysis reads) and times, from that directory alone: building the six tables, writing them as
Parquet and CSV, and drawing every figure. No git history is made, so relays and dead ends (git
work per arm, not per event) are not part of the figure. Seconds are from this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.figures import make_figures
from analysis.tables import build_tables, write_tables
from judge.kinds import DEFAULT_KIND, get_kind
from runner.events import EventLog

T0 = 1_800_000_000.0
ARMS = {"swarm": ["w1", "w2", "w3", "w4", "critic"], "solo": ["w1"]}
# Shares of the events: evaluations and submissions one each per job, then the rest.
MIX = {"jobs": 0.15, "messages": 0.40, "lifecycle": 0.20, "tokens": 0.10}
VERDICTS = np.array(["PASS", "WRONG", "REJECT", "ERROR"])
REASONS = {"PASS": "", "WRONG": "mismatch", "REJECT": "frozen_zone", "ERROR": "infrastructure"}


def _agents(rng: np.random.Generator, n: int, workers_only: bool) -> tuple[list, list]:
    seats = [
        (a, g) for a, names in ARMS.items() for g in names if not (workers_only and g == "critic")
    ]
    pick = rng.integers(0, len(seats), n)
    return [seats[i][0] for i in pick], [seats[i][1] for i in pick]


def write_run(run_dir: Path, events: int, seed: int = 0) -> dict[str, int]:
    """A synthetic run of about ``events`` events in ``run_dir``; returns the row counts."""
    rng = np.random.default_rng(seed)
    jobs = int(events * MIX["jobs"])
    counts = {
        "evaluations": jobs,
        "submissions": jobs,
        "messages": int(events * MIX["messages"]),
        "lifecycle": int(events * MIX["lifecycle"]),
        "tokens": int(events * MIX["tokens"]),
    }
    # The judge is serial: evaluations follow each other, with some idle gaps.
    durations = np.where(rng.random(jobs) < 0.3, 0.05, rng.uniform(5, 20, jobs))
    gaps = np.where(rng.random(jobs) < 0.1, rng.uniform(0, 30, jobs), 0.0)
    started = T0 + 5 + np.cumsum(durations + gaps) - durations
    finished = started + durations
    enqueued = started - rng.uniform(0, 60, jobs)
    run_s = float(finished[-1] - T0 + 10)
    verdict = VERDICTS[rng.choice(4, jobs, p=[0.5, 0.2, 0.28, 0.02])]
    base = rng.normal(670, 60, jobs)
    tok = base * rng.uniform(1.0, 3.0, jobs) * (1 + np.arange(jobs) / jobs)
    arms, agents = _agents(rng, jobs, workers_only=True)
    path = run_dir / "events.sqlite"
    log = EventLog(path)  # the runner's own schema
    seats = {
        arm: [[g, "critic" if g == "critic" else "worker", None] for g in names]
        for arm, names in ARMS.items()
    }
    log.set_meta(
        run_id="bench",
        experiment="swarm_vs_solo",
        seed=seed,
        task="decode_cpu",
        agent_kind="scripted",
        scripted=True,
        arms=list(ARMS),
        seats=seats,
        started_at=T0,
        deadline=T0 + run_s,
        budget_minutes=run_s / 60,
        isolation="docker",
        status="finished",
        ended_at=T0 + run_s,
        metric=get_kind(DEFAULT_KIND).metric(OmegaConf.create({"timing": {"batch": 16}})).to_dict(),
        config={
            "task": {"name": "decode_cpu", "spec": {"target_x_baseline": 4.0}},
            "arms": {a: {"name": a, "start": "master"} for a in ARMS},
        },
    )
    db = sqlite3.connect(path)
    with db:
        db.executemany(
            "INSERT INTO submissions (id, at, arm, agent, request_id, commit_sha, message,"
            " job_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    i + 1,
                    float(enqueued[i]),
                    arms[i],
                    agents[i],
                    f"r{i}",
                    f"{i:040x}",
                    f"move {i % 37} on {i:010x}",
                    i + 1,
                )
                for i in range(jobs)
            ),
        )
        rows = []
        for i in range(jobs):
            v = str(verdict[i])
            if v == "PASS":
                metrics = json.dumps(
                    {
                        "score": round(float(tok[i]), 3),
                        "baseline_score": round(float(base[i]), 3),
                        "x_baseline": round(float(tok[i] / base[i]), 4),
                        "b1_ratio": 1.0,
                        "engine_s": 9.0,
                        "prefill_ratio": {"b2": 1.0, "b16a": 1.1},
                    },
                    sort_keys=True,
                )
                flags = "{}" if i % 50 else json.dumps({"b1_unresolved": True})
            else:
                metrics = json.dumps({"engine_s": 1.0, "overhead_s": 0.5})
                flags = json.dumps(
                    {"near_tie": i % 97 == 0, **({"tokens_correct": True} if i % 13 == 0 else {})}
                )
            rows.append(
                (
                    i + 1,
                    i + 1,
                    arms[i],
                    agents[i],
                    f"{i:040x}",
                    v,
                    REASONS[v],
                    "detail" if v != "PASS" else "",
                    metrics,
                    json.dumps({"total": round(float(durations[i]), 4)}),
                    flags,
                    1,
                    float(enqueued[i]),
                    float(started[i]),
                    float(finished[i]),
                    float(started[i] - enqueued[i]),
                )
            )
        # Named columns: the log's later columns (settings_hash) keep their defaults.
        db.executemany(
            "INSERT INTO evaluations (job_id, submission_id, arm, agent, commit_sha, verdict,"
            " reason, detail, metrics, stages, flags, attempts, enqueued_at, started_at,"
            " finished_at, queue_wait_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        n = counts["messages"]
        m_arms, m_agents = _agents(rng, n, workers_only=False)
        at = np.sort(rng.uniform(T0, T0 + run_s, n))
        db.executemany(
            "INSERT INTO messages (at, arm, author, role, kind, text, refs, request_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    float(at[i]),
                    m_arms[i],
                    m_agents[i],
                    "worker",
                    "result" if i % 3 else "note",
                    f"PASS 1.{i % 90:02d}x: move {i % 37} on {i:010x} -> {i + 1:010x}",
                    json.dumps({"commit": f"{i:040x}", "move": f"m{i % 37}"}),
                    f"q{i}",
                )
                for i in range(n)
            ),
        )
        n = counts["lifecycle"]
        l_arms, l_agents = _agents(rng, n, workers_only=False)
        at = np.sort(rng.uniform(T0, T0 + run_s, n))
        events_ = np.array(["started", "exited", "restarted", "request_refused"])
        kinds = events_[rng.choice(4, n, p=[0.1, 0.3, 0.3, 0.3])]
        db.executemany(
            "INSERT INTO lifecycle (at, arm, agent, event, detail) VALUES (?, ?, ?, ?, ?)",
            (
                (
                    float(at[i]),
                    l_arms[i],
                    l_agents[i],
                    str(kinds[i]),
                    json.dumps(
                        {"restarts": i % 5, "code": 0, "reason": "exited before the deadline"}
                    ),
                )
                for i in range(n)
            ),
        )
        n = counts["tokens"]
        t_arms, t_agents = _agents(rng, n, workers_only=False)
        at = np.sort(rng.uniform(T0, T0 + run_s, n))
        out = rng.integers(100, 5000, n)
        db.executemany(
            "INSERT INTO tokens (at, arm, agent, model, input, cache_read, cache_write, output,"
            " reasoning, cost_estimate, source) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                (
                    float(at[i]),
                    t_arms[i],
                    t_agents[i],
                    "model-x",
                    1000,
                    5000,
                    100,
                    int(out[i]),
                    0,
                    None,
                    "session.jsonl",
                )
                for i in range(n)
            ),
        )
    db.close()
    return counts


def _cpu() -> float:
    own, helpers = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + helpers.ru_utime + helpers.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="build the run here and keep it")
    args = parser.parse_args()
    scratch = None if args.keep else tempfile.TemporaryDirectory(prefix="analysis-scale-")
    run_dir = args.keep or Path(scratch.name)  # type: ignore[union-attr]
    run_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    counts = write_run(run_dir, args.events)
    total = sum(counts.values())
    print(
        f"synthetic run: {total:,} events ({', '.join(f'{k} {v:,}' for k, v in counts.items())})"
        f", written in {time.perf_counter() - t:.1f} s"
    )
    out = run_dir / "analysis"
    steps: list[tuple[str, float]] = []
    cpu0 = _cpu()
    t0 = t = time.perf_counter()
    tables = build_tables(run_dir, git=False)
    steps.append(("build tables (SQL + pandas)", time.perf_counter() - t))
    t = time.perf_counter()
    write_tables(tables, out / "tables")
    steps.append(("write Parquet + CSV", time.perf_counter() - t))
    t = time.perf_counter()
    figures = make_figures(tables, out / "figures")
    steps.append(
        (f"draw {sum(f.path is not None for f in figures)} figures", time.perf_counter() - t)
    )
    elapsed = time.perf_counter() - t0
    for name, seconds in steps:
        print(f"{name:<30} {seconds:6.2f} s")
    print(f"{'tables + figures':<30} {elapsed:6.2f} s for {total:,} events (goal < 15 s)")
    print(
        f"{'CPU time':<30} {_cpu() - cpu0:6.2f} s (this process and its reader; load average"
        f" {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: other work slows the wall clock)"
    )
    if scratch is not None:
        scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
