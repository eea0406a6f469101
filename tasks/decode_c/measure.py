"""Measure a patch's speed against the baseline on this machine (local, untrusted numbers).

    python tasks/decode_c/measure.py [PATCH ...]     # default: reference/solution.patch

Each build is the template with the patch applied (``git apply``), compiled with the task's
build flags; B=16 and B=1 runs (prefill + decode + reset) on the same prompts alternate between
the baseline and the candidate, and the tokens of both must be equal. Prints the median ratio.
Standard library and git only; nothing of swarmlab.
"""

from __future__ import annotations

import json
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = Path(__file__).resolve().parent
TEMPLATE = TASK / "template"
CHECK = runpy.run_path(str(TEMPLATE / "harness" / "check.py"))
MAKE_PROMPTS = runpy.run_path(str(TASK / "inputs.py"))["make_prompts"]
VOCAB = 3000


def build(dest: Path, patch: Path | None) -> Path:
    """The template (with `patch` applied) compiled into dest/build; the program's path."""
    tree = dest / "tree"
    shutil.copytree(TEMPLATE, tree, ignore=shutil.ignore_patterns("build"))
    if patch is not None:
        subprocess.run(["git", "apply", str(patch.resolve())], cwd=tree, check=True)
    out = dest / "build"
    out.mkdir()
    argv = [part.replace("{build}", str(out)) for part in CHECK["BUILD"]]
    subprocess.run(argv, cwd=tree, check=True)
    return out / "serve"


class Engine:
    def __init__(self, program: Path) -> None:
        self.proc = subprocess.Popen(
            [str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.ask({"op": "load"})

    def ask(self, message: dict) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        if not reply.get("ok"):
            raise RuntimeError(f"{message['op']}: {reply}")
        return reply

    def run(self, prompts: list[list[int]], steps: int) -> tuple[list[list[int]], float]:
        start = time.perf_counter()
        self.ask({"op": "prefill", "prompts": prompts})
        tokens = self.ask({"op": "decode", "steps": steps})["tokens"]
        self.ask({"op": "reset"})
        return tokens, time.perf_counter() - start

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def compare(base: Engine, cand: Engine, batch: int, runs: int, seed: int) -> tuple[float, bool]:
    ratios, same = [], True
    for i in range(runs):
        prompts = MAKE_PROMPTS(seed + i, batch, (8, 24), VOCAB)
        if i % 2:
            t_c, s_c = cand.run(prompts, 64)
            t_b, s_b = base.run(prompts, 64)
        else:
            t_b, s_b = base.run(prompts, 64)
            t_c, s_c = cand.run(prompts, 64)
        same &= t_b == t_c
        ratios.append(s_b / s_c)
    return statistics.median(ratios), same


def main(argv: list[str]) -> int:
    patches = [Path(a) for a in argv] or [TASK / "reference" / "solution.patch"]
    with tempfile.TemporaryDirectory() as tmp:
        base = Engine(build(Path(tmp) / "base", None))
        for n, patch in enumerate(patches):
            cand = Engine(build(Path(tmp) / f"cand{n}", patch))
            x16, same16 = compare(base, cand, 16, 5, 7_000)
            x1, same1 = compare(base, cand, 1, 9, 9_000)
            cand.close()
            print(
                f"{patch.name}: B=16 x {x16:.2f} (tokens equal: {same16}); "
                f"B=1 x {x1:.2f} (tokens equal: {same1})"
            )
        base.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
