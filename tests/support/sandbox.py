"""Trees of a few scripts for the judge's sandbox tests, and scripts run inside their containers."""

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


def kill_script(marker: str) -> str:
    """Python source that SIGKILLs every process of its container whose command line holds
    ``marker`` (itself excepted), as a container's removal would kill it."""
    return f"""
import os, signal
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            argv = open(f"/proc/{{pid}}/cmdline", "rb").read()
        except OSError:
            continue
        if {marker.encode()!r} in argv:
            os.kill(int(pid), signal.SIGKILL)
"""
