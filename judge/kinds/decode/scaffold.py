"""``python -m judge new-task DIR --kind decode``: a working decode task folder to start from.

It holds a frozen harness (``harness/serve.py``, the protocol server) for a small numpy engine,
the hidden-input generator, ``task.yaml`` and a README for agents. Its preflight passes as
written on the kind's generated mutants alone, and its baseline has an obvious, honest speed-up
(decode the batch's rows together). Nothing of it imports swarmlab.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

FILES = Path(__file__).with_name("scaffold_files")


def task_name_for(folder: Path) -> str:
    """A task name from a folder's name: letters, digits and ``_ . -`` only."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", folder.resolve().name).strip("._-")
    return name or "task"


def write_decode_task(target: Path, name: str | None = None) -> Path:
    """Write the scaffold into ``target`` (created; it must not hold anything yet).

    Returns:
        The task folder, absolute.

    Raises:
        FileExistsError: ``target`` exists and is not an empty folder.
    """
    target = target.resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} exists and is not empty: name a new or empty folder")
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        FILES, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    task_yaml = target / "task.yaml"
    text = task_yaml.read_text().replace("name: NAME", f"name: {name or task_name_for(target)}")
    task_yaml.write_text(text)
    return target
