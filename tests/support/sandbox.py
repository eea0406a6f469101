"""Trees of a few scripts for the judge's sandbox tests."""

from __future__ import annotations

from pathlib import Path


def script_tree(folder: Path, files: dict[str, str]) -> Path:
    """``folder/tree`` holding ``files`` (name: text), readable by the sandbox's user (it runs
    as nobody, and a test's tmp folders are the test user's alone)."""
    tree = folder / "tree"
    tree.mkdir()
    for name, text in files.items():
        (tree / name).write_text(text)
    for p in [tree, *tree.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return tree
