"""A request timeout is charged only if it holds against the baseline of the moment, on the
real Docker engine: real containers, real engine processes, the real freezer and clock.

A fake engine (stdlib only) in a tmp tree: ``slow_once`` sleeps through its limit on the first
decode any process of its container serves (a marker in the container's /tmp), as an engine
on a machine that was briefly loaded does, then answers at once; ``hang`` never answers a
decode; ``honest`` is the baseline. The evaluation is scored by the real ``_Run.execute``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from judge import compose_judge_config
from judge.config import SandboxConfig
from judge.kinds.decode import DecodeKind
from judge.kinds.decode.evaluator import Evaluator, _Run
from judge.private import InputSet
from judge.queue import Job
from judge.sandbox import Sandbox
from judge.verdict import Verdict
from tests.support.sandbox import script_tree
from tests.support.unique import SESSION

pytestmark = pytest.mark.docker

PROMPTS = [[5, 6, 7], [1, 2, 3]]
STEPS = 3
FLOOR_S = 1.0
SLOW_S = 4.0  # the slow first decode: well over its limit (6 x 0.05 s + 1 s)

FAKE_ENGINE = r"""
import json, os, sys, time
mode, marker = sys.argv[1], sys.argv[2]
rows = 0
def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    if op == "prefill":
        rows = len(req["prompts"])
    elif op == "decode":
        if mode == "hang":
            time.sleep(3600)
        if mode == "slow_once" and not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(SLOW_S)
        say({"ok": True, "tokens": [[0] * req["steps"]] * rows})
        continue
    say({"ok": True})
""".replace("SLOW_S", repr(SLOW_S))


@pytest.fixture(scope="module")
def boxes(tmp_path_factory, base_image):
    tree = script_tree(tmp_path_factory.mktemp("fake-timeout"), {"fake_engine.py": FAKE_ENGINE})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"timeouts-{SESSION}")
    try:
        yield sandbox, sandbox.container("candidate", tree), sandbox.container("baseline", tree)
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    where = tmp_path_factory.mktemp("timeout-judge")
    cfg = compose_judge_config(
        ["task=decode_cpu", f"judge.private_dir={where}", f"judge.timeout_floor_s={FLOOR_S}"]
    )
    ref = SimpleNamespace(
        tokens=np.zeros((2, STEPS), dtype=np.int64),
        margins=np.ones((2, STEPS)),
        prefill_s=0.05,
        decode_s=0.05,
    )
    home = SimpleNamespace(
        evals=where / "evals",
        references={"case:fake": ref},
        inputs={"case:fake": InputSet("case:fake", PROMPTS, STEPS)},
    )
    return Evaluator(cfg, home, DecodeKind())  # type: ignore[arg-type]


def _evaluate(evaluator, boxes, mode: str, job_id: int):
    sandbox, cand, base = boxes
    job = Job(
        id=job_id, arm="a", agent="w", label="", repo="", commit="c", attempts=1, enqueued_at=0.0
    )
    run = _Run(evaluator, job)

    def argv(engine_mode: str) -> list[str]:
        return [sandbox.python, "-I", "fake_engine.py", engine_mode, f"/tmp/marker-{job_id}"]

    def pipeline() -> None:
        run.cand, run.base = cand, base  # run.sandbox stays None: the module's containers stay
        run.cand_serve, run.base_serve = argv(mode), argv("honest")
        with cand.frozen():
            run.base_engine = base.engine(run.base_serve, "baseline")
            run.base_call({"op": "load"}, 30)
        engine = cand.engine(run.cand_serve, "batched")
        run.call(engine, {"op": "load"}, 30, "load")
        timed = run.run_set(engine, "case:fake", "case fake")
        run.verify("case:fake", timed.tokens, "mismatch", "case fake")

    run.pipeline = pipeline  # type: ignore[method-assign]
    try:
        evaluation = run.execute()
    finally:
        for box in (cand, base):
            for process in box.processes:
                process.close(wait_s=0)
            box.processes.clear()
    return evaluation, json.loads((run.workdir / "log.json").read_text())["log"]


def test_an_engine_slow_only_on_its_first_decode_is_not_convicted_by_one_attempt(evaluator, boxes):
    # ERROR timeout_answered: re-queued; only the same in every attempt is charged
    # (judge.service.charge_repeated_timeouts, tests/judge/test_timeout_charge.py).
    evaluation, log = _evaluate(evaluator, boxes, "slow_once", 1)
    assert (evaluation.verdict, evaluation.reason) == (Verdict.ERROR, "timeout_answered")
    assert "slow only on its first try" in evaluation.detail
    # It did time out, and the baseline ran the same request before the retry.
    assert "no reply to decode within 1.3 s" in evaluation.detail
    [retry] = [e for e in log if "timeout_retry" in e]
    assert retry["op"] == "decode" and retry["baseline_now"]["decode"] < 1.0


def test_a_hanging_engine_is_still_wrong_timeout(evaluator, boxes):
    evaluation, _ = _evaluate(evaluator, boxes, "hang", 2)
    assert (evaluation.verdict, evaluation.reason) == (Verdict.WRONG, "timeout"), evaluation.detail
    assert "retried in a fresh process" in evaluation.detail
    assert "first try: no reply to decode within 1.3 s" in evaluation.detail
