"""Regenerate ``template/harness/public_expected.json``: baseline tokens on the public prompts.

Run ``python -m tasks.decode_cpu.make_public_expected`` after any change to the template's
model or weights (both are frozen once the task ships; the file is in the frozen zone too).
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "template"
TARGET = TEMPLATE / "harness" / "public_expected.json"

# Runs in a fresh interpreter so the template's `engine` package never meets another one.
_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from engine import Engine
prompts, steps = json.loads(sys.stdin.read())
engine = Engine()
engine.load()
engine.prefill(prompts)
print(json.dumps(engine.decode(steps)[0]))
"""


def generate(template: Path = TEMPLATE) -> dict:
    """The public prompts and the template engine's greedy tokens for them."""
    check = runpy.run_path(str(template / "harness" / "check.py"))
    vocab = runpy.run_path(str(template / "engine" / "config.py"))["CONFIG"].vocab
    prompts = check["public_prompts"](
        check["PUBLIC_SEED"], check["BATCH"], check["PROMPT_LEN"], vocab
    )
    steps = check["STEPS"]
    out = subprocess.run(
        [sys.executable, "-I", "-B", "-c", _SCRIPT, str(template)],
        input=json.dumps([prompts, steps]),
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        "seed": check["PUBLIC_SEED"],
        "steps": steps,
        "prompts": prompts,
        "tokens": json.loads(out.stdout),
    }


def main() -> None:
    """Write the file."""
    data = generate()
    TARGET.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
