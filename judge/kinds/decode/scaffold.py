"""``python -m judge new-task DIR --kind decode``: a working decode task folder to start from.

It holds a frozen harness (``harness/serve.py``, the protocol server) for a small numpy engine,
the hidden-input generator, ``task.yaml`` and a README for agents. Its preflight passes as
written on the kind's generated mutants alone, and its baseline has an obvious, honest speed-up
(decode the batch's rows together). Nothing of it imports swarmlab.
"""

from __future__ import annotations

from pathlib import Path

from judge.kinds.scaffold import task_name_for, write_scaffold

FILES = Path(__file__).with_name("scaffold_files")

__all__ = ["FILES", "task_name_for", "write_decode_task"]


def write_decode_task(target: Path, name: str | None = None) -> Path:
    """Write the scaffold into ``target`` (created; it must not hold anything yet).

    Returns:
        The task folder, absolute.

    Raises:
        FileExistsError: ``target`` exists and is not an empty folder.
    """
    return write_scaffold(FILES, target, name)
