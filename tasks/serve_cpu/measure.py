"""Measure serve_cpu on this machine: the baseline (template/) against the reference
(template/ + reference/solution.patch), or any other tree, interleaved.

    python tasks/serve_cpu/measure.py [--rounds 3] [--requests 32] [--concurrency 16]
                                      [--max-tokens 64] [--patch PATCH]

Each round runs, for each server in turn (the baseline first in odd rounds), `requests`
streaming completions with `concurrency` in flight, then 4 requests one at a time (the
single-stream latency), and checks every request's tokens against the baseline's. It prints
the median aggregate output tok/s per server, their ratio and the single-stream ratio.
Local numbers (the judge measures its own); nothing of swarmlab is used.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TASK = Path(__file__).resolve().parent
sys.path.insert(0, str(TASK / "template"))
from harness import check  # noqa: E402  (the frozen client; the task folder is not a package)


def tree(dest: Path, patch: Path | None) -> Path:
    """The template copied to `dest`, with `patch` applied (git apply)."""
    shutil.copytree(TASK / "template", dest, ignore=shutil.ignore_patterns("__pycache__"))
    if patch is not None:
        subprocess.run(
            ["git", "apply", "--unsafe-paths", f"--directory={dest}", str(patch)],
            check=True,
            cwd=dest,
        )
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--patch", type=Path, default=TASK / "reference" / "solution.patch")
    args = parser.parse_args()
    prompts = check.public_prompts(7, args.requests, (8, 24), check.VOCAB)
    singles = check.public_prompts(8, 4, (8, 24), check.VOCAB)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {
            "baseline": tree(Path(tmp) / "b", None),
            "candidate": tree(Path(tmp) / "c", args.patch.resolve()),
        }
        servers = {name: check.start_server(path) for name, path in trees.items()}
        agg: dict[str, list[float]] = {name: [] for name in trees}
        lone: dict[str, list[float]] = {name: [] for name in trees}
        want: list[list[int]] = []
        wrong = 0
        try:
            for r in range(args.rounds):
                order = list(trees) if r % 2 == 0 else list(trees)[::-1]
                for name in order:
                    port = servers[name][1]
                    results, wall = check.run_concurrent(
                        "127.0.0.1", port, prompts, args.max_tokens, args.concurrency
                    )
                    agg[name].append(sum(len(x.tokens) for x in results) / wall)
                    one, one_wall = check.run_concurrent(
                        "127.0.0.1", port, singles, args.max_tokens, 1
                    )
                    lone[name].append(sum(len(x.tokens) for x in one) / one_wall)
                    got = [x.tokens for x in results + one]
                    if not want:  # the baseline's first round: the tokens every later run must give
                        want.extend(got)
                    wrong += sum(a != b for a, b in zip(got, want, strict=True))
                print(
                    f"round {r + 1}: "
                    + ", ".join(
                        f"{n} {agg[n][-1]:.0f} tok/s (alone {lone[n][-1]:.0f})" for n in trees
                    ),
                    flush=True,
                )
        finally:
            for proc, _ in servers.values():
                proc.kill()
                proc.wait()
    b, c = statistics.median(agg["baseline"]), statistics.median(agg["candidate"])
    b1, c1 = statistics.median(lone["baseline"]), statistics.median(lone["candidate"])
    print(
        f"median aggregate at concurrency {args.concurrency}: baseline {b:.0f} tok/s,"
        f" candidate {c:.0f} tok/s, ratio {c / b:.2f}x; single stream ratio {c1 / b1:.3f};"
        f" requests with other tokens than the baseline's: {wrong}"
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
