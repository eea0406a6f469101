"""The bundled ``decode_c`` task: a C engine compiled on the host with the task's own build
command, spoken to as a real subprocess through the frozen ``harness/serve.c`` (no Docker).

Covers the template's protocol (including its error replies), the prompt generator, the
reference solution's tokens against the baseline's, every move of the library (applied with
what it requires, compiled, and checked for the author's intent where the tokens decide it)
and the task's own mutants.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from judge.mutant import Mutant

TASK = Path(__file__).resolve().parents[2] / "tasks" / "decode_c"
TEMPLATE = TASK / "template"
VOCAB = 3000
MAKE_PROMPTS = runpy.run_path(str(TASK / "inputs.py"))["make_prompts"]
TASK_YAML = yaml.safe_load((TASK / "task.yaml").read_text())
LIBRARY = yaml.safe_load((TASK / "moves" / "moves.yaml").read_text())
MOVES = {m["name"]: m for m in LIBRARY["moves"]}

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler (gcc)")


class Serve:
    """One engine process (the built ``serve``), run from the tree's root."""

    def __init__(self, program: Path, tree: Path) -> None:
        self.proc = subprocess.Popen(
            [str(program)],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def raw(self, line: str) -> dict[str, Any]:
        """Send one line; return the reply line parsed (the process must answer)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        assert reply, "the engine exited"
        return json.loads(reply)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        reply = self.raw(json.dumps(message))
        assert reply["ok"] is True, reply
        return reply

    def run(self, prompts: list[list[int]], steps: int) -> list[list[int]]:
        """prefill, decode, reset; the tokens."""
        self.ask({"op": "prefill", "prompts": prompts})
        tokens = self.ask({"op": "decode", "steps": steps, "margins": False})["tokens"]
        self.ask({"op": "reset"})
        return tokens

    def close(self) -> str:
        """End the process; its stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        err = self.proc.stderr.read()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return err


@dataclasses.dataclass
class Build:
    tree: Path
    program: Path

    def serve(self) -> Serve:
        server = Serve(self.program, self.tree)
        server.ask({"op": "load"})
        return server


def _build(dest: Path, patches: list[Path]) -> Build:
    """The template with `patches` applied in order, compiled by the task's build argv into a
    folder outside the tree (the tree itself stays untouched, as in the sandbox)."""
    tree = dest / "tree"
    shutil.copytree(TEMPLATE, tree, ignore=shutil.ignore_patterns("build"))
    for patch in patches:
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True, capture_output=True)
    out = dest / "build"
    out.mkdir()
    argv = [part.replace("{build}", str(out)) for part in TASK_YAML["build"]]
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return Build(tree, out / "serve")


def _move_patches(name: str) -> list[Path]:
    """The patches that make move `name` apply: what it requires (transitively, in library
    order), then its own."""
    need: set[str] = set()
    todo = list(MOVES[name]["requires"])
    while todo:
        other = todo.pop()
        if other not in need:
            need.add(other)
            todo.extend(MOVES[other]["requires"])
    ordered = [m for m in MOVES if m in need] + [name]
    return [TASK / "moves" / MOVES[m]["patch"] for m in ordered]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Build]:
    root = tmp_path_factory.mktemp("decode_c")
    return {
        "baseline": _build(root / "baseline", []),
        "reference": _build(root / "reference", [TASK / "reference" / "solution.patch"]),
    }


def _prompts(seed: int, batch: int, prompt_len: tuple[int, int] = (8, 24)) -> list[list[int]]:
    return MAKE_PROMPTS(seed, batch, prompt_len, VOCAB)


@pytest.fixture(scope="module")
def expected(builds: dict[str, Build]) -> dict[str, list[list[int]]]:
    """The baseline's tokens, each prompt decoded alone, for the sets the tests use."""
    server = builds["baseline"].serve()
    sets = {"b16": _prompts(11, 16), "long": _prompts(12, 4, (32, 48))}
    out = {name: [server.run([p], 24)[0] for p in prompts] for name, prompts in sets.items()}
    server.close()
    return out | {f"{name}:prompts": prompts for name, prompts in sets.items()}  # type: ignore[operator]


# -- the prompt generator ------------------------------------------------------------------------


