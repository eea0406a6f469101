"""What does watching a run cost the judge? Goal (issue 16): nothing measurable.

    .venv/bin/python bench/view_judge.py [--events 1000000] [--keep DIR] [--pairs 8]

The judge's work is CPU-bound and serial: one candidate engine decoding at a time. This bench
times a judge-like workload (a single-threaded float32 decode loop, matrix-vector products with a
non-linearity, the shape of ``tasks/decode_cpu``'s engine; a fixed amount of work, about 3 s
here) in a fresh process, in interleaved pairs: once while nobody watches, once while the view
serves the run as ``python -m runner ... view=true`` starts it (its own process) and a client
polls it every second as the page does (``/api/changes``, every section again when their build
moved). In both halves a writer appends one evaluation to the run every two seconds, as a live
run does, so the watched half makes the view read and rebuild. Real ``python -m judge evaluate``
runs (20-60 s each, in Docker) would take an hour for the same number of pairs.

Prints, as JSON: every workload's seconds, each half's median, and the ratio watched / alone
(1.0: no cost) of wall seconds (what the judge's tok/s sees) and of the workload's own CPU
seconds, with the machine's load; the view's own CPU seconds during the watched halves.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from analysis_scale import write_run
from view_scale import _append

from analysis.tables import is_run_dir
from analysis.view.data import SECTIONS

ROOT = Path(__file__).resolve().parent.parent

#: The judge-like workload: decode ``STEPS`` tokens through ``LAYERS`` square layers.
WORKLOAD = """
import os, time
import numpy as np
rng = np.random.default_rng(0)
layers = [rng.standard_normal((1024, 1024), dtype=np.float32) / 32 for _ in range(4)]
x = rng.standard_normal(1024, dtype=np.float32)
began, cpu = time.perf_counter(), time.process_time()
for _ in range({steps}):
    for w in layers:
        x = np.tanh(w @ x)
print(time.perf_counter() - began, time.process_time() - cpu)
"""


def workload(steps: int) -> tuple[float, float]:
    """One judge-like run in a fresh single-threaded process; its decode seconds (wall, CPU)."""
    env = {**os.environ, **{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD.format(steps=steps)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


class Writer(threading.Thread):
    """Appends one evaluation every ``every_s`` seconds, as a live run's runner does."""

    def __init__(self, run_dir: Path, every_s: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.every_s = run_dir, every_s
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            _append(self.run_dir)


class Page(threading.Thread):
    """A browser's page, polling once a second: the rows since the read it holds, and every
    section again when the server's build of them moved."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.stop = threading.Event()
        self.polls = self.loads = 0

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=600) as res:
            return json.loads(res.read())

    def run(self) -> None:
        held = sections = None
        while not self.stop.wait(1.0):
            got = self._get(f"/api/changes?since={held or 0}")
            self.polls += 1
            if got.get("sections_seq") != sections:
                seqs = [self._get(f"/api/{name}")["seq"] for name in SECTIONS]
                held = sections = min(seqs)
                self.loads += 1
            elif not got["reset"]:
                held = got["seq"]


def _view(run_dir: Path) -> tuple[subprocess.Popen, str]:
    """The view in its own process, as the runner's view=true starts it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "analysis.view", str(run_dir), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"http://\S+/", line)
        if found:
            return proc, found.group(0).rstrip("/")
    raise RuntimeError("the view did not start")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    """Write (or reuse) the run, time the workload alone and watched, print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the run here and leave it")
    parser.add_argument("--pairs", type=int, default=8, help="alone/watched pairs, interleaved")
    parser.add_argument("--steps", type=int, default=1500, help="the workload's decode steps")
    args = parser.parse_args()
    run_dir = args.keep or Path(tempfile.mkdtemp(prefix="swarmlab-view-judge-"))
    if not is_run_dir(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        write_run(run_dir, args.events)
    out: dict = {"events": args.events, "load_before": os.getloadavg()}
    writer = Writer(run_dir)
    writer.start()
    proc, base = _view(run_dir)
    try:
        # The view's first read and build before timing: the page of a watched run opens once.
        while True:
            with urllib.request.urlopen(base + "/api/changes?since=0", timeout=600) as res:
                if json.loads(res.read()).get("sections_seq") is not None:
                    break
        alone, watched, view_cpu = [], [], 0.0
        for _ in range(args.pairs):
            alone.append(workload(args.steps))
            page = Page(base)
            cpu0 = _cpu_s(proc.pid)
            page.start()
            time.sleep(2.0)  # the page polling (and the view reading) before the judge starts
            watched.append(workload(args.steps))
            page.stop.set()
            page.join()
            view_cpu += _cpu_s(proc.pid) - cpu0
    finally:
        writer.stop.set()
        proc.terminate()
        proc.wait()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    a, w = statistics.median(v[0] for v in alone), statistics.median(v[0] for v in watched)
    ac, wc = statistics.median(v[1] for v in alone), statistics.median(v[1] for v in watched)
    out.update(
        {
            "alone_s": [round(v[0], 3) for v in alone],
            "watched_s": [round(v[0], 3) for v in watched],
            "alone_median_s": round(a, 3),
            "watched_median_s": round(w, 3),
            "ratio_watched_over_alone": round(w / a, 3),
            "pair_ratios": [round(y[0] / x[0], 3) for x, y in zip(alone, watched, strict=True)],
            "pair_ratio_median": round(
                statistics.median(y[0] / x[0] for x, y in zip(alone, watched, strict=True)), 3
            ),
            # CPU seconds of the workload itself: what the view's caches and memory traffic
            # cost it, without the waits for a core (the machine's other load is in those).
            "cpu_ratio_watched_over_alone": round(wc / ac, 3),
            "view_cpu_s_while_watched": round(view_cpu, 2),
            "watched_wall_s": round(sum(v[0] for v in watched) + 2.0 * args.pairs, 1),
            "load_after": os.getloadavg(),
            "cpus": os.cpu_count(),
        }
    )
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
