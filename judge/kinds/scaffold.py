"""Writing a kind's scaffold (``python -m judge new-task DIR --kind NAME``): a folder of files
the kind ships (``judge/kinds/<name>/scaffold_files``) copied into a new task folder, its
``task.yaml``'s ``name: NAME`` line set. Each kind's ``scaffold`` method calls this."""

from __future__ import annotations

import re
import shutil
from pathlib import Path


def task_name_for(folder: Path) -> str:
    """A task name from a folder's name: letters, digits and ``_ . -`` only."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", folder.resolve().name).strip("._-")
    return name or "task"


def write_scaffold(files: Path, target: Path, name: str | None = None) -> Path:
    """Copy the scaffold ``files`` into ``target`` (created; it must not hold anything yet)
    and name the task ``name`` (default: from the folder's name).

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
        files, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    task_yaml = target / "task.yaml"
    text = task_yaml.read_text().replace("name: NAME", f"name: {name or task_name_for(target)}")
    task_yaml.write_text(text)
    return target