def test_prompts_are_deterministic_in_range_and_match_the_public_generator() -> None:
    prompts = MAKE_PROMPTS(5, 16, (8, 24), VOCAB)
    assert prompts == MAKE_PROMPTS(5, 16, [8, 24], VOCAB)
    assert prompts != MAKE_PROMPTS(6, 16, (8, 24), VOCAB)
    assert len(prompts) == 16 and all(8 <= len(p) <= 24 for p in prompts)
    assert all(0 <= t < VOCAB for p in prompts for t in p)
    assert len({len(p) for p in prompts}) > 1  # ragged
    check = runpy.run_path(str(TEMPLATE / "harness" / "check.py"))
    assert check["public_prompts"](5, 16, (8, 24), VOCAB) == prompts
    with pytest.raises(ValueError):
        MAKE_PROMPTS(1, 2, (0, 4), VOCAB)


# -- the template and its protocol ----------------------------------------------------------------


def test_template_speaks_the_protocol(builds: dict[str, Build]) -> None:
    server = Serve(builds["baseline"].program, builds["baseline"].tree)
    assert server.raw('{"op": "load"}') == {
        "ok": True,
        "info": {"engine": "baseline", "language": "c"},
    }
    prompts = _prompts(3, 3)
    assert server.raw(json.dumps({"op": "prefill", "prompts": prompts})) == {"ok": True}
    reply = server.raw(json.dumps({"op": "decode", "steps": 5, "margins": True}))
    assert reply["ok"] is True and set(reply) == {"ok", "tokens", "margins"}
    assert [len(row) for row in reply["tokens"]] == [5, 5, 5]
    assert all(type(t) is int and 0 <= t < VOCAB for row in reply["tokens"] for t in row)
    assert [len(row) for row in reply["margins"]] == [5, 5, 5]
    assert all(m >= 0.0 for row in reply["margins"] for m in row)
    # Without margins asked for: null. After reset: no rows.
    server.ask({"op": "reset"})
    server.ask({"op": "prefill", "prompts": prompts[:1]})
    again = server.ask({"op": "decode", "steps": 5})
    assert again["tokens"] == reply["tokens"][:1] and again["margins"] is None
    server.ask({"op": "reset"})
    assert server.ask({"op": "decode", "steps": 3})["tokens"] == []
    server.close()


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("not json", "JSONDecodeError"),
        ('{"op": "prefill", "prompts": [[1, 2]]', "JSONDecodeError"),
        ('{"op": "x"}', "unknown op 'x'"),
        ('{"steps": 3}', "unknown op"),
        ('{"op": "prefill"}', "KeyError: 'prompts'"),
        ('{"op": "prefill", "prompts": [[1, 3000]]}', "token id out of range"),
        ('{"op": "prefill", "prompts": [[1], []]}', "empty prompt"),
        ('{"op": "prefill", "prompts": [[1.5]]}', "not an integer"),
        ('{"op": "prefill", "prompts": [[99999999999999999999]]}', "not an integer"),
        ('{"op": "decode"}', "KeyError: 'steps'"),
        ('{"op": "decode", "steps": -1}', "steps must be"),
        ('{"op": "decode", "steps": "3"}', "steps must be"),
        ('{"op": "decode", "steps": 1} extra', "JSONDecodeError"),
        ("[" * 100 + "]" * 100, "JSONDecodeError"),
    ],
)
def test_bad_requests_get_an_error_reply_and_the_server_keeps_serving(
    builds: dict[str, Build], line: str, error: str
) -> None:
    server = builds["baseline"].serve()
    reply = server.raw(line)
    assert reply["ok"] is False and error in reply["error"], reply
    # Still serving, and its state is sound.
    assert server.run([[1, 2, 3]], 2) == server.run([[1, 2, 3]], 2)
    server.close()


def test_prefill_before_load_is_an_error(builds: dict[str, Build]) -> None:
    server = Serve(builds["baseline"].program, builds["baseline"].tree)
    reply = server.raw('{"op": "prefill", "prompts": [[1, 2]]}')
    assert reply == {"ok": False, "error": "load first"}
    server.close()


def test_baseline_rows_equal_single_runs_and_the_public_outputs(
    builds: dict[str, Build], expected: dict
) -> None:
    server = builds["baseline"].serve()
    assert server.run(expected["b16:prompts"], 24) == expected["b16"]
    public = json.loads((TEMPLATE / "harness" / "public_expected.json").read_text())
    assert server.run(public["prompts"], public["steps"]) == public["tokens"]
    server.close()


