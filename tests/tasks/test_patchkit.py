"""The tasks' patch kit (``tasks/patchkit.py``): its edits' rules, and every bundled generator
built on it writing exactly the committed files (serve_cpu's and decode_cpu's moves are checked
in their own tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.patchkit import (
    ON_REFERENCE,
    Library,
    Move,
    Mutant,
    PatchError,
    apply_edits,
    diff,
    fresh_repo,
    git,
)

PROJECT = Path(__file__).resolve().parents[2]
TASKS = PROJECT / "tasks"


@pytest.fixture
def task(tmp_path: Path) -> Path:
    """A task folder: a template of two files and a reference solution."""
    root = tmp_path / "task"
    (root / "template" / "pkg").mkdir(parents=True)
    (root / "template" / "pkg" / "a.py").write_text("x = 1\ny = 2\n")
    (root / "template" / "b.txt").write_text("b\nb\n")
    (root / "reference").mkdir()
    return root


def test_an_edit_needs_its_text_exactly_once_and_a_created_file_must_be_new(task, tmp_path):
    repo = fresh_repo(tmp_path / "w", task / "template")
    assert git(repo, "log", "--format=%s") == "template\n"
    with pytest.raises(PatchError, match=r"bad: the text to replace occurs 2 times in b.txt"):
        apply_edits(repo, [("b.txt", "b\n", "c\n")], "bad")
    with pytest.raises(PatchError, match=r"gone: the text to replace occurs 0 times"):
        apply_edits(repo, [("pkg/a.py", "z = 3\n", "")], "gone")
    with pytest.raises(PatchError, match=r"again: pkg/a.py exists already"):
        apply_edits(repo, [("pkg/a.py", None, "x = 0\n")], "again")
    with pytest.raises(PatchError, match="needs the task folder"):
        apply_edits(repo, [(ON_REFERENCE, None, "")], "ref")
    apply_edits(
        repo,
        [("pkg/a.py", "y = 2\n", "y = 3\n"), ("new/c.py", "", "c = 1\n"), ("d.bin", None, b"\0\1")],
        "ok",
    )
    patch = diff(repo)
    assert "-y = 2\n+y = 3\n" in patch and "+c = 1\n" in patch and "GIT binary patch" in patch


def test_a_library_writes_moves_on_their_requirements_and_whole_mutants(task):
    first = Move("first", "d", "good", "one", [("pkg/a.py", "x = 1\n", "x = 10\n")])
    second = Move("second", "d", "good", "two", [("pkg/a.py", "x = 10\n", "x = 20\n")], ("first",))
    wrong = Move("wrong", "d", "wrong", "w", [("b.txt", "b\nb\n", "b\n")], reason="mismatch")
    library = Library(task, [first, second, wrong], [], ["check"], header="# head\n")
    (task / "moves").mkdir()
    (task / "moves" / "stale.patch").write_text("old")
    data = library.write_moves()
    assert [m["name"] for m in data["moves"]] == ["first", "second", "wrong"]
    assert data["moves"][2]["reason"] == "mismatch" and "probe" not in data
    assert not (task / "moves" / "stale.patch").exists()
    assert (task / "moves" / "moves.yaml").read_text().startswith("# head\nmoves:\n")
    # The second move's patch is against the first: it applies there, not on the template.
    second_patch = (task / "moves" / "second.patch").read_text()
    assert "-x = 10\n+x = 20\n" in second_patch
    library.write_reference()
    reference = (task / "reference" / "solution.patch").read_text()
    assert "-x = 1\n+x = 20\n" in reference and "b.txt" not in reference
    written = library.write_mutants(
        [Mutant("on_ref", [("b.txt", "b\nb\n", "")], on_reference=True), Mutant("bare", [])]
    )
    assert [p.name for p in written] == ["on_ref.patch", "bare.patch"]
    assert "+x = 20\n" in written[0].read_text() and written[1].read_text() == ""
    out_of_order = Library(task, [second, first], [], [], header="")
    with pytest.raises(PatchError, match=r"second is listed before its requirements \['first'\]"):
        out_of_order.write_moves(task / "other")


def test_decode_cs_generator_writes_exactly_the_committed_files(tmp_path):
    """``make_patches.py`` run on a copy of the folder (the kit from PYTHONPATH)."""
    source = TASKS / "decode_c"
    copy = tmp_path / "decode_c"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__", "build"))
    for folder in ("moves", "mutants"):
        shutil.rmtree(copy / folder)
    (copy / "reference" / "solution.patch").unlink()
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    subprocess.run(
        [sys.executable, str(copy / "make_patches.py")], check=True, capture_output=True, env=env
    )
    for folder in ("moves", "mutants"):
        names = sorted(p.name for p in (source / folder).iterdir())
        assert sorted(p.name for p in (copy / folder).iterdir()) == names
        for name in names:
            assert (copy / folder / name).read_bytes() == (source / folder / name).read_bytes()
    reference = Path("reference") / "solution.patch"
    assert (copy / reference).read_bytes() == (source / reference).read_bytes()


def test_decode_cpus_mutants_are_what_their_generator_makes():
    from tasks.decode_cpu.make_mutants import MUTANTS, make_patch

    committed = TASKS / "decode_cpu" / "mutants"
    assert set(MUTANTS) == {p.stem for p in committed.glob("*.patch")}
    for name, edits in MUTANTS.items():
        assert make_patch(edits, name) == (committed / f"{name}.patch").read_text(), name
