"""How much of an evaluation is the judge's own work, and how much the baseline's?

    .venv/bin/python bench/judge_overhead.py [--runs 3] [--private-dir results/judge]

Judges the unmodified baseline and the reference solution, alternately, ``runs`` times each,
under the default judge settings, and prints per stage: wall seconds, seconds inside the
candidate's protocol requests, seconds inside the baseline's (the reference runs every
comparison needs, its load included; with the staged pipeline, also its stage "baseline": the
warm container and a fresh engine), and the judge's own work: the rest (containers, freezing,
checkout, integrity, build, spawns). Then, per submission, the three shares of the
whole evaluation. The candidate's requests are the part no judge can save; the judge's own work
has a goal of under 10%. Ratios come from this one run; the machine is noisy.

A judge older than ``Evaluation.metrics["baseline_engine_s"]`` counts the baseline's requests
in with the candidate's: the baseline column then reads "-".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from judge import compose_judge_config
from judge.preflight import build_mutant_repo, load_mutants
from judge.private import setup
from judge.queue import JudgeQueue
from judge.service import describe, run_until_done

if TYPE_CHECKING:
    from judge import Evaluation


# Stages that only serve the baseline (the staged pipeline's: its warm container and a fresh
# engine's load): their whole wall time is the baseline's. The naive pipeline starts both
# containers at once in "sandbox" (the judge's column), the baseline's load counted as its request.
BASELINE_STAGES = ("baseline",)


def _baseline_s(e: Evaluation, stage: str, wall: float) -> float:
    """Seconds of ``stage`` that are the baseline's: its requests, or all of a baseline stage."""
    requests = e.metrics.get("stage_baseline_s", {}).get(stage, 0.0)
    return wall if stage in BASELINE_STAGES else requests


def shares(e: Evaluation) -> tuple[float, float, float]:
    """Fractions of ``e``'s wall time: (the candidate's requests, the baseline's requests and
    stages, the judge's own work: the rest)."""
    total = e.stages["total"]
    requests = e.metrics.get("baseline_engine_s", 0.0)
    cand = e.metrics["engine_s"] - requests
    base = requests + sum(
        e.stages.get(name, 0.0) - e.metrics.get("stage_baseline_s", {}).get(name, 0.0)
        for name in BASELINE_STAGES
    )
    return cand / total, base / total, (total - cand - base) / total


def report(evaluations: list[Evaluation]) -> list[str]:
    """The per-stage table and the shares per submission, as lines of text."""
    split = all("baseline_engine_s" in e.metrics for e in evaluations)
    stages: dict[str, list[tuple[float, float, float, float]]] = {}
    for e in evaluations:
        total = e.stages["total"]
        engine = e.metrics.get("stage_engine_s", {})
        baseline = e.metrics.get("stage_baseline_s", {})
        for name, seconds in e.stages.items():
            if name == "total" or ":" in name:
                continue
            cand = engine.get(name, 0.0) - baseline.get(name, 0.0)
            base = _baseline_s(e, name, seconds)
            stages.setdefault(name, []).append(
                (seconds, cand, base, (seconds - cand - base) / total)
            )
    lines = [
        f"{'stage':<12} {'wall s':>8} {'cand s':>8} {'base s':>8} {'judge s':>8} {'judge':>7}"
        f"   (medians over {len(evaluations)} evaluations; judge = wall - requests)"
    ]
    for name, rows in stages.items():
        wall, cand, base, share = (statistics.median(col) for col in zip(*rows, strict=True))
        base_text = f"{base:8.3f}" if split else f"{'-':>8}"
        own = wall - cand - base
        lines.append(
            f"{name:<12} {wall:8.3f} {cand:8.3f} {base_text} {own:8.3f} {100 * share:6.1f}%"
        )
    lines += ["", f"{'share of the evaluation':<34} {'candidate':>10} {'baseline':>9} {'judge':>7}"]
    for label in ("baseline", "reference", None):
        own = [shares(e) for e in evaluations if label is None or e.label == label]
        if not own:
            continue
        cand, base, judge = (statistics.median(col) for col in zip(*own, strict=True))
        name = f"{label or 'all'}, median of {len(own)}"
        base_text = f"{100 * base:8.1f}%" if split else f"{'-':>9}"
        lines.append(f"{name:<34} {100 * cand:9.1f}% {base_text} {100 * judge:6.1f}%")
    judge_share = statistics.median(shares(e)[2] for e in evaluations)
    lines.append(
        f"judge's own work / evaluation time: median {100 * judge_share:.1f}% (goal < 10%);"
        + (
            " the baseline's requests: median"
            f" {100 * statistics.median(shares(e)[1] for e in evaluations):.1f}%"
            if split
            else " (this judge does not record the baseline's requests apart)"
        )
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--private-dir", default="results/judge")
    parser.add_argument(
        "--pipeline", choices=("naive", "staged"), help="judge.pipeline (default: the judge's)"
    )
    args = parser.parse_args()
    overrides = ["task=decode_cpu", f"judge.private_dir={args.private_dir}"]
    if args.pipeline:
        overrides.append(f"judge.pipeline={args.pipeline}")
    cfg = compose_judge_config(overrides)
    t0 = time.perf_counter()
    home = setup(cfg, progress=lambda line: print(line, file=sys.stderr))
    print(f"judge setup (cached after the first run): {time.perf_counter() - t0:.1f} s")
    mutants = [m for m in load_mutants(cfg) if m.name in ("baseline", "reference")]
    repo, shas = build_mutant_repo(cfg, home, mutants)
    queue = JudgeQueue(home.queue_path)
    # Re-judgements: every run is measured, none answered with an earlier identical tree's.
    jobs = [
        queue.enqueue(
            arm="bench",
            agent="bench",
            repo=str(repo),
            commit=shas[name],
            label=name,
            rejudge=True,
        )
        for _ in range(args.runs)
        for name in ("baseline", "reference")
    ]
    evaluations = run_until_done(cfg, home, jobs)
    for e in evaluations:
        print(f"{e.label:>10}: {describe(e)}")
    print()
    print("\n".join(report(evaluations)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
