"""How much of an evaluation is the judge's own overhead (everything but the engine's
protocol requests)? Goal: under 10% of evaluation time.

    .venv/bin/python bench/judge_overhead.py [--runs 3] [--private-dir results/judge]

Judges the unmodified baseline and the reference solution, alternately, ``runs`` times each,
and prints per stage: wall seconds, seconds inside engine requests, and the overhead as a
fraction of the whole evaluation. Ratios come from this one run; the machine is noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from judge import compose_judge_config
from judge.preflight import build_mutant_repo, load_mutants
from judge.private import setup
from judge.queue import JudgeQueue
from judge.service import describe, run_until_done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--private-dir", default="results/judge")
    args = parser.parse_args()
    cfg = compose_judge_config(["task=decode_cpu", f"judge.private_dir={args.private_dir}"])
    t0 = time.perf_counter()
    home = setup(cfg, progress=lambda line: print(line, file=sys.stderr))
    print(f"judge setup (cached after the first run): {time.perf_counter() - t0:.1f} s")
    mutants = [m for m in load_mutants(cfg) if m.name in ("baseline", "reference")]
    repo, shas = build_mutant_repo(cfg, home, mutants)
    queue = JudgeQueue(home.queue_path)
    jobs = [
        queue.enqueue(arm="bench", agent="bench", repo=str(repo), commit=shas[name], label=name)
        for _ in range(args.runs)
        for name in ("baseline", "reference")
    ]
    evaluations = run_until_done(cfg, home, jobs)
    stages: dict[str, list[tuple[float, float, float]]] = {}
    for e in evaluations:
        print(f"{e.label:>10}: {describe(e)}")
        total = e.stages["total"]
        per_stage = e.metrics.get("stage_engine_s", {})
        for name, seconds in e.stages.items():
            if name == "total" or ":" in name:
                continue
            engine = per_stage.get(name, 0.0)
            stages.setdefault(name, []).append((seconds, engine, (seconds - engine) / total))
    print(
        f"\n{'stage':<12} {'wall s':>8} {'engine s':>9} {'overhead':>9}"
        f"   (medians over {len(evaluations)} evaluations)"
    )
    for name, rows in stages.items():
        wall, engine, share = (statistics.median(col) for col in zip(*rows, strict=True))
        print(f"{name:<12} {wall:8.3f} {engine:9.3f} {100 * share:8.1f}%")
    fractions = [e.metrics["overhead_s"] / e.stages["total"] for e in evaluations]
    for label in ("baseline", "reference"):
        own = [f for e, f in zip(evaluations, fractions, strict=True) if e.label == label]
        print(
            f"overhead / evaluation time, {label:>9}: median {100 * statistics.median(own):.1f}%"
            f" (min {100 * min(own):.1f}%, max {100 * max(own):.1f}%)"
        )
    print(
        "overhead / evaluation time, all: median"
        f" {100 * statistics.median(fractions):.1f}% (goal < 10%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
