"""The bundled ``serve_cpu`` task on the host (no judge, no Docker): its HTTP servers run as
real subprocesses and are spoken to over real sockets with the frozen harness's own client.

Covers the wire contract the server kind relies on (models, streaming chunks with
``token_ids``, ``[DONE]``, logprobs keyed ``token_id:N``), the baseline's and the reference's
tokens for the same prompts at concurrency 1 and 16, that the reference really batches
concurrent requests, that the task's mutants break what they claim to, and that every patch
of the move library and the mutants applies where it says. Nothing here is timed.
"""

from __future__ import annotations

import dataclasses
import http.client
import importlib.util
import json
import os
import runpy
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agents.scripted.library import Library
from judge.mutant import Mutant

TASK = Path(__file__).resolve().parents[2] / "tasks" / "serve_cpu"
TEMPLATE = TASK / "template"
TASK_YAML = yaml.safe_load((TASK / "task.yaml").read_text())
MAKE_PROMPTS = runpy.run_path(str(TASK / "inputs.py"))["make_prompts"]
LIBRARY = yaml.safe_load((TASK / "moves" / "moves.yaml").read_text())
MOVES = {m["name"]: m for m in LIBRARY["moves"]}
MUTANTS = yaml.safe_load((TASK / "mutants.yaml").read_text())
HOST = "127.0.0.1"
TOKENS = 24


