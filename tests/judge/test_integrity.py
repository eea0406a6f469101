"""Integrity checks against the judge's own copy of the frozen zone, and the import rules,
each shown against what the real interpreter does when it runs a tree the way the sandbox
does (``python -I -B harness/...`` from the root, the harness appending the root to
``sys.path``)."""

from __future__ import annotations

import importlib.util
import py_compile
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from judge.integrity import (
    check_integrity,
    in_zone,
    module_name,
    startup_path_names,
    zone_hashes,
)
from judge.verdict import Outcome, Verdict

FROZEN = ["harness/**", "engine/config.py", "engine/weights.py"]
OWN = ["engine", "harness"]
# What harness/serve.py does before the engine runs: append the root, import the engine.
LAUNCHER = """import sys
from pathlib import Path
sys.path.append(str(Path(__file__).resolve().parent.parent))
import engine.model, engine.weights
print(engine.model.FAST, engine.weights.SOURCE)
"""


@pytest.fixture
def trees(tmp_path):
    def make(name: str):
        root = tmp_path / name
        (root / "harness").mkdir(parents=True)
        (root / "engine").mkdir()
        (root / "harness" / "serve.py").write_text(LAUNCHER)
        (root / "engine" / "__init__.py").write_text("")
        (root / "engine" / "config.py").write_text("D = 64\n")
        (root / "engine" / "weights.py").write_text("SOURCE = 'frozen'\n")
        (root / "engine" / "model.py").write_text("FAST = False\n")
        return root

    judge_copy = make("judge")
    return zone_hashes(judge_copy, FROZEN), make("candidate")


def _reject(candidate, hashes) -> Outcome:
    with pytest.raises(Outcome) as caught:
        check_integrity(candidate, FROZEN, hashes, OWN)
    assert caught.value.verdict is Verdict.REJECT
    return caught.value


