"""The bundled ``decode_cpu`` task: template engine, reference patch, mutants, prompt generator.

Engines run as real subprocesses speaking the JSON-lines protocol through the frozen
``harness/serve.py``, as the judge runs them (no Docker needed). Decodes are kept short.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from judge.mutant import Mutant
from tasks.decode_cpu import make_prompts

TASK = Path(__file__).resolve().parents[2] / "tasks" / "decode_cpu"
TEMPLATE = TASK / "template"
VOCAB = 4096


class Serve:
    """One engine process (``python -I -B harness/serve.py``) in a repository copy."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "harness/serve.py"],
            cwd=repo,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.ask({"op": "load"})

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its response (the process must answer)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"engine exited: {self.proc.stderr.read() if self.proc.stderr else ''}"
        response = json.loads(line)
        assert response["ok"], response
        return response

    def run(self, prompts: list[list[int]], steps: int) -> list[list[int]]:
        """reset, prefill, decode; return the tokens."""
        self.ask({"op": "reset"})
        self.ask({"op": "prefill", "prompts": prompts})
        return self.ask({"op": "decode", "steps": steps})["tokens"]

    def close(self) -> None:
        """End the process."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _copy(dest: Path, patch: str | None = None) -> Path:
    repo = dest / "repo"
    shutil.copytree(TEMPLATE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    if patch:
        subprocess.run(["git", "apply", str(TASK / patch)], cwd=repo, check=True)
    return repo


def _singles(repo: Path, prompts: list[list[int]], steps: int) -> list[list[int]]:
    """Each prompt alone, each in a fresh process (no state carried between them)."""
    rows = []
    for prompt in prompts:
        server = Serve(repo)
        rows.append(server.run([prompt], steps)[0])
        server.close()
    return rows


@pytest.fixture(scope="module")
def ragged() -> list[list[int]]:
    """Four prompts of very different lengths, 1 token included."""
    return [p[:n] for p, n in zip(make_prompts(7, 4, (30, 30), VOCAB), (1, 30, 9, 17), strict=True)]


@pytest.fixture(scope="module")
def baseline_rows(tmp_path_factory, ragged) -> list[list[int]]:
    """The template's tokens for `ragged`, each row decoded alone in a fresh process."""
    return _singles(_copy(tmp_path_factory.mktemp("base")), ragged, 8)


def test_make_prompts_is_deterministic() -> None:
    a = make_prompts(123, 16, (8, 24), VOCAB)
    assert a == make_prompts(123, 16, (8, 24), VOCAB)
    assert a != make_prompts(124, 16, (8, 24), VOCAB)
    assert len(a) == 16 and all(8 <= len(p) <= 24 for p in a)
    assert all(isinstance(t, int) and 0 <= t < VOCAB for p in a for t in p)
    assert {len(p) for p in make_prompts(0, 200, (3, 5), VOCAB)} == {3, 4, 5}


def test_check_script_uses_the_same_generator() -> None:
    check = runpy.run_path(str(TEMPLATE / "harness" / "check.py"))
    seed, batch, span = check["PUBLIC_SEED"], check["BATCH"], check["PROMPT_LEN"]
    assert check["public_prompts"](seed, batch, span, VOCAB) == make_prompts(
        seed, batch, span, VOCAB
    )


