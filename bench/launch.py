"""How long does it take to prepare and launch an arm, and what does an agent cost in memory?

    .venv/bin/python bench/launch.py [--sizes 1,5,20] [--settle 8]

For arms of 1, 5 and 20 scripted agents (real containers, real clones, the real scripted
program, a real gateway answering their requests; no judge worker, so submissions only queue):
seconds per agent to prepare the workspaces, seconds per agent until every container runs, and
memory per agent (the container's cgroup usage after ``--settle`` seconds of work). Ratios are
per agent, measured in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from isolation import docker_client, ensure_base_image
from isolation.backends import get_backend
from isolation.gitutil import template_repo
from isolation.workspace import Seat, prepare_arm
from judge.queue import JudgeQueue
from runner.config import register_configs
from runner.events import EventLog
from runner.experiment import agent_specs
from runner.gateway import Gateway
from tasks.schema import PROJECT_ROOT

DIRECTIONS = ["projections", "moe", "head", "integration"]


def compose(run_dir: Path):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return hydra_compose("runner", overrides=["arm=solo", f"hydra.run.dir={run_dir}"])


class _Home:  # agent_specs needs only the judge folder's path (hidden from agents)
    def __init__(self, root: Path) -> None:
        self.root = root


def measure(size: int, settle: float, scratch: Path) -> tuple[float, float, float]:
    run_dir = scratch / f"arm{size}"
    cfg = compose(run_dir)
    source, commit = template_repo(PROJECT_ROOT / "tasks/decode_cpu/template", scratch / f"t{size}")
    seats = [Seat(f"w{i}", "worker", DIRECTIONS[i % 4]) for i in range(size)]
    t0 = time.perf_counter()
    arm = prepare_arm(run_dir, "bench", source, commit, seats, 1000, 1000)
    prepare_s = time.perf_counter() - t0
    events = EventLog(run_dir / "events.sqlite")
    gateway = Gateway(events, JudgeQueue(run_dir / "queue.sqlite"), [arm])
    deadline = time.time() + 600
    specs = agent_specs(cfg, f"bench-{size}", [arm], deadline, _Home(scratch / "judge"))
    backend = get_backend("docker")
    t0 = time.perf_counter()
    handles = [backend.start(spec) for spec in specs]
    while not all(h.running() for h in handles):
        time.sleep(0.05)
    launch_s = time.perf_counter() - t0
    end = time.monotonic() + settle
    while time.monotonic() < end:
        gateway.poll()
        time.sleep(0.2)
    client = docker_client()
    memory = []
    for container in client.containers.list(filters={"label": f"org.swarmlab.run=bench-{size}"}):
        memory.append(container.stats(stream=False)["memory_stats"].get("usage", 0) / 2**20)
    backend.cleanup(f"bench-{size}")
    return prepare_s / size, launch_s / size, statistics.median(memory) if memory else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,5,20")
    parser.add_argument("--settle", type=float, default=8.0)
    args = parser.parse_args()
    ensure_base_image()
    print(f"{'agents':>6} {'prepare s/agent':>16} {'launch s/agent':>15} {'memory MiB/agent':>17}")
    with tempfile.TemporaryDirectory() as scratch:
        for size in (int(s) for s in args.sizes.split(",")):
            prepare, launch, memory = measure(size, args.settle, Path(scratch))
            print(f"{size:>6} {prepare:>16.3f} {launch:>15.3f} {memory:>17.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
