"""``server.endpoint: chat`` end to end on the real Docker engine: the bundled ``serve_cpu``
task judged over ``/v1/chat/completions`` (set-up's references, the candidate's and the
baseline's servers in their sandboxes, the sidecar load generator), with ids from the chat
chunks and, with ``token_ids: text``, the generated text compared exactly.

Sized down by overrides (one timing pair, short single-stream requests, a loose b1 limit so
no extra pairs are drawn): each evaluation is still a full pipeline."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from judge import compose_judge_config
from judge.preflight import run_preflight
from judge.private import setup
from judge.queue import JudgeQueue
from judge.service import run_until_done
from judge.verdict import Verdict
from tasks.schema import PROJECT_ROOT
from tests.judge.test_server_docker import git_commit

pytestmark = pytest.mark.docker

TASK = PROJECT_ROOT / "tasks" / "serve_cpu"
SMALL = [
    "task=serve_cpu",
    "task.server.endpoint=chat",
    "task.timing.runs=1",
    "task.b1.pairs=5",
    "task.b1.max_pairs=5",
    "task.b1.new_tokens=16",
    "task.spec.b1_max_regression=1.0",
]


def _home(private: Path, *extra: str):
    cfg = compose_judge_config([*SMALL, *extra, f"judge.private_dir={private}"])
    assert cfg.task.server.endpoint == "chat"
    return cfg, setup(cfg)


def _candidates(repo: Path) -> tuple[str, str]:
    """The template (the baseline) and the reference solution, as two commits."""
    shutil.copytree(TASK / "template", repo, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    base = git_commit(repo, "baseline")
    patch = TASK / "reference" / "solution.patch"
    subprocess.run(["git", "-C", str(repo), "apply", str(patch)], check=True)
    return base, git_commit(repo, "reference solution")


def test_serve_cpu_judged_over_chat(tmp_path_factory, base_image):
    cfg, home = _home(tmp_path_factory.mktemp("chat-judge"))
    repo = tmp_path_factory.mktemp("chat-cand") / "repo"
    base, ref = _candidates(repo)
    queue = JudgeQueue(home.queue_path)
    jobs = [queue.enqueue(arm="a", agent="w", repo=str(repo), commit=c) for c in (base, ref)]
    same, faster = run_until_done(cfg, home, jobs)
    assert (same.verdict, faster.verdict) == (Verdict.PASS, Verdict.PASS), (
        same.detail,
        faster.detail,
    )
    # The reference batches concurrent requests: more tokens per second than the baseline.
    assert faster.metrics["x_baseline"] > same.metrics["x_baseline"]
    assert faster.metrics["out_tok_s"] > faster.metrics["baseline_out_tok_s"]
    # A wrong server over chat: the proxy asks the task's server for 4 tokens too many.
    report = run_preflight(cfg, home, only=["gen_ignore_max_tokens"])
    got = {row.mutant: row.got for row in report.rows}
    assert report.ok and "mismatch" in got["gen_ignore_max_tokens"], got


def test_token_ids_text_compares_the_generated_text(tmp_path_factory, base_image):
    cfg, home = _home(tmp_path_factory.mktemp("chat-text-judge"), "task.server.token_ids=text")
    repo = tmp_path_factory.mktemp("chat-text-cand") / "repo"
    base, _ = _candidates(repo)
    queue = JudgeQueue(home.queue_path)
    (same,) = run_until_done(
        cfg, home, [queue.enqueue(arm="a", agent="w", repo=str(repo), commit=base)]
    )
    assert same.verdict == Verdict.PASS, same.detail
    assert same.metrics["out_tok_s"] > 0  # counted from the chunks that carried text
    # Two concurrent requests trade prompts: each reply's text is another prompt's. And the
    # same text in one chunk per character gains nothing: a timed run whose text equals its
    # paired baseline run's is credited with that run's token count, not its own chunks.
    report = run_preflight(cfg, home, only=["gen_swap", "gen_split_chunks"])
    rows = {row.mutant: row for row in report.rows}
    assert report.ok, [(r.mutant, r.got, r.detail) for r in report.rows]
    assert "mismatch" in rows["gen_swap"].got and "text differs" in rows["gen_swap"].detail
    assert rows["gen_split_chunks"].got.startswith("PASS"), rows["gen_split_chunks"].got
