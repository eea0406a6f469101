"""False convictions of unmodified code: how often the judge calls innocent code anything but PASS.

    .venv/bin/python bench/judge_false_convictions.py [--runs 3] [--tasks decode_cpu,...]
        [--compare DIR] [--private-dir DIR]

For each task (default: decode_cpu, decode_c, serve_cpu) two candidates that must PASS, the
unmodified template and the task's reference (``reference/solution.patch``), are judged
``--runs`` times each quiet and as often beside a CPU hog (``sh -c 'while :; do :; done'`` on
the host, as in the measurements that once convicted the baseline): 12 evaluations per task by
default. Conditions alternate run by run (quiet first, then loaded first, ...), so drift hits
both. Each evaluation is a real ``python -m judge evaluate`` (Docker sandbox, the judge's own
clock) through this checkout's judge; with ``--compare DIR`` (a worktree of an older commit,
say) every evaluation is made by both judges back to back, the order alternating, each with a
private folder of its own.

Prints one line per evaluation, then per judge, task and condition the verdicts, the B=1
ratio's spread and the mean time of the unmodified template's PASSes (the judge's cost of a
PASS), and with ``--compare`` that cost's ratio (this judge / the other, same slots). Its last
line is ``false convictions: quiet A/N, loaded B/M`` for this checkout's judge. The numbers
come from this one run on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
TASKS = ("decode_cpu", "decode_c", "serve_cpu")


def repo(source: Path, where: Path, patch: Path | None) -> Path:
    """A one-commit repository of ``source`` (with ``patch`` applied): a candidate."""
    subprocess.run(["cp", "-r", str(source), str(where)], check=True)
    git = ["git", "-C", str(where), "-c", "user.name=bench", "-c", "user.email=bench@local"]
    subprocess.run([*git, "init", "-q"], check=True)
    if patch is not None:
        subprocess.run([*git, "apply", str(patch)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "candidate"], check=True)
    return where


def evaluate(project: Path, task: str, candidate: Path, private: Path) -> dict:
    """One real evaluation through ``project``'s judge: its JSON (last line of stdout)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "judge",
            "evaluate",
            f"task={task}",
            f"candidate={candidate}",
            f"judge.private_dir={private}",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"verdict": "ERROR", "reason": "bench", "detail": done.stderr[-300:]}


class Hog:
    """A process spinning on the host's CPUs while it lives (``with Hog(): ...``)."""

    def __enter__(self) -> Hog:
        self.proc = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs", type=int, default=3, help="rounds: each judges both candidates quiet and loaded"
    )
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--compare", type=Path, default=None, help="another checkout's judge")
    parser.add_argument("--private-dir", type=Path, default=None)
    args = parser.parse_args()
    judges = {"new": PROJECT}
    if args.compare is not None:
        judges["old"] = args.compare.resolve()
    work = Path(tempfile.mkdtemp(prefix="false-convictions-"))
    private = args.private_dir or work / "judge"
    tasks = [t for t in args.tasks.split(",") if t]
    candidates = {}
    for task in tasks:
        root = PROJECT / "tasks" / task
        patch = root / "reference" / "solution.patch"
        candidates[task] = {
            "template": repo(root / "template", work / f"{task}-template", None),
            "reference": repo(root / "template", work / f"{task}-reference", patch),
        }
    results: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    slot = 0
    for run in range(args.runs):
        order = ("quiet", "loaded") if run % 2 == 0 else ("loaded", "quiet")
        for task in tasks:
            for name, candidate in candidates[task].items():
                for condition in order:
                    names = list(judges) if slot % 2 == 0 else list(judges)[::-1]
                    slot += 1
                    for judge in names:
                        where = private / judge
                        if condition == "loaded":
                            with Hog():
                                got = evaluate(judges[judge], task, candidate, where)
                        else:
                            got = evaluate(judges[judge], task, candidate, where)
                        got["candidate"] = name
                        results[(judge, task, condition)].append(got)
                        m = got.get("metrics") or {}
                        print(
                            f"{judge} {task:10} {name:9} {condition:6} run {run + 1}:"
                            f" {got.get('verdict')} {got.get('reason') or ''}"
                            f" x={m.get('x_baseline')} b1={m.get('b1_ratio')}"
                            f" units={m.get('b1_units')} pairs={m.get('b1_pairs')}"
                            f" [{(got.get('stages') or {}).get('total', 0):.1f} s]",
                            flush=True,
                        )
    wrong: dict[str, dict[str, int]] = defaultdict(lambda: {"quiet": 0, "loaded": 0})
    total: dict[str, dict[str, int]] = defaultdict(lambda: {"quiet": 0, "loaded": 0})
    cost: dict[str, list[float]] = defaultdict(list)
    for (judge, task, condition), got in sorted(results.items()):
        verdicts = [
            f"{g.get('verdict')}{'/' + g['reason'] if g.get('reason') else ''}" for g in got
        ]
        b1 = [g["metrics"]["b1_ratio"] for g in got if (g.get("metrics") or {}).get("b1_ratio")]
        passes = [
            g["stages"]["total"]
            for g in got
            if g.get("verdict") == "PASS" and g["candidate"] == "template"
        ]
        cost[judge] += passes
        wrong[judge][condition] += sum(g.get("verdict") != "PASS" for g in got)
        total[judge][condition] += len(got)
        counts = dict(sorted((v, verdicts.count(v)) for v in set(verdicts)))
        print(
            f"{judge} {task} {condition}: {counts};"
            f" b1 ratio {min(b1, default=0):.3f}..{max(b1, default=0):.3f};"
            f" template PASS {statistics.mean(passes) if passes else float('nan'):.1f} s mean"
        )
    for judge in judges:
        quiet, loaded = (f"{wrong[judge][c]}/{total[judge][c]}" for c in ("quiet", "loaded"))
        print(f"{judge} judge: false convictions quiet {quiet}, loaded {loaded}")
    if "old" in judges and cost["old"] and cost["new"]:
        ratio = statistics.mean(cost["new"]) / statistics.mean(cost["old"])
        print(
            f"cost of an unmodified template's PASS: new {statistics.mean(cost['new']):.1f} s,"
            f" old {statistics.mean(cost['old']):.1f} s, ratio {ratio:.2f}"
        )
    quiet, loaded = (f"{wrong['new'][c]}/{total['new'][c]}" for c in ("quiet", "loaded"))
    print(f"false convictions: quiet {quiet}, loaded {loaded}")


if __name__ == "__main__":
    main()
