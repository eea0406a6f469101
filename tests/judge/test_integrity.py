"""Integrity checks against the judge's own copy of the frozen zone."""

from __future__ import annotations

import pytest

from judge.integrity import check_integrity, in_zone, zone_hashes
from judge.verdict import Outcome, Verdict

FROZEN = ["harness/**", "engine/config.py"]


@pytest.fixture
def trees(tmp_path):
    def make(name: str):
        root = tmp_path / name
        (root / "harness").mkdir(parents=True)
        (root / "engine").mkdir()
        (root / "harness" / "serve.py").write_text("print('serve')\n")
        (root / "engine" / "config.py").write_text("D = 64\n")
        (root / "engine" / "model.py").write_text("class Engine: ...\n")
        return root

    judge_copy = make("judge")
    return zone_hashes(judge_copy, FROZEN), make("candidate")


def _reject(candidate, hashes) -> Outcome:
    with pytest.raises(Outcome) as caught:
        check_integrity(candidate, FROZEN, hashes, ["engine", "harness"])
    assert caught.value.verdict is Verdict.REJECT
    return caught.value


def test_zone_patterns():
    assert in_zone("harness/x/y.py", FROZEN) and in_zone("engine/config.py", FROZEN)
    assert not in_zone("engine/model.py", FROZEN) and not in_zone("harnessy.py", FROZEN)


def test_untouched_zone_and_edits_outside_it_pass(trees):
    hashes, candidate = trees
    (candidate / "engine" / "model.py").write_text("class Engine: fast = True\n")
    check_integrity(candidate, FROZEN, hashes, ["engine", "harness"])


@pytest.mark.parametrize(
    ("edit", "word"),
    [
        (lambda c: (c / "harness" / "serve.py").write_text("print('serve') \n"), "changed"),
        (lambda c: (c / "engine" / "config.py").unlink(), "removed"),
        (lambda c: (c / "harness" / "timer.py").write_text("FAST = 1\n"), "added"),
    ],
)
def test_any_change_to_the_zone_is_rejected(trees, edit, word):
    hashes, candidate = trees
    edit(candidate)
    outcome = _reject(candidate, hashes)
    assert outcome.reason == "frozen_zone" and word in outcome.detail


@pytest.mark.parametrize(
    "name", ["engine/speed.pth", "sitecustomize.py", "engine/usercustomize.py"]
)
def test_import_hooks_are_rejected(trees, name):
    hashes, candidate = trees
    (candidate / name).write_text("import os\n")
    assert _reject(candidate, hashes).reason == "forbidden_file"


@pytest.mark.parametrize("name", ["time.py", "json.py", "numpy.py", "numpy"])
def test_shadowing_standard_or_installed_modules_is_rejected(trees, name):
    hashes, candidate = trees
    target = candidate / name
    if name.endswith(".py"):
        target.write_text("def perf_counter(): return 0.0\n")
    else:
        target.mkdir()
        (target / "__init__.py").write_text("")
    assert _reject(candidate, hashes).reason == "shadowing"
