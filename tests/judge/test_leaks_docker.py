"""Nothing built from hidden inputs reaches what an agent sees (issue 9, item 4).

A fake engine in a real sandbox container reads a marker out of the hidden prompts it is sent
and tries to carry it out through every way an evaluation can fail: an error reply, a line
that is not JSON, ragged or out-of-range or wrongly shaped tokens (the shape itself was the
leak the red team found), deep nesting, an endless line, a reply written ahead of time, stderr
and an exit, stderr and silence, memory, and a judge exception quoting it. Each evaluation is
scored by the real ``_Run.execute``; the marker must be absent from the Evaluation's detail,
metrics and flags and from the gateway's ``verdicts.jsonl`` line, and present in the judge's
private ``log.json`` (so the test did send it somewhere).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from judge import compose_judge_config
from judge.config import SandboxConfig
from judge.kinds.decode import DecodeKind
from judge.kinds.decode.evaluator import Evaluator
from judge.queue import Job
from judge.sandbox import Sandbox
from judge.verdict import Evaluation, Verdict
from runner.gateway import verdict_line
from tests.support.sandbox import script_tree
from tests.support.unique import SESSION

pytestmark = pytest.mark.docker

MARKER = 48611731  # a hidden prompt token; the engine spells it LEAK<token>
SHAPE = 7919  # another hidden token: the fake engine returns this many rows
PROMPTS = [[MARKER, SHAPE, 5], [1, 2, 3]]
STEPS = 3
MEMORY = "256m"

FAKE_ENGINE = r"""
import json, os, sys, time
mode = sys.argv[1]
secret = None
def say(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    if op == "load":
        say({"ok": True})
    elif op == "prefill":
        secret, shape = req["prompts"][0][0], req["prompts"][0][1]
        leak = f"LEAK{secret}"
        say({"ok": True})
        if mode == "early":  # the decode reply, computed in prefill, sent ahead
            say({"ok": True, "tokens": [[secret]], "note": leak})
    elif op == "decode":
        n, b = req["steps"], 2
        sys.stderr.write(f"stderr {leak}\n"); sys.stderr.flush()
        if mode == "error":
            say({"ok": False, "error": f"bad prompt {leak}"})
        elif mode == "notjson":
            say(f"{leak} is not JSON")
        elif mode == "ragged":
            say({"ok": True, "tokens": [[1] * n, [secret]]})
        elif mode == "huge":
            say({"ok": True, "tokens": [[secret * 10**30] * n] * b})
        elif mode == "out_of_vocab":
            say({"ok": True, "tokens": [[secret] * n] * b})
        elif mode == "shape":
            say({"ok": True, "tokens": [[0] * n] * shape})
        elif mode == "nested":
            say('{"ok": true, "tokens": ' + "[" * (secret % 100000) + "]" * (secret % 100000) + "}")
        elif mode == "ok_marker":
            say({"ok": leak, "tokens": [[0] * n] * b})
        elif mode == "endless":
            while True:
                sys.stdout.write(leak); sys.stdout.flush()
        elif mode == "exit":
            sys.exit(3)
        elif mode == "silent":
            time.sleep(3600)
        elif mode == "memory":
            hog = []
            while True:
                hog.append(bytearray(16 << 20))
        elif mode == "mismatch":  # valid, but wrong at a position the engine chose
            rows = [[0] * n for _ in range(b)]
            rows[secret % b][secret % n] = 1
            say({"ok": True, "tokens": rows})
    elif op == "reset":
        say({"ok": True})
"""

MODES = {
    "error": "crash",
    "notjson": "protocol",
    "ragged": "protocol",
    "huge": "protocol",
    "out_of_vocab": "protocol",
    "shape": "protocol",
    "nested": "protocol",
    "ok_marker": "protocol",
    "endless": "protocol",
    "early": "protocol",
    "exit": "crash",
    "silent": "timeout",
    "memory": "memory",
    "mismatch": "mismatch",
}


@pytest.fixture(scope="module")
def box(tmp_path_factory, base_image):
    tree = script_tree(tmp_path_factory.mktemp("fake"), {"fake_engine.py": FAKE_ENGINE})
    sandbox = Sandbox(SandboxConfig(memory=MEMORY), "cpu", owner="test", tag=f"leaks-{SESSION}")
    try:
        yield sandbox, sandbox.container("candidate", tree)
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    where = tmp_path_factory.mktemp("leaks-judge")
    cfg = compose_judge_config(
        ["task=decode_cpu", f"judge.private_dir={where}", f"judge.sandbox.memory={MEMORY}"]
    )
    ref = SimpleNamespace(
        tokens=np.zeros((2, STEPS), dtype=np.int64),
        margins=np.ones((2, STEPS)),
        prefill_s=0.1,
        decode_s=0.1,
    )
    home = SimpleNamespace(evals=where / "evals", references={"case:fake": ref}, inputs={})
    return Evaluator(cfg, home, DecodeKind())  # type: ignore[arg-type]


def _evaluate(evaluator, sandbox, container, mode: str, job_id: int) -> tuple[Evaluation, str]:
    job = Job(
        id=job_id,
        arm="a",
        agent="w",
        label="",
        repo="",
        commit="c",
        attempts=1,
        enqueued_at=0.0,
    )
    from judge.kinds.decode.evaluator import _Run

    run = _Run(evaluator, job)

    def pipeline() -> None:
        run.cand = container  # run.sandbox stays None: the module's container outlives this
        engine = container.engine([sandbox.python, "-I", "fake_engine.py", mode], mode)
        run.call(engine, {"op": "load"}, 30, "load")
        run.hidden_sent = True
        run.call(engine, {"op": "prefill", "prompts": PROMPTS}, 30, "prefill of case fake")
        if mode == "judge_exception":
            raise ValueError(f"a judge bug quoting the prompt: LEAK{MARKER} {PROMPTS}")
        timeout = 2.0 if mode == "silent" else 60.0
        reply, _ = run.call(
            engine, {"op": "decode", "steps": STEPS, "margins": False}, timeout, "decode of fake"
        )
        run.verify("case:fake", reply.get("tokens"), "mismatch", "case fake")

    run.pipeline = pipeline  # type: ignore[method-assign]
    evaluation = run.execute()
    return evaluation, (run.workdir / "log.json").read_text()


@pytest.mark.parametrize("mode", [*MODES, "judge_exception"])
def test_no_failure_path_carries_a_hidden_input_to_the_agent(box, evaluator, mode):
    sandbox, container = box
    job_id = 1 + sorted([*MODES, "judge_exception"]).index(mode)
    evaluation, private_log = _evaluate(evaluator, sandbox, container, mode, job_id)
    if mode == "judge_exception":
        assert evaluation.verdict == Verdict.ERROR
    else:
        assert evaluation.verdict == Verdict.WRONG, evaluation.detail
        assert evaluation.reason == MODES[mode], evaluation.detail
    seen = json.dumps(
        [
            evaluation.detail,
            evaluation.metrics,
            evaluation.flags,
            verdict_line(1, evaluation),
        ]
    )
    for secret in (str(MARKER), f"LEAK{MARKER}", str(SHAPE), f"({SHAPE},"):
        assert secret not in seen, (mode, evaluation.detail)
    if mode not in ("mismatch", "memory"):
        # The engine's own words did reach the judge: they are kept, privately.
        assert str(MARKER) in private_log, mode


def test_an_oom_kill_is_read_from_the_cgroup_not_dockers_flag(tmp_path, base_image):
    tree = tmp_path / "tree"
    tree.mkdir()
    tree.chmod(0o755)
    sandbox = Sandbox(SandboxConfig(memory=MEMORY), "cpu", owner="test", tag=f"oom-{SESSION}")
    try:
        fresh = sandbox.container("candidate", tree)
        assert fresh.oom_kills() == 0 and not fresh.oom_killed()
        hog = "b = []\nwhile True: b.append(bytearray(16 << 20))"
        code, _ = fresh.run([sandbox.python, "-I", "-c", hog], 120)
        assert code == 137  # SIGKILL from the kernel's OOM killer
        assert fresh.oom_kills() >= 1 and fresh.oom_killed()
        # The container's main process lives on, so Docker's own flag says nothing.
        state = sandbox.client.api.inspect_container(fresh.id)["State"]
        assert state["Running"] and not state.get("OOMKilled")
    finally:
        sandbox.close()
