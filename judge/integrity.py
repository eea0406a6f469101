"""Integrity checks: the frozen zone, import hooks, and shadowing modules (all REJECT).

The frozen zone's hashes come from the judge's own copy of the task, never the candidate's.
"""

from __future__ import annotations

import hashlib
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

from judge.verdict import Outcome, Verdict

FORBIDDEN_NAMES = frozenset({"sitecustomize.py", "usercustomize.py"})


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


@cache
def installed_top_level_names() -> frozenset[str]:
    """Names a file at the candidate's root could shadow: the standard library and every
    top-level module installed in the interpreter the sandbox runs."""
    names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    names.update(metadata.packages_distributions())
    return frozenset(names)


def check_integrity(
    tree: Path, frozen: list[str], reference_hashes: dict[str, str], own_packages: list[str]
) -> None:
    """Raise a REJECT Outcome if the candidate tree breaks a rule; return None otherwise."""
    files = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    hooks = [f for f in files if f.endswith(".pth") or f.rsplit("/", 1)[-1] in FORBIDDEN_NAMES]
    if hooks:
        raise Outcome(
            Verdict.REJECT, "forbidden_file", "import hook files: " + ", ".join(hooks[:5])
        )
    shadow_names = installed_top_level_names() - set(own_packages)
    shadowing = []
    for entry in sorted(tree.iterdir()):
        stem = entry.name[:-3] if entry.name.endswith(".py") else entry.name
        if (entry.is_dir() or entry.name.endswith(".py")) and stem in shadow_names:
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