def _load_check():
    """The frozen ``harness/check.py`` (the client), loaded by path: the task imports nothing."""
    spec = importlib.util.spec_from_file_location(
        "serve_cpu_check", TEMPLATE / "harness" / "check.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check = _load_check()


def _tree(dest: Path, patches: list[Path]) -> Path:
    """The template at `dest` with `patches` applied in order (git apply, as agents do)."""
    shutil.copytree(TEMPLATE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for patch in patches:
        subprocess.run(["git", "apply", str(patch)], cwd=dest, check=True, capture_output=True)
    return dest


class Served:
    """A server process from a tree, on a free port."""

    def __init__(self, tree: Path) -> None:
        self.proc, self.port = check.start_server(tree)

    def run(self, prompts: list[list[int]], concurrency: int, tokens: int = TOKENS) -> list:
        results, _ = check.run_concurrent(HOST, self.port, prompts, tokens, concurrency)
        return results

    def stats(self) -> dict:
        status, body = check.get_json(HOST, self.port, "/debug/stats")
        assert status == 200
        return body

    def post(self, body: object) -> tuple[int, bytes, str]:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=120)
        try:
            conn.request("POST", "/v1/completions", json.dumps(body))
            response = conn.getresponse()
            return response.status, response.read(), response.getheader("Content-Type") or ""
        finally:
            conn.close()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = Served(_tree(tmp_path_factory.mktemp("base") / "t", []))
    yield served
    served.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = Served(
        _tree(tmp_path_factory.mktemp("ref") / "t", [TASK / "reference" / "solution.patch"])
    )
    yield served
    served.close()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return MAKE_PROMPTS(11, 16, (8, 40), TASK_YAML["vocab"])


@pytest.fixture(scope="module")
def expected(baseline: Served, prompts: list[list[int]]) -> list[list[int]]:
    """The baseline's tokens, one request at a time."""
    results = baseline.run(prompts, 1)
    assert all(r.done and not r.error for r in results)
    return [r.tokens for r in results]


# -- the task folder ----------------------------------------------------------------------------


def test_task_yaml_names_the_server_contract() -> None:
    assert TASK_YAML["kind"] == "server"
    assert TASK_YAML["frozen"] == ["harness/**"]
    serve = TASK_YAML["serve"]
    assert "{host}" in serve and "{port}" in serve and "harness/server.py" in serve
    server = TASK_YAML["server"]
    assert server["model"] == "serve-cpu-int"
    assert server["concurrency"] == [1, TASK_YAML["timing"]["batch"]] == [1, 16]
    assert server["token_ids"] == "token_ids" and server["endpoint"] == "completions"
    assert TASK_YAML["spec"]["target_x_baseline"] == 2.0
    weights = (TEMPLATE / "harness" / "weights.py").read_text()
    assert f'MODEL_NAME = "{server["model"]}"' in weights
    assert f"VOCAB = {TASK_YAML['vocab']}" in weights


def test_prompts_are_deterministic_and_in_range() -> None:
    a = MAKE_PROMPTS(5, 16, (8, 24), 4096)
    assert a == MAKE_PROMPTS(5, 16, (8, 24), 4096) != MAKE_PROMPTS(6, 16, (8, 24), 4096)
    assert len(a) == 16 and all(8 <= len(p) <= 24 and all(0 <= t < 4096 for t in p) for p in a)


# -- the wire contract ---------------------------------------------------------------------------


def test_models_and_readiness(baseline: Served) -> None:
    status, body = check.get_json(HOST, baseline.port, "/v1/models")
    assert status == 200 and [m["id"] for m in body["data"]] == ["serve-cpu-int"]
    assert check.get_json(HOST, baseline.port, "/health")[0] == 200


def test_streaming_chunks_carry_token_ids_and_end_with_done(
    baseline: Served, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    status, raw, kind = baseline.post(
        {
            "model": "serve-cpu-int",
            "prompt": prompts[0],
            "max_tokens": 5,
            "temperature": 0,
            "stream": True,
            "return_token_ids": True,
        }
    )
    assert status == 200 and kind.startswith("text/event-stream")
    events = [e for e in raw.decode().split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    ids = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    assert ids == expected[0][:5]  # greedy: a prefix of the longer completion
    assert all(c["object"] == "text_completion" and c["model"] == "serve-cpu-int" for c in chunks)
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons[-1] == "length" and set(reasons[:-1]) <= {None}


def test_logprobs_are_top_k_keyed_by_token_id(baseline: Served, prompts: list[list[int]]) -> None:
    result = check.stream_completion(HOST, baseline.port, prompts[1], 6, logprobs=2)
    assert result.done and len(result.tokens) == 6 == len(result.top_logprobs)
    for token, top in zip(result.tokens, result.top_logprobs, strict=True):
        keys = list(top)
        assert len(keys) == 2 and keys[0] == f"token_id:{token}"
        assert all(k.startswith("token_id:") for k in keys)
        assert top[keys[0]] >= top[keys[1]] and top[keys[0]] <= 0.0


def test_non_streaming_gives_the_same_tokens(
    baseline: Served, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    status, raw, kind = baseline.post({"prompt": prompts[2], "max_tokens": 7})
    body = json.loads(raw)
    assert status == 200 and kind == "application/json"
    assert body["choices"][0]["token_ids"] == expected[2][:7]
    assert body["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"prompt": [], "max_tokens": 4}, 400),
        ({"prompt": [1, 4096], "max_tokens": 4}, 400),
        ({"prompt": "text", "max_tokens": 4}, 400),
        ({"prompt": [1, 2], "max_tokens": 0}, 400),
        ({"prompt": [1, 2], "max_tokens": 4, "temperature": 0.7}, 400),
        ({"prompt": [1, 2], "max_tokens": 4, "model": "gpt-4"}, 404),
    ],
)
def test_bad_requests_are_refused(baseline: Served, body: dict, status: int) -> None:
    got, raw, _ = baseline.post(body)
    assert got == status and "error" in json.loads(raw)


# -- baseline and reference ----------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 16])
def test_reference_gives_the_baselines_tokens(
    reference: Served, prompts: list[list[int]], expected: list[list[int]], concurrency: int
) -> None:
    results = reference.run(prompts, concurrency)
    assert all(r.done and not r.error for r in results)
    assert [r.tokens for r in results] == expected


def test_baseline_at_concurrency_16_gives_its_own_tokens(
    baseline: Served, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    assert [r.tokens for r in baseline.run(prompts, 16)] == expected


def test_public_expected_is_the_baselines(baseline: Served) -> None:
    data = json.loads((TEMPLATE / "harness" / "public_expected.json").read_text())
    public = check.public_prompts(check.PUBLIC_SEED, check.REQUESTS, check.PROMPT_LEN, check.VOCAB)[
        :4
    ]
    got = baseline.run(public, 4, tokens=data["max_tokens"])
    assert [r.tokens for r in got] == data["tokens"][:4]


def test_reference_batches_concurrent_requests_and_baseline_does_not(
    baseline: Served, reference: Served, prompts: list[list[int]]
) -> None:
    reference.run(prompts, 16)
    baseline.run(prompts[:4], 4)
    ref_sizes = {int(k): v for k, v in reference.stats()["batch_sizes"].items()}
    base_sizes = {int(k) for k in baseline.stats()["batch_sizes"]}
    assert max(ref_sizes) > 1 and sum(v for k, v in ref_sizes.items() if k >= 8) > 0
    assert base_sizes == {1}


# -- mutants: the bugs they claim ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["swap_on_leave", "attention_mixes_rows", "kv_pool_stale", "prefill_off_by_one"]
)
def test_mismatch_mutants_change_some_tokens(
    tmp_path: Path, name: str, prompts: list[list[int]], expected: list[list[int]]
) -> None:
    served = Served(_tree(tmp_path / "t", [TASK / "mutants" / f"{name}.patch"]))
    try:
        first = served.run(prompts[:1], 1)  # alone, in a fresh process
        together = served.run(prompts, 16)
    finally:
        served.close()
    if name in ("swap_on_leave", "attention_mixes_rows"):
        assert [r.tokens for r in first] == expected[:1]  # right alone: a batching bug
    assert [r.tokens for r in together] != expected


def test_batch_window_sleeps_for_a_lone_request(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", [TASK / "mutants" / "batch_window.patch"])
    text = (tree / "engine" / "scheduler.py").read_text()
    assert "time.sleep(0.010)" in text and "len(rows) < 4" in text


# -- patches and files are well formed ---------------------------------------------------------


def _closure(name: str) -> list[str]:
    need: set[str] = set()
    todo = list(MOVES[name]["requires"])
    while todo:
        n = todo.pop()
        if n not in need:
            need.add(n)
            todo.extend(MOVES[n]["requires"])
    return [m for m in MOVES if m in need]


def test_move_library_loads_and_matches_its_yaml() -> None:
    library = Library.load(TASK / "moves")
    assert json.loads((TASK / "moves" / "moves.json").read_text()) == LIBRARY
    assert set(library.moves) == set(MOVES) and library.check
    directions = {d["name"] for d in TASK_YAML["directions"]}
    kinds = set()
    for move in LIBRARY["moves"]:
        assert move["direction"] in directions
        assert (TASK / "moves" / move["patch"]).is_file()
        kinds.add(move["kind"])
        assert ("reason" in move) == (move["kind"] in ("wrong", "rule"))
    assert kinds == {"good", "wrong", "rule", "dead"}
    for sweep in library.sweeps:
        assert set(sweep.after) <= set(MOVES)


@pytest.mark.parametrize("name", list(MOVES))
def test_every_move_applies_on_what_it_requires(tmp_path: Path, name: str) -> None:
    patches = [TASK / "moves" / MOVES[n]["patch"] for n in [*_closure(name), name]]
    tree = _tree(tmp_path / "t", patches)
    for path in tree.rglob("*.py"):
        compile(path.read_bytes(), str(path), "exec")


def test_reference_is_the_good_moves_in_order(tmp_path: Path) -> None:
    goods = [m["name"] for m in LIBRARY["moves"] if m["kind"] == "good"]
    by_moves = _tree(tmp_path / "a", [TASK / "moves" / f"{n}.patch" for n in goods][:1])
    assert by_moves.is_dir()
    ref = _tree(tmp_path / "b", [TASK / "reference" / "solution.patch"])
    for name in ("engine/model.py", "engine/scheduler.py"):
        assert (ref / name).read_text() != (TEMPLATE / name).read_text()
    assert not any(
        p.match("harness/*")
        for p in ref.rglob("*")
        if p.is_file()
        and (TEMPLATE / p.relative_to(ref)).exists()
        and (TEMPLATE / p.relative_to(ref)).read_bytes() != p.read_bytes()
    )


def test_mutants_file_is_well_formed(tmp_path: Path) -> None:
    fields = {f.name for f in dataclasses.fields(Mutant)}
    names = set()
    for i, entry in enumerate(MUTANTS):
        assert set(entry) <= fields, entry
        mutant = Mutant(**entry)
        assert mutant.name not in names
        names.add(mutant.name)
        assert mutant.expect in ("PASS", "WRONG", "REJECT")
        assert (mutant.reason is None) == (mutant.expect == "PASS")
        if mutant.patch:
            _tree(tmp_path / f"m{i}", [TASK / mutant.patch])
    assert {"baseline", "reference"} <= names
    reasons = {m["reason"] for m in MUTANTS if m.get("reason")}
    assert {"mismatch", "b1_regression", "frozen_zone"} <= reasons


def test_generated_files_are_up_to_date(tmp_path: Path) -> None:
    """make_patches.py, run on a copy of the folder, writes exactly the committed files."""
    copy = tmp_path / "serve_cpu"
    shutil.copytree(TASK, copy, ignore=shutil.ignore_patterns("__pycache__"))
    # The copy is outside the project: the project's patch kit comes from PYTHONPATH.
    env = {**os.environ, "PYTHONPATH": str(TASK.parents[1])}
    subprocess.run(
        [sys.executable, str(copy / "make_patches.py")], check=True, capture_output=True, env=env
    )
    generated = [
        *sorted((TASK / "moves").iterdir()),
        *sorted((TASK / "mutants").iterdir()),
        TASK / "reference" / "solution.patch",
        TEMPLATE / "harness" / "public_expected.json",
    ]
    for path in generated:
        rel = path.relative_to(TASK)
        assert (copy / rel).read_text() == path.read_text(), rel
    assert {p.name for p in (copy / "moves").iterdir()} == {
        p.name for p in (TASK / "moves").iterdir()
    }
