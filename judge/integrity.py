"""Integrity checks: the frozen zone, and what the interpreter would load instead of, or
before, the candidate's own source (all REJECT).

The frozen zone's hashes come from the judge's own copy of the task, never the candidate's.

The import rules follow how the sandbox's interpreter resolves imports, not file names. The
task's serve command is ``python -I -B harness/serve.py`` run from the tree's root: ``-I``
implies ``-P``, so neither the script's folder (``harness/``) nor the root is on ``sys.path``
at startup, and the harness *appends* the root after the standard library and site-packages.
So at startup nothing of the tree is importable; afterwards a top-level name of the tree is
only used when nothing earlier on the path has it. Within one folder, Python's path finder
takes a package folder (``name/__init__.*``) before a module, an extension (``name.*.so``)
before ``name.py``, and a ``__pycache__/name.<tag>.pyc`` instead of ``name.py`` whenever its
header matches (``-B`` stops writing bytecode, not reading it; an unchecked hash-based pyc is
never compared with its source at all). The checks:

- ``bytecode``: any ``__pycache__`` file or ``*.pyc``/``*.pyo``: the judge runs sources only.
- ``startup hooks``: ``sitecustomize``/``usercustomize`` (module, extension, bytecode or
  package) and ``*.pth`` anywhere. Inert in this sandbox (no tree folder is a site folder or on
  the startup path), refused anyway: no candidate needs them, and a task whose serve command
  put the tree on the startup path would run them before its harness.
- ``two modules, one name``: a folder where one module name resolves to more than one file or
  package (``engine/weights/__init__.py`` beside the frozen ``engine/weights.py``, an
  ``engine/model.abi3.so`` beside ``engine/model.py``): Python would import one the reader, and
  the frozen zone's hashes, do not see.
- ``shadowing``: a top-level module or folder of the tree named like anything the sandbox's
  interpreter finds on its own path at startup (the standard library, built or not, and every
  installed top-level name): dead code at best, a filled-in optional module at worst.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from functools import cache
from importlib import machinery, metadata
from pathlib import Path

from judge.verdict import Outcome, Verdict

STARTUP_HOOKS = frozenset({"sitecustomize", "usercustomize"})
BYTECODE_SUFFIXES = (".pyc", ".pyo")
# Longest first: "x.cpython-311-x86_64-linux-gnu.so" is module "x", not "x.cpython-311-...".
IMPORT_SUFFIXES = tuple(sorted(set(machinery.all_suffixes()) | {".pyo"}, key=len, reverse=True))


def in_zone(path: str, patterns: list[str]) -> bool:
    """True if ``path`` (posix, relative) lies in the zone: ``dir/**`` covers a folder,
    anything else names one file."""
    for pattern in patterns:
        if pattern.endswith("/**"):
            if path.startswith(pattern[:-2]):
                return True
        elif path == pattern:
            return True
    return False


def zone_hashes(root: Path, patterns: list[str]) -> dict[str, str]:
    """sha256 of every file in the zone under ``root``."""
    hashes = {}
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if in_zone(rel, patterns):
            hashes[rel] = hashlib.sha256(file.read_bytes()).hexdigest()
    return hashes


def module_name(filename: str) -> str | None:
    """The module a file in a folder on the path (or in a package) is imported as, or None
    if the path finder would never import it (``a.b.py``, ``notes.txt``)."""
    for suffix in IMPORT_SUFFIXES:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            stem = filename[: -len(suffix)]
            return stem if "." not in stem else None
    return None


def _names_in(folder: str) -> set[str]:
    names: set[str] = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return names
    for entry in entries:
        if entry.is_dir():
            if "." not in entry.name:
                names.add(entry.name)
        else:
            name = module_name(entry.name)
            if name:
                names.add(name)
    return names


@cache
def startup_path_names(python: str | None = None) -> frozenset[str]:
    """Every top-level name the sandbox's interpreter (``python``, default this one) can import
    before the tree: the standard library's names (also those not built here), builtins, the
    top-level names of installed distributions, and what is in each folder of the ``sys.path``
    it starts with under ``-I`` (site-packages and what its ``.pth`` files add)."""
    names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    names.update(metadata.packages_distributions())
    try:
        done = subprocess.run(
            [python or sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd="/",
        )
        path = [p for p in json.loads(done.stdout.strip().splitlines()[-1]) if p]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        path = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]
    for folder in path:
        names.update(_names_in(folder))
    return frozenset(n for n in names if n.isidentifier())


def installed_top_level_names() -> frozenset[str]:
    """Names a file at the candidate's root could shadow (kept for callers of the old name)."""
    return startup_path_names()


def _bytecode(files: list[str]) -> list[str]:
    return [f for f in files if "__pycache__" in f.split("/") or f.endswith(BYTECODE_SUFFIXES)]


def _startup_hooks(files: list[str]) -> list[str]:
    found = []
    for path in files:
        *folders, name = path.split("/")
        if name.endswith(".pth") or module_name(name) in STARTUP_HOOKS:
            found.append(path)
        elif any(folder in STARTUP_HOOKS for folder in folders):
            found.append(path)  # a sitecustomize/ package (or a file inside one)
    return found


def _one_name_twice(files: list[str]) -> list[str]:
    """'a, b' for each folder where one module name resolves to two or more things."""
    by_folder: dict[str, dict[str, list[str]]] = {}
    packages = {
        f.rsplit("/", 1)[0]
        for f in files
        if "/" in f and module_name(f.rsplit("/", 1)[1]) == "__init__"
    }
    for path in files:
        folder, _, name = path.rpartition("/")
        module = module_name(name)
        if module and not name.endswith(BYTECODE_SUFFIXES):
            by_folder.setdefault(folder, {}).setdefault(module, []).append(path)
    for package in packages:
        folder, _, name = package.rpartition("/")
        if "." not in name:
            by_folder.setdefault(folder, {}).setdefault(name, []).append(package + "/")
    clashes = []
    for modules in by_folder.values():
        for paths in modules.values():
            if len(paths) > 1:
                clashes.append(" and ".join(sorted(paths)))
    return sorted(clashes)


def check_integrity(
    tree: Path, frozen: list[str], reference_hashes: dict[str, str], own_packages: list[str]
) -> None:
    """Raise a REJECT Outcome if the candidate tree breaks a rule; return None otherwise."""
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    bytecode = _bytecode(files)
    if bytecode:
        raise Outcome(
            Verdict.REJECT,
            "forbidden_file",
            "compiled bytecode (Python may load it instead of its source; commit sources"
            " only): " + ", ".join(bytecode[:5]),
        )
    hooks = _startup_hooks(files)
    if hooks:
        raise Outcome(
            Verdict.REJECT, "forbidden_file", "import hook files: " + ", ".join(hooks[:5])
        )
    clashes = _one_name_twice(files)
    if clashes:
        raise Outcome(
            Verdict.REJECT,
            "shadowing",
            "one module name, two files (Python imports only one of them): "
            + "; ".join(clashes[:5]),
        )
    shadow_names = startup_path_names() - set(own_packages)
    shadowing = []
    for entry in sorted(tree.iterdir()):
        stem = entry.name if entry.is_dir() else module_name(entry.name)
        if stem and stem in shadow_names:
            shadowing.append(entry.name)
    if shadowing:
        raise Outcome(
            Verdict.REJECT,
            "shadowing",
            "files shadow standard or installed modules: " + ", ".join(shadowing[:5]),
        )
    got = zone_hashes(tree, frozen)
    changed = sorted(p for p in reference_hashes if p in got and got[p] != reference_hashes[p])
    removed = sorted(p for p in reference_hashes if p not in got)
    added = sorted(p for p in got if p not in reference_hashes)
    if changed or removed or added:
        parts = [
            f"{label}: {', '.join(paths[:5])}"
            for label, paths in (("changed", changed), ("removed", removed), ("added", added))
            if paths
        ]
        raise Outcome(Verdict.REJECT, "frozen_zone", "frozen zone altered; " + "; ".join(parts))