def test_weights_are_deterministic_and_quick() -> None:
    script = (
        "import time, hashlib, sys; sys.path.insert(0, '.');"
        "from engine.weights import load_weights; t = time.perf_counter(); w = load_weights();"
        "t = time.perf_counter() - t; h = hashlib.sha256(w.head.packed.tobytes());"
        "[h.update(l.w_down.packed.tobytes() + l.w_down.scales.tobytes()) for l in w.layers];"
        "print(h.hexdigest(), t)"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-I", "-B", "-c", script], cwd=TEMPLATE, capture_output=True, text=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert runs[0][0] == runs[1][0]
    assert min(float(r[1]) for r in runs) < 0.3


def test_baseline_batched_equals_single_and_alternates(tmp_path, ragged, baseline_rows) -> None:
    server = Serve(_copy(tmp_path))
    try:
        assert server.run(ragged, 8) == baseline_rows
        # Single after batched, then batched again, in the same process.
        assert server.run([ragged[2]], 8) == [baseline_rows[2]]
        assert server.run(ragged[1:3], 8) == baseline_rows[1:3]
        # Two decode calls continue where the first stopped.
        server.ask({"op": "reset"})
        server.ask({"op": "prefill", "prompts": ragged})
        first = server.ask({"op": "decode", "steps": 3})["tokens"]
        second = server.ask({"op": "decode", "steps": 5, "margins": True})
        assert [a + b for a, b in zip(first, second["tokens"], strict=True)] == baseline_rows
        margins = np.array(second["margins"])
        assert margins.shape == (4, 5) and (margins > 0).all()
    finally:
        server.close()


def test_rows_differ(baseline_rows) -> None:
    """Outputs depend on the prompt (else a row mix-up would go unseen)."""
    assert len({tuple(r) for r in baseline_rows}) == len(baseline_rows)
    assert all(len(set(r)) > 3 for r in baseline_rows)


def test_reference_matches_baseline_batched_and_alone(tmp_path, ragged, baseline_rows) -> None:
    server = Serve(_copy(tmp_path, "reference/solution.patch"))
    try:
        assert server.run(ragged, 8) == baseline_rows
        for i in (2, 0, 3):
            assert server.run([ragged[i]], 8) == [baseline_rows[i]]
        assert server.run(ragged[::-1], 8) == baseline_rows[::-1]
        # A long decode grows the KV cache past its first size.
        long = server.run(ragged[:2], 100)
        assert [r[:8] for r in long] == baseline_rows[:2]
    finally:
        server.close()


def test_reference_is_much_faster(tmp_path) -> None:
    prompts = make_prompts(11, 16, (8, 24), VOCAB)
    seconds = {}
    for name, patch in (("base", None), ("ref", "reference/solution.patch")):
        server = Serve(_copy(tmp_path / name, patch))
        server.run(prompts, 2)
        start = time.perf_counter()
        server.run(prompts, 8)
        seconds[name] = time.perf_counter() - start
        server.close()
    assert seconds["base"] > 2.0 * seconds["ref"]


def test_check_script_passes_on_reference(tmp_path) -> None:
    repo = _copy(tmp_path, "reference/solution.patch")
    out = subprocess.run(
        [sys.executable, "-I", "-B", "harness/check.py", "--repeat", "1"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "untrusted" in out.stdout


def test_public_expected_is_the_baseline() -> None:
    """The file check.py compares against is the template's own output."""
    from tasks.decode_cpu.make_public_expected import TARGET, generate

    saved = json.loads(TARGET.read_text())
    fresh = generate()
    assert fresh == saved


def _mutants() -> list[dict[str, Any]]:
    return yaml.safe_load((TASK / "mutants.yaml").read_text())


def test_mutants_file_is_well_formed() -> None:
    mutants = _mutants()
    names = [m["name"] for m in mutants]
    assert len(names) == len(set(names))
    allowed = {"PASS": {None}, "WRONG": {"mismatch", "alternating", "prefill_cap",
                                          "b1_regression", "timeout", "crash", "protocol",
                                          "memory"},
               "REJECT": {"frozen_zone", "forbidden_file", "shadowing", "bad_tree"}}  # fmt: skip
    for m in mutants:
        assert set(m) <= {f.name for f in dataclasses.fields(Mutant)}, m
        assert m.get("reason") in allowed[m["expect"]], m
    assert {m["name"]: m["patch"] for m in mutants}["baseline"] is None


@pytest.mark.parametrize("mutant", [m for m in _mutants() if m["patch"]], ids=lambda m: m["name"])
def test_mutant_patch_applies(tmp_path, mutant) -> None:
    repo = _copy(tmp_path)
    subprocess.run(["git", "apply", "--check", str(TASK / mutant["patch"])], cwd=repo, check=True)


def test_stale_state_fails_only_when_alternating(tmp_path, ragged, baseline_rows) -> None:
    repo = _copy(tmp_path, "mutants/stale_state.patch")
    batched = Serve(repo)
    try:
        assert batched.run(ragged[:2], 8) == baseline_rows[:2]
        assert batched.run(ragged, 8) == baseline_rows
        # The same process, now single: the stale flag bites.
        assert batched.run([ragged[1]], 8) != [baseline_rows[1]]
    finally:
        batched.close()
    assert _singles(repo, ragged[1:2], 8) == baseline_rows[1:2]


def test_row_shift_and_early_stop_are_wrong(tmp_path, ragged, baseline_rows) -> None:
    shifted = Serve(_copy(tmp_path / "shift", "mutants/row_shift.patch"))
    assert shifted.run(ragged, 8) == baseline_rows[1:] + baseline_rows[:1]
    assert shifted.run([ragged[0]], 8) == [baseline_rows[0]]
    shifted.close()
    early = Serve(_copy(tmp_path / "early", "mutants/early_stop.patch"))
    long = early.run(ragged[:2], 10)
    assert [r[:2] for r in long] == [r[:2] for r in baseline_rows[:2]]
    assert all(r[2:] == [0] * 8 for r in long)
    early.close()


def test_prefill_shift_is_right_but_decodes_in_prefill(tmp_path, ragged, baseline_rows) -> None:
    """Its outputs are correct; only the prefill cap can catch it."""
    server = Serve(_copy(tmp_path, "mutants/prefill_shift.patch"))
    try:
        server.ask({"op": "reset"})
        server.ask({"op": "prefill", "prompts": ragged[:2]})
        a = server.ask({"op": "decode", "steps": 5})["tokens"]
        b = server.ask({"op": "decode", "steps": 3})["tokens"]
        assert [x + y for x, y in zip(a, b, strict=True)] == baseline_rows[:2]
        assert len(server.run(ragged[:1], 70)[0]) == 70
    finally:
        server.close()
