"""Does work on the other CPUs move the judge's numbers? x and B=1 of identical code, judged
quiet and beside a stand-in for the next job's untimed work, interleaved.

    .venv/bin/python bench/judge_overlap_noise.py [--runs 6] [--private-dir DIR]

Issue 13 asks to overlap the next job's untimed work (checkout, container start, build, load,
the token-only checks) with the current job's timed stages, on CPUs that are not the judge's
timing CPU, and to show that no timed number is perturbed. Before building it: how much does
such work move x and the B=1 ratio on this machine? The timed engine runs alone on its CPU, but
the judge's own process and the Docker daemon, which relay every timed request, share the other
CPUs with whatever runs there.

The unmodified baseline is re-judged ``2 x runs`` times under the default settings, alternately
quiet and busy (the order alternating pair by pair). Busy: a loop on every CPU but the judge's
timing CPU starts a sandbox container there, loads the baseline engine in it, decodes a
correctness case's shape on prompts it draws (tokens only, nothing timed), and every few rounds
removes the container and starts another, for as long as the evaluation lasts. Prints per
condition: x (standard deviation, median), the B=1 ratio's median, seconds per evaluation; then
permutation p-values for "equally spread" (Brown-Forsythe) and "the same level" (means). The
numbers come from this one run on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.stats import permutation_test, spread_test
from judge import compose_judge_config
from judge.config import SandboxConfig
from judge.preflight import build_mutant_repo, load_mutants
from judge.private import setup
from judge.queue import JudgeQueue
from judge.sandbox import open_sandbox, other_cpus
from judge.service import describe, run_until_done

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from judge import Evaluation
    from judge.private import JudgeHome

TASK = "decode_cpu"
ROUNDS_PER_CONTAINER = 5  # decode rounds before the stand-in removes its container for another


def stand_in(baseline: Path, cpus: str) -> None:
    """The busy condition's loop (run in a child process until it is terminated): containers
    on ``cpus`` serving ``baseline``, decoding drawn prompts. Prints ``ready`` once the first
    engine answered."""
    import numpy as np

    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    rng = np.random.default_rng(0)
    said = False
    while not stopping:
        sandbox = open_sandbox(
            SandboxConfig(cpuset=cpus), "cpu", owner="bench-overlap", tag=f"stand-in-{os.getpid()}"
        )
        try:
            box = sandbox.container("candidate", baseline)
            engine = box.engine(
                sandbox.serve_argv(["{python}", "-I", "-B", "harness/serve.py"]), "e"
            )
            engine.request({"op": "load"}, 60)
            if not said:
                print("ready", flush=True)
                said = True
            for _ in range(ROUNDS_PER_CONTAINER):
                if stopping:
                    break
                prompts = [
                    rng.integers(0, 4096, int(rng.integers(8, 25))).tolist() for _ in range(16)
                ]
                engine.request({"op": "prefill", "prompts": prompts}, 60)
                engine.request({"op": "decode", "steps": 48}, 60)
                engine.request({"op": "reset"}, 60)
        finally:
            sandbox.close()


def judged(
    cfg: DictConfig, home: JudgeHome, queue: JudgeQueue, repo: Path, sha: str, label: str
) -> Evaluation:
    job = queue.enqueue(
        arm="bench-overlap", agent="bench", repo=str(repo), commit=sha, label=label, rejudge=True
    )
    return run_until_done(cfg, home, [job])[0]


def summary(name: str, evaluations: list[Evaluation]) -> str:
    xs = [float(e.metrics["x_baseline"]) for e in evaluations if "x_baseline" in e.metrics]
    b1 = [float(e.metrics["b1_ratio"]) for e in evaluations if "b1_ratio" in e.metrics]
    secs = [e.stages["total"] for e in evaluations]
    sd = statistics.stdev(xs) if len(xs) >= 2 else float("nan")
    return (
        f"{name:<6} {len(evaluations):>4} {sd:>7.3f} {statistics.median(xs):>9.3f}"
        f" {statistics.median(b1):>8.3f} {statistics.median(secs):>7.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="evaluations per condition")
    parser.add_argument("--private-dir", default="results/judge-bench")
    parser.add_argument("--stand-in", nargs=2, metavar=("BASELINE", "CPUS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stand_in:
        stand_in(Path(args.stand_in[0]), args.stand_in[1])
        return 0
    cfg = compose_judge_config([f"task={TASK}", f"judge.private_dir={args.private_dir}"])
    cpus = other_cpus(cfg.judge.sandbox.cpuset)
    if not cpus:
        print("this machine has no CPU beside the judge's: nothing to overlap", file=sys.stderr)
        return 2
    home = setup(cfg, progress=lambda line: print(line, file=sys.stderr))
    repo, shas = build_mutant_repo(
        cfg, home, [m for m in load_mutants(cfg) if m.name == "baseline"]
    )
    queue = JudgeQueue(home.queue_path)
    results: dict[str, list[Evaluation]] = {"quiet": [], "busy": []}
    cpuset = ",".join(map(str, cpus))
    print(f"judge timing CPU {cfg.judge.sandbox.cpuset}; the stand-in on CPU(s) {cpuset}")
    for i in range(args.runs):
        for condition in ("quiet", "busy") if i % 2 == 0 else ("busy", "quiet"):
            helper = None
            if condition == "busy":
                helper = subprocess.Popen(
                    [sys.executable, __file__, "--stand-in", str(home.baseline), cpuset],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            try:
                if helper is not None:
                    assert helper.stdout is not None
                    if helper.stdout.readline().strip() != "ready":
                        raise SystemExit("the stand-in did not start")
                e = judged(cfg, home, queue, repo, shas["baseline"], f"{condition}{i}")
            finally:
                if helper is not None:
                    helper.send_signal(signal.SIGTERM)
                    helper.wait(timeout=120)
            results[condition].append(e)
            print(f"  {condition:<6} {describe(e)}", flush=True)
    print()
    print(f"{'':<6} {'jobs':>4} {'sd x':>7} {'median x':>9} {'B=1 x':>8} {'s/eval':>7}")
    for name, evaluations in results.items():
        print(summary(name, evaluations))
    xs = {n: [float(e.metrics["x_baseline"]) for e in v] for n, v in results.items()}
    b1 = {n: [float(e.metrics["b1_ratio"]) for e in v] for n, v in results.items()}
    print(
        f"overlap noise: x spread p {spread_test(xs['quiet'], xs['busy']):.2f},"
        f" x level p {permutation_test(xs['quiet'], xs['busy']):.2f},"
        f" B=1 level p {permutation_test(b1['quiet'], b1['busy']):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
