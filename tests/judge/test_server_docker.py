"""The server kind end to end on the real Docker engine: a tiny stdlib server task (the stub
in ``server_stub.py``), set up, and candidates judged through the sidecar load generator."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from judge import compose_judge_config
from judge.private import setup
from judge.queue import JudgeQueue
from judge.service import run_until_done
from judge.verdict import Verdict

STUB = Path(__file__).with_name("server_stub.py")

TASK_YAML = """\
name: {name}
kind: server
template: template
inputs: "inputs.py:make_prompts"
frozen: [frozen/**]
package_names: [stub]
serve: ["{{python}}", "-I", "-B", "stub/server.py", "--host", "{{host}}", "--port", "{{port}}",
        "--step-ms", "{step_ms}"]
vocab: 512
cases:
  - {{name: b1, batch: 1, prompt_len: [4, 12], new_tokens: 8}}
  - {{name: b4, batch: 4, prompt_len: [4, 12], new_tokens: 8}}
timing: {{batch: 4, new_tokens: 16, runs: 3, prompt_len: [4, 12]}}
b1: {{pairs: 5, max_pairs: 5, new_tokens: 16, prompt_len: [4, 12]}}
alternating: {{rounds: 0}}
spec: {{target_x_baseline: 2.0, b1_max_regression: 0.5}}
server: {{model: stub, ready_timeout_s: 20, concurrency: [1, 4]}}
"""

INPUTS = """\
import random


def make_prompts(seed, batch, prompt_len, vocab):
    lo, hi = prompt_len
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(batch)]
"""


def make_task(root: Path, name: str = "serve_stub", step_ms: float = 4.0) -> Path:
    """A server task folder whose baseline serves one request at a time."""
    (root / "template" / "stub").mkdir(parents=True, exist_ok=True)
    (root / "template" / "frozen").mkdir(exist_ok=True)
    (root / "template" / "frozen" / "README").write_text("frozen\n")
    text = STUB.read_text().replace("SERIAL = False", "SERIAL = True", 1)
    (root / "template" / "stub" / "server.py").write_text(text)
    (root / "inputs.py").write_text(INPUTS)
    (root / "task.yaml").write_text(TASK_YAML.format(name=name, step_ms=step_ms))
    return root


def git_commit(repo: Path, message: str) -> str:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            message,
        ],
        check=True,
    )
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()