# -- the reference solution -----------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 2, 16])
def test_reference_tokens_equal_the_baselines(
    builds: dict[str, Build], expected: dict, batch: int
) -> None:
    server = builds["reference"].serve()
    prompts = expected["b16:prompts"][:batch]
    assert server.run(prompts, 24) == expected["b16"][:batch]
    # Longer prompts and a decode past the KV cache's first size (64 positions).
    assert server.run(expected["long:prompts"][:batch], 24) == expected["long"][:batch]
    server.close()


def test_reference_survives_alternating_batch_sizes(
    builds: dict[str, Build], expected: dict
) -> None:
    server = builds["reference"].serve()
    for size in (16, 1, 4, 1, 2, 16, 2):
        got = server.run(expected["b16:prompts"][:size], 24)
        assert got == expected["b16"][:size], size
    server.close()


def test_reference_margins_equal_the_baselines(builds: dict[str, Build]) -> None:
    prompts = _prompts(21, 4)
    margins = []
    for name in ("baseline", "reference"):
        server = builds[name].serve()
        server.ask({"op": "prefill", "prompts": prompts})
        margins.append(server.ask({"op": "decode", "steps": 6, "margins": True})["margins"])
        server.close()
    assert margins[0] == margins[1]  # the same bits, printed with 17 digits


# -- the move library -----------------------------------------------------------------------------


def test_move_library_is_well_formed() -> None:
    assert json.loads((TASK / "moves" / "moves.json").read_text()) == LIBRARY
    directions = {d["name"] for d in TASK_YAML["directions"]}
    kinds = {m["kind"] for m in LIBRARY["moves"]}
    assert kinds == {"good", "wrong", "rule", "dead"}
    for move in LIBRARY["moves"]:
        assert move["direction"] in directions, move["name"]
        assert (TASK / "moves" / move["patch"]).is_file()
        assert all(r in MOVES for r in move["requires"])
        assert (move.get("reason") is not None) == (move["kind"] in ("wrong", "rule"))
    # Every direction has a good move to start on.
    assert directions <= {m["direction"] for m in LIBRARY["moves"] if m["kind"] == "good"}
    for sweep in LIBRARY["sweeps"]:
        text = (TEMPLATE / sweep["file"]).read_text()
        assert text.count(sweep["old"]) == 1, sweep["name"]


