"""The kernel kind's pieces without Docker: its node, the judge's harness run as a real
subprocess speaking the protocol, the host-side checks, and the generated mutants run through
the harness on the bundled task's function (each must trip the check it is made for).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

import judge.kinds.kernel  # noqa: F401  (registers the kind: nothing else names it yet)
from judge import compose_judge_config
from judge.checkout import BadInput
from judge.kinds import get_kind
from judge.kinds.kernel.config import KernelConfig, KernelTaskError, draw_inputs, kernel_config
from judge.kinds.kernel.evaluator import (
    BASELINE_CALL_S,
    HARNESS,
    REQUEST_S,
    KernelEvaluator,
    _Run,
    _Side,
    check_call,
    check_get,
    chunk_bytes,
    compare,
    digest,
    masked,
    result_layout,
    wall_bound_s,
)
from judge.kinds.kernel.harness import CHUNK, commit, keystream
from judge.kinds.kernel.mutants import CHECK_REASONS
from judge.preflight import catalogue, catalogue_problem
from judge.protocol import EngineFailure, check_reply, parse_line
from judge.sandbox import InfrastructureFault
from judge.verdict import Outcome, Verdict
from tasks.schema import PROJECT_ROOT

TASK = PROJECT_ROOT / "tasks" / "kernel_numpy"


@pytest.fixture
def cfg(tmp_path: Path):
    return compose_judge_config(["task=kernel_numpy", f"judge.private_dir={tmp_path / 'judge'}"])


class Harness:
    """The judge's harness over a tree, as a subprocess of this test (the sandbox runs the
    same text with the same argv)."""

    def __init__(self, tree: Path, function: str = "kernel.py:softmax") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", HARNESS.read_text(), function],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ask(self, payload: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def call(self, arrays: list[np.ndarray], key: int) -> tuple[dict, dict, np.ndarray | None]:
        """put, call, get and read: (call's reply, get's reply, the result read back)."""
        assert self.ask({"op": "put", "args": masked(arrays, key)})["ok"]
        called = self.ask({"op": "call", "key": key})
        got = self.ask({"op": "get"})
        if got.get("type") != "ndarray":
            return called, got, None
        try:
            dtype, shape, nbytes = result_layout(got)
        except EngineFailure:  # a layout the judge refuses: nothing to read
            return called, got, None
        parts = [
            chunk_bytes(self.ask({"op": "read", "at": at}), min(CHUNK, nbytes - at))
            for at in range(0, nbytes, CHUNK)
        ]
        return called, got, np.frombuffer(b"".join(parts), dtype=dtype).reshape(shape)

    def close(self) -> str:
        assert self.proc.stdin and self.proc.stderr
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        return self.proc.stderr.read()


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_the_node_is_read_from_the_task_and_bad_nodes_are_refused(cfg, tmp_path: Path) -> None:
    config = kernel_config(cfg.task)
    assert config.function == "kernel.py:softmax" and config.rtol > 0 and not config.exact
    assert isinstance(config, KernelConfig) and config.inputs == "inputs.py:make_inputs"
    # The task holds the kind's node and none of the prompt kinds' fields.
    assert "kernel" in cfg.task and not {"inputs", "serve", "vocab", "cases"} & set(cfg.task)
    arrays = draw_inputs(cfg.task, 7)
    assert [a.dtype for a in arrays] == [np.float32]
    # Another seed draws other inputs; the same seed the same ones.
    assert not np.array_equal(arrays[0], draw_inputs(cfg.task, 8)[0])
    assert np.array_equal(arrays[0], draw_inputs(cfg.task, 7)[0])
    # A plain mapping (a saved config) is typed the same way.
    plain = OmegaConf.create(OmegaConf.to_container(cfg.task))
    task = OmegaConf.merge(plain, {"kernel": {"function": "k.py:f", "rtol": 0.5}})
    assert kernel_config(task) == replace(config, function="k.py:f", rtol=0.5)
    plain.kernel = {"function": "k.py:f", "bogus": 1}
    with pytest.raises(KernelTaskError, match="bogus"):
        kernel_config(plain)
    plain.kernel = {"calls": 0, "function": "k.py:f"}
    with pytest.raises(KernelTaskError, match="calls >= 1"):
        kernel_config(plain)


BAD_NODES = [
    # A typo and a wrong type are Hydra's own errors, naming the node's class.
    ("rtol: 1.0e-5", "rtoll: 1.0e-5", "Key 'rtoll' not in 'KernelConfig'", "task.yaml"),
    ("calls: 5", "calls: many", "Value 'many' of type 'str' could not be converted", "task.yaml"),
    # A prompt kind's field is no kernel task's.
    ("frozen: []", "frozen: []\nvocab: 2", "Key 'vocab' not in 'KernelTaskConfig'", "task.yaml"),
    ('  function: "kernel.py:softmax"\n', "", "missing mandatory value: function", "task.yaml"),
    ("make_inputs", "make_input", "inputs.py has no function make_input", "task.yaml"),
]


@pytest.mark.parametrize(("old", "new", "words", "file"), BAD_NODES)
def test_a_bad_kernel_node_is_refused_at_composition(tmp_path, old, new, words, file) -> None:
    folder = tmp_path / "task"
    shutil.copytree(TASK, folder)
    yaml = folder / "task.yaml"
    assert old in yaml.read_text()
    yaml.write_text(yaml.read_text().replace(old, new, 1))
    with pytest.raises(BadInput) as info:
        compose_judge_config([f"task={folder}"])
    message = str(info.value)
    assert words in message and "\n" not in message, message
    assert str(folder / file) in message, message


def test_a_task_without_a_kernel_node_is_refused(tmp_path) -> None:
    folder = tmp_path / "task"
    shutil.copytree(TASK, folder)
    yaml = folder / "task.yaml"
    text = yaml.read_text()
    yaml.write_text(text[: text.index("kernel:")] + text[text.index("spec:") :])
    with pytest.raises(BadInput, match=r"required field\(s\) missing: kernel"):
        compose_judge_config([f"task={folder}"])


def test_the_kind_scores_a_lower_is_better_call_time(cfg) -> None:
    metric = get_kind("kernel").metric(cfg.task)
    assert (metric.name, metric.unit, metric.higher_is_better) == ("call_ms", "ms", False)
    assert metric.ratio(2.0, 10.0) == 5.0 and "softmax" in metric.label


def test_the_catalogue_holds_every_check_and_refuses_one_without(cfg) -> None:
    mutants = catalogue(cfg)
    assert catalogue_problem(cfg, mutants) is None
    held = {m.reason for m in mutants if m.expect == "WRONG"}
    assert set(CHECK_REASONS) <= held
    assert "WRONG (late)" in (catalogue_problem(cfg, [m for m in mutants if m.reason != "late"]))
    assert {m.name for m in mutants} >= {"baseline", "gen_cache_content", "reference"}
    # An exact task (no tolerance) has no within-tolerance mutant: nothing is within it.
    exact = OmegaConf.create(OmegaConf.to_container(cfg))
    exact.task.kernel = {"function": "kernel.py:softmax"}
    names = {m.name for m in catalogue(exact)}
    assert "gen_within_tolerance" not in names and "gen_late_thread" in names
    assert "gen_within_tolerance" in {m.name for m in mutants}


def test_the_mask_hides_the_inputs_until_the_key_comes() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.arange(5, dtype=np.int64)
    payload = masked([a, b], key=123)
    raw = np.frombuffer(a.tobytes() + b.tobytes(), dtype=np.uint8)
    import base64

    sent = b"".join(base64.b64decode(p["data"]) for p in payload)
    assert sent != raw.tobytes()
    unmasked = np.bitwise_xor(np.frombuffer(sent, np.uint8), keystream(123, raw.size))
    assert unmasked.tobytes() == raw.tobytes()
    assert keystream(123, 10).tobytes() != keystream(124, 10).tobytes()


def test_the_commitment_reads_every_byte_and_the_layout() -> None:
    a = np.zeros(13, dtype=np.uint8)  # not a multiple of 8: the tail counts too
    before = commit(a)
    a[12] = 1
    assert commit(a) != before
    # The same bytes as another dtype or shape are another commitment.
    b = np.zeros(16, dtype=np.uint8)
    assert len({commit(b), commit(b.view(np.float32)), commit(b.reshape(4, 4))}) == 3
    # A strided view commits to its C-order bytes, as the judge reads them back.
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert commit(m.T) == commit(np.ascontiguousarray(m.T)) and len(commit(m)) == 64


def test_compare_exact_and_within_tolerance() -> None:
    ref = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    exact, loose = KernelConfig("k.py:f"), KernelConfig("k.py:f", rtol=1e-5, atol=1e-6)
    assert compare(ref.copy(), ref, exact) is None
    near = ref * np.float32(1 + 1e-6)
    assert "differ (exact)" in (compare(near, ref, exact) or "")
    assert compare(near, ref, loose) is None
    assert "beyond rtol" in (compare(ref * 1.01, ref, loose) or "")
    assert "the baseline's float32[3]" in (compare(ref[:2], ref, loose) or "")
    assert "float64" in (compare(ref.astype(np.float64), ref, loose) or "")


def test_result_layout_and_chunks_refuse_what_does_not_add_up() -> None:
    assert result_layout({"dtype": "<f4", "shape": [2, 3], "nbytes": 24})[2] == 24
    for bad in (
        {"dtype": "<f4", "shape": [2, 3], "nbytes": 25},
        {"dtype": "|O", "shape": [1], "nbytes": 8},
        {"dtype": "<f4", "shape": [-1], "nbytes": -4},
        {"dtype": "<f8", "shape": [1 << 30], "nbytes": 8 << 30},
        {"shape": [1]},
        # Python ints: a product that wraps an int64 to 0 is no size of 0.
        {"dtype": "<f4", "shape": [2**32, 2**32], "nbytes": 0},
        {"dtype": "<f4", "shape": [2**64], "nbytes": 0},
        {"dtype": "<f4", "shape": [True, 4], "nbytes": 16},
        {"dtype": "<f4", "shape": [2.0], "nbytes": 8},
        {"dtype": "<f4", "shape": "[2]", "nbytes": 8},
        {"dtype": "<f4", "shape": [1] * 33, "nbytes": 4},
        {"dtype": "<f4", "shape": [2], "nbytes": "8"},
        {"dtype": ["<f4"], "shape": [2], "nbytes": 8},
        {"dtype": "float32", "shape": [2], "nbytes": 8},  # a name, not numpy's dtype.str
        {"dtype": "<g", "shape": [1], "nbytes": 16},  # platform-sized: not on the list
        {"dtype": "<M8[s]", "shape": [1], "nbytes": 8},
    ):
        with pytest.raises(EngineFailure) as raised:
            result_layout(bad)
        assert raised.value.kind == "protocol"
    with pytest.raises(EngineFailure, match="3 bytes, not 4"):
        chunk_bytes({"data": "AAAA"}, 4)
    with pytest.raises(EngineFailure, match="base64"):
        chunk_bytes({"data": "not base64!"}, 4)
    for data in (7, None, ["AAAA"], "A" * 100):
        with pytest.raises(EngineFailure, match="base64"):
            chunk_bytes({"data": data}, 4)
    assert result_layout({"dtype": ">c16", "shape": [0, 3], "nbytes": 0})[1] == [0, 3]


def test_every_field_of_a_call_and_get_reply_is_checked() -> None:
    sha = "ab" * 32
    check_call({"ok": True, "type": "ndarray", "sha256": sha})
    check_call({"ok": True, "type": "_Lazy"})  # no ndarray: no commitment asked
    for bad in (
        {"type": "ndarray"},
        {"type": "ndarray", "sha256": "0"},
        {"type": "ndarray", "sha256": sha.upper()},
        {"type": "ndarray", "sha256": 7},
        {"type": 7, "sha256": sha},
        {"type": "x" * 101},
        {},
    ):
        with pytest.raises(EngineFailure) as raised:
            check_call(bad)
        assert raised.value.kind == "protocol"
    good = {
        "inputs": [sha],
        "type": "ndarray",
        "aliased": False,
        "reused": False,
        "dtype": "<f4",
        "shape": [2],
        "nbytes": 8,
    }
    check_get(good, 1)
    check_get({"inputs": [sha], "type": "generator"}, 1)
    for change in (
        {"inputs": 7},
        {"inputs": [sha, sha]},
        {"inputs": []},
        {"inputs": [7]},
        {"inputs": ["zz" * 32]},
        {"type": None},
        {"aliased": 0},
        {"reused": "false"},
        {"shape": [2**32, 2**32], "nbytes": 0},
        {"dtype": "|O"},
    ):
        with pytest.raises(EngineFailure) as raised:
            check_get({**good, **change}, 1)
        assert raised.value.kind == "protocol", change


def test_the_harness_calls_the_function_and_reports_what_the_judge_checks(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(TASK / "template", tree)
    harness = Harness(tree)
    try:
        assert harness.ask({"op": "load"}) == {"ok": True}
        rng = np.random.default_rng(0)
        x = rng.standard_normal((300, 700)).astype(np.float32)  # > 1 chunk of result
        called, got, out = harness.call([x], key=5)
        assert out is not None and out.nbytes > CHUNK
        assert called["type"] == "ndarray" and called["sha256"] == commit(out)
        check_call(called)
        check_get(got, 1)
        assert np.allclose(out, _softmax(x), rtol=1e-5, atol=1e-6)
        assert got["inputs"] == [digest(x)] and not got["aliased"] and not got["reused"]
        # The next call's inputs land in the same buffers (a cache keyed on identity is stale).
        y = rng.standard_normal((300, 700)).astype(np.float32)
        _, _, out2 = harness.call([y], key=6)
        assert out2 is not None and np.allclose(out2, _softmax(y), rtol=1e-5, atol=1e-6)
        assert harness.ask({"op": "nope"})["ok"] is False
    finally:
        harness.close()


def test_prints_of_the_candidate_never_reach_the_protocol_stream(tmp_path: Path) -> None:
    (tmp_path / "k.py").write_text(
        "import os, numpy as np\n"
        "def f(x):\n"
        "    print('hello from python')\n"
        "    os.write(1, b'hello from fd 1\\n')\n"
        "    return x + 1\n"
    )
    harness = Harness(tmp_path, "k.py:f")
    try:
        assert harness.ask({"op": "load"}) == {"ok": True}
        _, _, out = harness.call([np.arange(4, dtype=np.int64)], key=1)
        assert out is not None and out.tolist() == [1, 2, 3, 4]
    finally:
        said = harness.close()
    assert "hello from python" in said and "hello from fd 1" in said


def _mutant_tree(cfg, name: str, tmp_path: Path) -> Path:
    mutant = next(m for m in catalogue(cfg) if m.name == name)
    tree = tmp_path / name
    shutil.copytree(TASK / "template", tree)
    assert mutant.tree is not None
    mutant.tree(tree)
    return tree


def _run_mutant(cfg, name: str, tmp_path: Path, calls: int = 3) -> list[tuple[dict, dict, Any]]:
    harness = Harness(_mutant_tree(cfg, name, tmp_path))
    try:
        assert harness.ask({"op": "load"}) == {"ok": True}
        return [harness.call(draw_inputs(cfg.task, seed), key=seed) for seed in range(calls)]
    finally:
        harness.close()


def test_generated_cheats_trip_the_checks_they_are_made_for(cfg, tmp_path: Path) -> None:
    inputs = [draw_inputs(cfg.task, seed)[0] for seed in range(3)]
    # A cache keyed on identity: the second call answers the first call's values.
    results = _run_mutant(cfg, "gen_cache_identity", tmp_path)
    assert np.allclose(results[0][2], _softmax(inputs[0]), rtol=1e-5, atol=1e-6)
    assert np.allclose(results[1][2], _softmax(inputs[0]), rtol=1e-5, atol=1e-6)
    # A cache keyed on content never answers: every result is right.
    content = _run_mutant(cfg, "gen_cache_content", tmp_path)
    for (_, _, out), x in zip(content, inputs, strict=True):
        assert np.allclose(out, _softmax(x), rtol=1e-5, atol=1e-6)
    # In place: the argument's digest changes.
    _, got, _ = _run_mutant(cfg, "gen_inplace", tmp_path, calls=1)[0]
    assert got["inputs"] != [digest(inputs[0])]
    # Aliased: the result is the argument's memory.
    _, got, _ = _run_mutant(cfg, "gen_alias", tmp_path, calls=1)[0]
    assert got["aliased"] is True
    # Lazy: no ndarray, no commitment.
    called, got, out = _run_mutant(cfg, "gen_lazy", tmp_path, calls=1)[0]
    assert (called["type"], "sha256" in called, out) == ("_Lazy", False, None)
    # Late: the hash taken in the call is not the bytes' read back later (or they are zeros).
    (_, _, first), (called, _, late) = _run_mutant(cfg, "gen_late_thread", tmp_path, calls=2)
    assert np.allclose(first, _softmax(inputs[0]), rtol=1e-5, atol=1e-6)
    assert called["sha256"] != commit(late) or not late.any()
    # Within tolerance: not equal, yet close enough.
    _, _, out = _run_mutant(cfg, "gen_within_tolerance", tmp_path, calls=1)[0]
    assert not np.array_equal(out, _softmax(inputs[0]))
    assert compare(out, _softmax(inputs[0]).astype(np.float32), kernel_config(cfg.task)) is None


def test_a_crashing_call_is_an_error_reply_and_the_process_lives_on(cfg, tmp_path: Path) -> None:
    harness = Harness(_mutant_tree(cfg, "gen_crash", tmp_path))
    try:
        assert harness.ask({"op": "load"}) == {"ok": True}
        harness.ask({"op": "put", "args": masked(draw_inputs(cfg.task, 0), 1)})
        reply = harness.ask({"op": "call", "key": 1})
        assert reply["ok"] is False and "generated mutant: crash" in reply["error"]
        assert harness.ask({"op": "get"})["ok"] is True
    finally:
        harness.close()


def test_the_red_teams_cheats_cannot_match_the_commitment_or_make_a_judge_fault(
    cfg, tmp_path: Path
) -> None:
    inputs = [draw_inputs(cfg.task, seed)[0] for seed in range(3)]
    # The tolerance the red team's fit was made for (the task's atol was 1e-6 then; at 1e-9
    # the fitted values are a mismatch too).
    config = replace(kernel_config(cfg.task), atol=1e-6)
    # The harness's call rewritten to commit to zeros at once, the work done in get: the
    # result read back is right (and fitted so a linear fold would match), yet its hash is not
    # the one committed to.
    (_, _, first), *deferred = _run_mutant(cfg, "gen_defer_to_get_fold_fit", tmp_path)
    assert compare(first, _softmax(inputs[0]).astype(np.float32), config) is None
    for (called, got, out), x in zip(deferred, inputs[1:], strict=True):
        check_call(called)
        check_get(got, 1)
        assert compare(out, _softmax(x).astype(np.float32), config) is None
        assert called["sha256"] == commit(np.zeros_like(out)) != commit(out)
        words = np.ascontiguousarray(out).reshape(-1).view(np.uint64)
        assert int(np.bitwise_xor.reduce(words)) == 0  # what fooled the XOR fold
    # Zeros returned, a thread writing the fitted result later: never the committed bytes.
    _, (called, _, late) = _run_mutant(cfg, "gen_late_thread_fold_fit", tmp_path, calls=2)
    assert called["sha256"] != commit(late) or not late.any()
    # Malformed replies of get: refused by the judge's checks as protocol errors.
    _, got, _ = _run_mutant(cfg, "gen_reply_field_types", tmp_path, calls=1)[0]
    with pytest.raises(EngineFailure, match="inputs must be 1 sha256"):
        check_get(got, 1)
    _, got, _ = _run_mutant(cfg, "gen_shape_overflow", tmp_path, calls=1)[0]
    assert got["shape"] == [2**32, 2**32] and got["nbytes"] == 0
    with pytest.raises(EngineFailure, match="do not make nbytes"):
        check_get(got, 1)
    # A chunk of the wrong length: refused by chunk_bytes (the evaluator charges it).
    harness = Harness(_mutant_tree(cfg, "gen_short_read", tmp_path))
    try:
        assert harness.ask({"op": "load"}) == {"ok": True}
        assert harness.ask({"op": "put", "args": masked([inputs[0]], 1)})["ok"]
        check_call(harness.ask({"op": "call", "key": 1}))
        check_get(harness.ask({"op": "get"}), 1)
        with pytest.raises(EngineFailure, match="3 bytes, not"):
            chunk_bytes(harness.ask({"op": "read", "at": 0}), CHUNK)
    finally:
        harness.close()


class _Replies:
    """A side's engine for :class:`_Run`: the real harness in a subprocess, one of its replies
    (the ``at``-th of ``op``) then rewritten by ``mutate``, and sent through the judge's own
    line parsing and reply checks, as the sandbox's engine does."""

    def __init__(self, tree: Path, op: str = "", at: int = 0, mutate: Any = None) -> None:
        self.harness = Harness(tree)
        self.op, self.at, self.mutate = op, at, mutate
        self.seen = 0

    def request(self, payload: dict[str, Any], timeout: float) -> tuple[Any, float]:
        fields = self.harness.ask(payload)
        if payload["op"] == self.op:
            if self.seen == self.at:
                fields = self.mutate(fields)
            self.seen += 1
        line = json.dumps(fields).encode()
        return check_reply(parse_line(line, payload["op"]), payload, 0, None), 0.001


