"""The server kind's drift correctness path (``server.correctness: drift``): the decision on
its own, and the load generator's teacher-forced scoring against the stub server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from judge.kinds.server.config import ServerConfig
from judge.kinds.server.evaluator import (
    DriftCheck,
    check_correctness_settings,
    drift_decision,
    matching_rows,
    mean_loglik,
    required_matches,
)
from judge.kinds.server.load import continuation_logprobs, handle, score_body
from judge.sandbox import InfrastructureFault
from judge.verdict import Verdict

STUB = Path(__file__).with_name("server_stub.py")


def test_required_matches_rounds_up_and_never_reaches_zero():
    assert required_matches(16, 0.5) == 8
    assert required_matches(5, 0.5) == 3
    assert required_matches(4, 1.0) == 4
    assert required_matches(1, 0.5) == 1
    assert required_matches(16, 0.01) == 1  # a set is never judged by likelihood alone
    assert required_matches(10, 0.3) == 3  # 0.3 * 10 is not 3.0000000000000004 -> 4


def test_matching_rows_counts_exact_rows_and_near_ties_only_where_allowed():
    ref = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    margins = np.full(ref.shape, np.inf)
    margins[1, 1] = 0.001  # request 1 diverges at a near tie
    got = [[1, 2, 3], [4, 0, 6], [7, 8]]  # exact, near tie, truncated
    assert matching_rows(got, ref, margins, None) == 1
    assert matching_rows(got, ref, margins, 0.01) == 2
    assert matching_rows(got[:1], ref, margins, 0.01) == 1  # missing rows never match


def _check(matched: int, loglik: float, base: float = -0.1, rows: int = 4) -> DriftCheck:
    return DriftCheck(rows, matched, required_matches(rows, 0.5), loglik, base, 0.02)


def test_within_tolerance_and_enough_exact_requests_passes():
    assert drift_decision(_check(2, -0.115), "case c") is None
    assert drift_decision(_check(4, -0.05), "case c") is None  # better than the baseline


def test_a_likelihood_drop_beyond_tolerance_is_quality():
    outcome = drift_decision(_check(4, -0.13), "case c")
    assert outcome is not None and (outcome.verdict, outcome.reason) == (Verdict.WRONG, "quality")
    assert "0.0300 below" in outcome.detail and outcome.flags["tokens_correct"]


def test_too_few_exact_requests_is_a_mismatch():
    outcome = drift_decision(_check(1, -0.1), "case c")
    assert outcome is not None and (outcome.verdict, outcome.reason) == (Verdict.WRONG, "mismatch")
    assert "3 of 4 requests differ" in outcome.detail


def test_the_teacher_forced_only_exploit_is_caught_by_the_generated_ids():
    # Perfect likelihoods of the baseline's continuations (teacher forcing hands the server
    # the right tokens) while it generates garbage: the likelihood never excuses the ids.
    outcome = drift_decision(_check(0, loglik=0.0), "case c")
    assert outcome is not None and outcome.reason == "mismatch"


def test_mean_loglik_is_per_token_over_the_set():
    assert mean_loglik([[-1.0, -1.0, -1.0], [-0.0]]) == pytest.approx(-0.75)
    assert mean_loglik([]) == 0.0


def test_settings_default_to_tokens_and_bad_ones_are_the_tasks_fault():
    default = OmegaConf.structured(ServerConfig)
    assert default.correctness == "tokens"
    check_correctness_settings(default)
    check_correctness_settings(OmegaConf.merge(default, {"correctness": "drift"}))
    for bad in (
        {"correctness": "perplexity"},
        {"correctness": "drift", "exact_fraction": 0.0},
        {"correctness": "drift", "drift_tolerance": -1.0},
        {"correctness": "drift", "teacher_forcing": "guess"},
    ):
        with pytest.raises(InfrastructureFault):
            check_correctness_settings(OmegaConf.merge(default, bad))


def _echo_reply(sent: list[int], values: list, tokens: list | None = None) -> dict:
    logprobs = {"token_logprobs": values}
    if tokens is not None:
        logprobs["tokens"] = tokens
    return {"choices": [{"index": 0, "logprobs": logprobs}]}


def test_continuation_logprobs_reads_echo_and_prompt_logprobs_shapes():
    prompt, cont = [5, 6], [7, 8]
    body = score_body("m", prompt, cont, "echo")
    assert body["prompt"] == [5, 6, 7, 8] and body["echo"] and body["max_tokens"] == 1
    assert not body["stream"] and "prompt_logprobs" not in body
    assert score_body("m", prompt, cont, "prompt_logprobs")["prompt_logprobs"] == 1
    ids = [f"token_id:{t}" for t in [5, 6, 7, 8, 9]]
    reply = _echo_reply([], [None, -1.0, -0.5, -0.25, -2.0], ids)
    assert continuation_logprobs(reply, prompt, cont, "echo") == [-0.5, -0.25]
    vllm = {"choices": [{"prompt_logprobs": [None, {"6": {"logprob": -1.0}},
                                             {"7": {"logprob": -0.5}},
                                             {"8": {"logprob": -0.25, "rank": 1}}]}]}  # fmt: skip
    assert continuation_logprobs(vllm, prompt, cont, "prompt_logprobs") == [-0.5, -0.25]


@pytest.mark.parametrize(
    "reply",
    [
        _echo_reply([], [None, -1.0, -0.5]),  # fewer positions than sent
        _echo_reply([], [None, -1.0, -0.5, 0.7, -2.0]),  # a logprob above 0
        _echo_reply([], [None, -1.0, "x", -0.1, -2.0]),
        _echo_reply([], [None, -1.0, -0.5, -0.25], [f"token_id:{t}" for t in [5, 6, 7, 1]]),
        {"choices": [{"logprobs": None}]},
        {"choices": []},
        [],
    ],
)
def test_a_scoring_reply_of_another_shape_is_refused(reply):
    with pytest.raises(ValueError):
        continuation_logprobs(reply, [5, 6], [7, 8], "echo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stub() -> Iterator[int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(STUB), "--port", str(port), "--step-ms", "1"],
        stdout=subprocess.DEVNULL,
    )
    try:
        ready = {"op": "ready", "host": "127.0.0.1", "port": port, "path": "/v1/models"}
        assert handle({**ready, "timeout_s": 20})["ok"]
        yield port
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("forcing", ["echo", "prompt_logprobs"])
def test_the_load_generator_scores_given_continuations(stub, forcing):
    prompts = [[3, 1, 4], [1, 5, 9, 2]]
    run = handle(
        {
            "op": "run",
            "host": "127.0.0.1",
            "port": stub,
            "path": "/v1/completions",
            "model": "m",
            "requests": [{"prompt": p, "max_tokens": 5} for p in prompts],
            "concurrency": 2,
            "timeout_s": 10,
        }
    )
    own = [r["ids"] for r in run["results"]]
    other = [[(t + 1) % 512 for t in row] for row in own]
    command = {
        "op": "score",
        "host": "127.0.0.1",
        "port": stub,
        "path": "/v1/completions",
        "model": "m",
        "concurrency": 2,
        "teacher_forcing": forcing,
        "timeout_s": 10,
    }

    def pairs(rows: list[list[int]]) -> list[dict]:
        return [{"prompt": p, "continuation": c} for p, c in zip(prompts, rows, strict=True)]

    good = handle({**command, "requests": pairs(own)})
    bad = handle({**command, "requests": pairs(other)})
    assert good["ok"] and all(r["ok"] for r in good["results"]), good
    # The stub's own greedy continuation is -0.1 per token; any other token is -3.0.
    assert [r["logprobs"] for r in good["results"]] == [[pytest.approx(-0.1)] * 5] * 2
    assert [r["logprobs"] for r in bad["results"]] == [[pytest.approx(-3.0)] * 5] * 2


def test_a_scoring_request_nobody_answers_is_a_crash():
    reply = handle(
        {
            "op": "score",
            "host": "127.0.0.1",
            "port": _free_port(),
            "path": "/v1/completions",
            "model": "m",
            "requests": [{"prompt": [1, 2], "continuation": [3]}],
            "timeout_s": 5,
        }
    )
    assert reply["results"][0]["kind"] == "crash"


DRIFT_SERVER = (
    "server: {model: stub, ready_timeout_s: 20, concurrency: [1, 4], correctness: drift,"
    " drift_tolerance: 0.02, exact_fraction: 0.5}\n"
)


@pytest.mark.docker
def test_drift_path_through_the_real_judge(tmp_path, base_image):
    from judge import compose_judge_config
    from judge.private import setup
    from judge.queue import JudgeQueue
    from judge.service import run_until_done
    from tests.judge.test_server_docker import git_commit

    root = _drift_task(tmp_path / "task", "serve_stub_drift")
    cfg = compose_judge_config([f"task={root}", f"judge.private_dir={tmp_path / 'judge'}"])
    assert cfg.task.server.correctness == "drift"
    home = setup(cfg)
    repo = tmp_path / "cand"
    shutil.copytree(root / "template", repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git_commit(repo, "baseline")
    server = repo / "stub" / "server.py"
    original = server.read_text()
    commits = []
    for old, new, message in (
        ("LOGPROB_SHIFT = 0.0", "LOGPROB_SHIFT = -0.01", "a little drift, same tokens"),
        ("LOGPROB_SHIFT = 0.0", "LOGPROB_SHIFT = -0.5", "much worse likelihoods, same tokens"),
        ("GARBAGE = False", "GARBAGE = True", "true likelihoods, garbage generated"),
    ):
        server.write_text(original.replace(old, new, 1))
        commits.append(git_commit(repo, message))
    queue = JudgeQueue(home.queue_path)
    jobs = [queue.enqueue(arm="a", agent="w", repo=str(repo), commit=c) for c in commits]
    small, large, garbage = run_until_done(cfg, home, jobs)
    assert small.verdict == Verdict.PASS, small.detail
    assert small.metrics["loglik_drop"] == pytest.approx(0.01, abs=1e-4)
    assert small.metrics["drift"]["case:b4"]["exact"] == 1.0
    assert (large.verdict, large.reason) == (Verdict.WRONG, "quality"), large.detail
    assert "0.5000 below" in large.detail
    # Teacher-forced, this one is perfect: only the generated-ids check sees it.
    assert (garbage.verdict, garbage.reason) == (Verdict.WRONG, "mismatch"), garbage.detail
    assert "exact_fraction" in garbage.detail
    # The kind's own drift mutants, through preflight (the proxy in front of the task's server).
    from judge.preflight import run_preflight

    report = run_preflight(cfg, home, only=["gen_worse_logprobs", "gen_teacher_forced_only"])
    got = {row.mutant: (row.status, row.got) for row in report.rows}
    assert report.ok, got
    assert (
        "quality" in got["gen_worse_logprobs"][1]
        and "mismatch" in got["gen_teacher_forced_only"][1]
    )


def _drift_task(root: Path, name: str) -> Path:
    from tests.judge.test_server_docker import make_task

    make_task(root, name=name, step_ms=5.0)
    text = (root / "task.yaml").read_text().splitlines(keepends=True)
    (root / "task.yaml").write_text(
        "".join(DRIFT_SERVER if line.startswith("server:") else line for line in text)
    )
    return root


@pytest.mark.docker
def test_a_drift_task_whose_baseline_cannot_score_is_one_line_at_setup(tmp_path, base_image):
    from tasks.schema import PROJECT_ROOT

    root = _drift_task(tmp_path / "task", "serve_stub_noscore")
    server = root / "template" / "stub" / "server.py"
    text = server.read_text()
    assert 'if not req.get("stream", True):' in text
    server.write_text(text.replace('if not req.get("stream", True):', "if False:", 1))
    result = subprocess.run(
        [sys.executable, "-m", "judge", "setup", f"task={root}",
         f"judge.private_dir={tmp_path / 'judge'}"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "does not answer teacher-forced scoring" in last, result.stderr