def _serve(root: Path) -> str:
    """What the tree prints when run as the sandbox runs it."""
    done = subprocess.run(
        [sys.executable, "-I", "-B", "harness/serve.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def _write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_zone_patterns():
    assert in_zone("harness/x/y.py", FROZEN) and in_zone("engine/config.py", FROZEN)
    assert not in_zone("engine/model.py", FROZEN) and not in_zone("harnessy.py", FROZEN)


def test_module_names_follow_the_path_finders_suffixes():
    assert module_name("model.py") == "model"
    assert module_name(f"model{EXTENSION_SUFFIXES[0]}") == "model"
    assert module_name("model.abi3.so") == "model" and module_name("model.pyc") == "model"
    assert module_name("model.py.orig") is None and module_name("a.b.py") is None
    assert module_name("notes.txt") is None


def test_untouched_zone_and_edits_outside_it_pass(trees):
    hashes, candidate = trees
    (candidate / "engine" / "model.py").write_text("FAST = True\n")
    check_integrity(candidate, FROZEN, hashes, OWN)
    assert _serve(candidate) == "True frozen"


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


def _forge_pyc(source: Path, decoy: str, checked: bool) -> Path:
    """``__pycache__/<module>.<tag>.pyc`` holding ``decoy``'s code, made to be accepted for
    ``source``: unchecked hash-based (never compared with the source), or checked with the
    real source's hash in its header (its code is still the decoy's)."""
    tmp = source.with_name("_decoy.py")
    tmp.write_text(decoy)
    cfile = Path(importlib.util.cache_from_source(str(source)))
    mode = py_compile.PycInvalidationMode
    py_compile.compile(
        str(tmp),
        cfile=str(cfile),
        doraise=True,
        invalidation_mode=mode.CHECKED_HASH if checked else mode.UNCHECKED_HASH,
    )
    tmp.unlink()
    if checked:
        data = bytearray(cfile.read_bytes())
        data[8:16] = importlib.util.source_hash(source.read_bytes())
        cfile.write_bytes(bytes(data))
    return cfile


@pytest.mark.parametrize("checked", [False, True], ids=["unchecked_hash", "checked_hash"])
@pytest.mark.parametrize("module", ["model", "weights"])
def test_a_shipped_pyc_is_what_python_runs_so_it_is_refused(trees, module, checked):
    hashes, candidate = trees
    source = candidate / "engine" / f"{module}.py"
    decoy = "FAST = True\n" if module == "model" else "SOURCE = 'decoy'\n"
    _forge_pyc(source, decoy, checked)
    # -B does not stop reading bytecode: the decoy runs, the source stays as committed.
    assert _serve(candidate) == ("True frozen" if module == "model" else "False decoy")
    outcome = _reject(candidate, hashes)
    assert outcome.reason == "forbidden_file" and "__pycache__" in outcome.detail


def test_a_sourceless_pyc_module_is_refused(trees):
    hashes, candidate = trees
    fast = candidate / "engine" / "fast.py"
    fast.write_text("X = 1\n")
    py_compile.compile(str(fast), cfile=str(candidate / "engine" / "fast.pyc"), doraise=True)
    fast.unlink()
    assert _reject(candidate, hashes).reason == "forbidden_file"


@pytest.mark.parametrize(
    "name",
    [
        "sitecustomize.py",
        "sitecustomize/__init__.py",
        "engine/sitecustomize/__init__.py",
        "engine/usercustomize.py",
        "usercustomize/__init__.py",
        "engine/sitecustomize.abi3.so",
        "harness/usercustomize.py",
        "engine/speed.pth",
        "data/speed.pth",
    ],
)
def test_startup_hooks_are_rejected_as_module_package_or_pth(trees, name):
    hashes, candidate = trees
    _write(candidate / name, "import os\n")
    outcome = _reject(candidate, hashes)
    assert outcome.reason == "forbidden_file" and name in outcome.detail


def test_startup_hooks_in_the_tree_are_inert_in_this_sandbox(trees, tmp_path):
    """Why the refusal above is a policy, not a hole it closes: under -I nothing of the tree
    is on the startup path and no tree folder is a site folder."""
    _, candidate = trees
    marker = tmp_path / "pwned"
    hook = f"open({str(marker)!r}, 'w').close()\n"
    for name in ("sitecustomize.py", "harness/sitecustomize.py", "usercustomize/__init__.py"):
        _write(candidate / name, hook)
    _write(candidate / "speed.pth", f"import os; os.close(os.open({str(marker)!r}, 65))\n")
    assert _serve(candidate) == "False frozen" and not marker.exists()


@pytest.mark.parametrize(
    ("extra", "runs"),
    [
        ("engine/weights/__init__.py", "False decoy"),  # a package beats the frozen module
        ("engine/model/__init__.py", "True frozen"),
        ("engine/weights.abi3.so", None),  # an extension is tried before the source
        (f"engine/model{EXTENSION_SUFFIXES[0]}", None),
        ("engine/__init__.abi3.so", None),
    ],
)
def test_one_module_name_with_two_files_is_rejected(trees, extra, runs):
    hashes, candidate = trees
    decoy = "SOURCE = 'decoy'\n" if "weights" in extra else "FAST = True\n"
    _write(candidate / extra, decoy if extra.endswith(".py") else "not an ELF file\n")
    if runs is not None:
        assert _serve(candidate) == runs
    outcome = _reject(candidate, hashes)
    assert outcome.reason == "shadowing" and extra.rsplit("/", 1)[0] in outcome.detail


def test_a_data_folder_named_like_a_module_is_not_a_clash(trees):
    """A folder without ``__init__`` is only a namespace portion: the module wins."""
    hashes, candidate = trees
    _write(candidate / "engine" / "model" / "table.bin", "x")
    check_integrity(candidate, FROZEN, hashes, OWN)
    assert _serve(candidate) == "False frozen"


@pytest.mark.parametrize(
    "name",
    ["time.py", "json.py", "numpy.py", "numpy", "numpy.abi3.so", "_decimal.py", "yaml/x.txt"],
)
def test_shadowing_standard_or_installed_modules_is_rejected(trees, name):
    hashes, candidate = trees
    target = candidate / name
    if name in ("numpy",):
        target.mkdir()
        (target / "__init__.py").write_text("")
    else:
        _write(target, "def perf_counter(): return 0.0\n")
    assert _reject(candidate, hashes).reason == "shadowing"


def test_installed_names_come_from_the_interpreters_own_path():
    names = startup_path_names()
    assert {"numpy", "yaml", "json", "_decimal", "_distutils_hack"} <= names
    site = next(p for p in sys.path if p.endswith("site-packages"))
    found_only_there = sorted(
        n.removesuffix(".py")
        for n in (p.name for p in Path(site).iterdir())
        if n.endswith(".py") and n.removesuffix(".py").isidentifier()
    )
    assert set(found_only_there) <= names


@pytest.mark.parametrize(
    "name",
    ["engine/numpy.py", "engine/json/__init__.py", "tools/bench.py", "bench.py", "notes.txt"],
)
def test_names_python_never_resolves_before_the_candidate_pass(trees, name):
    """Inside the candidate's own package a name is only reached by its own relative import,
    and a root name no earlier path entry has is the candidate's own module."""
    hashes, candidate = trees
    _write(candidate / name, "X = 1\n")
    check_integrity(candidate, FROZEN, hashes, OWN)