class _Box:
    @contextmanager
    def frozen(self) -> Iterator[None]:
        yield


# JSON values a side may put in any field of a reply.
_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**62, 2**64, 2**200, -(2**63), 1.5, -0.0, 1e308,
    "", "ndarray", "list", "x" * 200, "ab" * 32, "<f4", "|O", [], [0], [-1], [0, 2**62],
    [2**62, 0], [1024, 512], [0] * 32 + [2**62], [1] * 40, ["ab" * 32], [None], [[1]], {},
    {"a": 1}, [2**32, 2**32], [True, 512],
]  # fmt: skip


def _flip(fields: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One random rewrite of a reply: fields changed, removed or added."""
    out = dict(fields)
    for _ in range(rng.randint(1, 3)):
        key = rng.choice([*out, "type", "shape", "nbytes", "dtype", "sha256", "data", "inputs"])
        if key == "ok":
            continue  # ok: false is a crash reply, checked elsewhere
        if rng.random() < 0.15:
            out.pop(key, None)
        else:
            out[key] = rng.choice(_VALUES)
    return out


def _random_flip(seed: float) -> Any:
    """A rewrite of :func:`_flip`'s, its own random stream from ``seed``."""
    rng = random.Random(seed)
    return lambda fields: _flip(fields, rng)


def _targeted() -> list[tuple[str, int, Any]]:
    """The red team's cases: a huge axis of an empty result, type flips between replies."""
    sha = "ab" * 32
    return [
        ("get", 0, lambda f: {**f, "shape": [0, 2**62], "nbytes": 0}),
        ("get", 0, lambda f: {**f, "shape": [0, 2**28, 2**28], "nbytes": 0}),
        ("get", 0, lambda f: {"ok": True, "inputs": f["inputs"], "type": "list"}),
        ("call", 0, lambda f: {"ok": True, "type": "list"}),
        ("call", 0, lambda f: {"ok": True, "type": "ndarray", "sha256": sha}),
        ("get", 0, lambda f: {**f, "type": "ndarray", "dtype": "<f8", "nbytes": 2 * f["nbytes"]}),
        ("read", 0, lambda f: {**f, "data": None}),
        ("read", 3, lambda f: {"ok": True}),
    ]


@pytest.mark.parametrize("side", ["candidate", "baseline"])
def test_no_reply_of_a_side_ever_makes_a_judge_fault(cfg, tmp_path: Path, side: str) -> None:
    """Malformed replies (random JSON in every field, huge, negative and zero axes, type flips
    between call, get and read) are always that side's: WRONG for the candidate, ERROR for the
    baseline, never an exception ``execute()`` would take for the judge's own (a judge fault
    is not charged and is run again: an error on demand would re-roll unlucky evaluations)."""
    config = replace(kernel_config(cfg.task), warmup=0, calls=1)
    tree = TASK / "template"
    home = SimpleNamespace(evals=tmp_path)
    evaluator = KernelEvaluator(cfg, home, get_kind("kernel"))  # type: ignore[arg-type]
    rng = random.Random(f"fuzz-{side}")
    cases = _targeted()
    for _ in range(16):
        op = rng.choice(["call", "get", "read", "read"])
        cases.append((op, rng.randint(0, 3) if op == "read" else 0, _random_flip(rng.random())))
    refused = 0
    for op, at, mutate in cases:
        run = _Run(evaluator, SimpleNamespace(id=1, attempts=1))  # type: ignore[arg-type]
        sides = {
            name: _Side(name, _Box(), _Replies(tree, *((op, at, mutate) if name == side else ())))  # type: ignore[arg-type]
            for name in ("baseline", "candidate")
        }
        for s in sides.values():
            assert s.proc.harness.ask({"op": "load"}) == {"ok": True}
        try:
            run.calls(config, sides["baseline"], sides["candidate"])
        except Outcome as outcome:
            assert side == "candidate" and outcome.verdict is Verdict.WRONG, outcome
            refused += 1
        except InfrastructureFault as fault:
            assert side == "baseline" and "baseline" in str(fault), fault
            refused += 1
        finally:
            for s in sides.values():
                s.proc.harness.proc.kill()
                s.proc.harness.proc.wait()
    assert refused >= len(_targeted())  # most rewrites are refused (an extra field is not)


def test_the_watchdog_bound_covers_the_plan_and_hangs_up_every_engine(cfg, tmp_path) -> None:
    """The backstop: past the sum of the plan's limits (never reached while every wait has a
    deadline) every engine is hung up, which fails a blocked send or read at once."""
    config = kernel_config(cfg.task)
    bound = wall_bound_s(config)
    calls = config.warmup + config.calls
    assert bound >= 2 * config.load_timeout_s + calls * (BASELINE_CALL_S + 4 * REQUEST_S)
    hung: list[str] = []
    engine = SimpleNamespace(hang_up=lambda: hung.append("engine"))
    evaluator = KernelEvaluator(cfg, SimpleNamespace(evals=tmp_path), get_kind("kernel"))  # type: ignore[arg-type]
    run = _Run(evaluator, SimpleNamespace(id=1, attempts=1))  # type: ignore[arg-type]
    assert run.wall_bound_s() >= bound  # the skeleton's watchdog: the plan, set-up and builds
    run.sandbox = SimpleNamespace(containers=[SimpleNamespace(processes=[engine, engine])])  # type: ignore[assignment]
    run.overrun()
    assert run.overdue and hung == ["engine", "engine"]


def test_new_task_writes_a_kernel_task_whose_catalogue_is_complete(tmp_path: Path) -> None:
    """``python -m judge new-task DIR --kind kernel`` (a real subprocess): a folder that
    composes as a kernel task, none of the prompt fields, its generated catalogue complete
    (its preflight in Docker: docs/kinds-kernel.md); a folder that holds something is refused."""
    target = tmp_path / "my kern"
    done = subprocess.run(
        [sys.executable, "-m", "judge", "new-task", str(target), "--kind", "kernel"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == target.resolve()
    cfg = compose_judge_config([f"task={target}", f"judge.private_dir={tmp_path / 'judge'}"])
    assert cfg.task.name == "my_kern" and cfg.task.kind == "kernel"
    assert not {"inputs", "serve", "vocab", "cases"} & set(cfg.task)
    assert kernel_config(cfg.task).function == "kernel.py:softmax"
    mutants = catalogue(cfg)
    assert {m.source for m in mutants} == {"generated"}
    assert catalogue_problem(cfg, mutants) is None
    again = subprocess.run(
        [sys.executable, "-m", "judge", "new-task", str(target), "--kind", "kernel"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 2 and "is not empty" in again.stderr