@pytest.mark.parametrize("name", sorted(MOVES))
def test_every_move_applies_and_builds_and_does_what_its_author_says(
    tmp_path: Path, builds: dict[str, Build], expected: dict, name: str
) -> None:
    move = MOVES[name]
    if move["kind"] == "rule":
        # Applies (the judge REJECTs it for the frozen zone: a file of the zone changes).
        tree = tmp_path / "tree"
        shutil.copytree(TEMPLATE, tree)
        for patch in _move_patches(name):
            subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
        frozen = [p.removesuffix("/**") for p in TASK_YAML["frozen"]]
        changed = subprocess.run(
            ["git", "apply", "--numstat", str(TASK / "moves" / move["patch"])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        paths = [line.split("\t")[2] for line in changed.splitlines()]
        assert paths and all(any(p.startswith(f) for f in frozen) for p in paths)
        return
    build = _build(tmp_path, _move_patches(name))
    server = build.serve()
    got = server.run(expected["b16:prompts"], 24)
    if move["kind"] in ("good", "dead") or move.get("latent"):
        assert got == expected["b16"]
        assert server.run(expected["long:prompts"], 24) == expected["long"]
        assert server.run(expected["b16:prompts"][:1], 24) == expected["b16"][:1]
    elif move["reason"] == "mismatch":
        assert got != expected["b16"]
    else:  # b1_regression: correct tokens, slow at B=1 (the judge's to measure)
        assert got == expected["b16"]
    server.close()


def test_good_and_dead_moves_apply_in_any_order_their_requirements_allow(tmp_path: Path) -> None:
    """Moves of different directions edit different lines, so a worker holding another
    direction's moves can still apply its own (plain ``git apply``, no three-way merge)."""
    names = [m["name"] for m in LIBRARY["moves"] if m["kind"] in ("good", "dead")]
    for first in names:
        for second in names:
            if first == second:
                continue
            tree = tmp_path / f"{first}-{second}"
            shutil.copytree(TEMPLATE, tree)
            applied: list[Path] = []
            for patch in _move_patches(first) + _move_patches(second):
                if patch not in applied:
                    done = subprocess.run(
                        ["git", "apply", str(patch)], cwd=tree, capture_output=True
                    )
                    assert done.returncode == 0, (first, second, patch.name)
                    applied.append(patch)
            shutil.rmtree(tree)


def test_good_moves_make_the_reference() -> None:
    """reference/solution.patch is the template with every good move applied (in order)."""
    solution = (TASK / "reference" / "solution.patch").read_text()
    for move in LIBRARY["moves"]:
        if move["kind"] == "good":
            added = [
                line[1:]
                for line in (TASK / "moves" / move["patch"]).read_text().splitlines()
                if line.startswith("+") and not line.startswith("+++") and len(line) > 12
            ]
            assert any(line in solution for line in added), move["name"]


# -- the task's own mutants -----------------------------------------------------------------------


def test_mutants_file_is_well_formed() -> None:
    entries = yaml.safe_load((TASK / "mutants.yaml").read_text())
    fields = {f.name for f in dataclasses.fields(Mutant)}
    names = set()
    for entry in entries:
        assert set(entry) <= fields, entry
        mutant = Mutant(**entry)
        assert mutant.name not in names
        names.add(mutant.name)
        assert mutant.expect in ("PASS", "WRONG", "REJECT")
        assert mutant.patch and (TASK / mutant.patch).is_file()
        assert (mutant.reason is None) == (mutant.expect == "PASS")
    assert {"reference", "static_solo_row", "fake_timing_fd3"} <= names


def _mutant(tmp_path: Path, name: str) -> Build:
    return _build(tmp_path, [TASK / "mutants" / f"{name}.patch"])


def test_static_solo_row_is_right_once_and_wrong_on_the_next_single_request(
    tmp_path: Path, expected: dict
) -> None:
    server = _mutant(tmp_path, "static_solo_row").serve()
    first = expected["b16:prompts"][:1]
    assert server.run(expected["b16:prompts"][:4], 24) == expected["b16"][:4]
    assert server.run(first, 24) == expected["b16"][:1]  # a fresh process: right
    assert server.run(expected["b16:prompts"][1:2], 24) != expected["b16"][1:2]
    server.close()


def test_neighbour_row_logits_is_wrong_on_ragged_batches_only(
    tmp_path: Path, expected: dict
) -> None:
    server = _mutant(tmp_path, "neighbour_row_logits").serve()
    assert server.run(expected["b16:prompts"][:1], 24) == expected["b16"][:1]
    assert server.run(expected["b16:prompts"], 24) != expected["b16"]
    server.close()


def test_fake_timing_fd3_writes_out_of_turn_on_the_protocol(tmp_path: Path) -> None:
    server = _mutant(tmp_path, "fake_timing_fd3").serve()
    server.ask({"op": "prefill", "prompts": [[1, 2, 3]]})
    fake = server.raw('{"op": "decode", "steps": 2}')
    assert fake == {"ok": True, "tok_s": 99999.0}  # no tokens: the judge's protocol WRONG
    server.close()


def test_fake_timing_print_never_reaches_the_protocol(tmp_path: Path, expected: dict) -> None:
    server = _mutant(tmp_path, "fake_timing_print").serve()
    assert server.run(expected["b16:prompts"][:2], 24) == expected["b16"][:2]
    assert "99999" in server.close()  # the claim went to stderr


def test_numerics_edit_changes_only_the_frozen_zone() -> None:
    patch = (TASK / "mutants" / "numerics_edit.patch").read_text()
    assert "engine/numerics.h" in patch and "engine/numerics.h" in TASK_YAML["frozen"]


# -- the task folder ------------------------------------------------------------------------------


def test_task_yaml_names_the_build_place_and_the_toolchain() -> None:
    assert TASK_YAML["serve"] == ["{build}/serve"]
    assert "-ffp-contract=off" in TASK_YAML["build"]
    assert TASK_YAML["toolchain"] == [["gcc", "--version"]]
    assert TASK_YAML["inputs"] == "inputs.py:make_prompts"
    check = runpy.run_path(str(TEMPLATE / "harness" / "check.py"))
    assert check["BUILD"] == TASK_YAML["build"]  # the local check builds as the judge does
    assert not (TEMPLATE / "build").exists()
