"""The decode and server tasks' fingerprints and settings hashes, pinned: moving a field between
the task schema's nodes (``tasks/schema.py``, the kinds' ``task_node``) must not move a bundled
task's judge folder or orphan a run's queued jobs.

The interpreter's and numpy's versions join the fingerprint; they are fixed here so the pin holds
on any machine. A change to one of these tasks' own files (template, ``task.yaml``, generator)
or to the judge's defaults changes the values on purpose: then recompute them and say why in the
commit.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from judge import compose_judge_config, private
from judge.settings import settings_hash

PINNED = {
    "decode_cpu": (
        "5c7c5607cabede2ee8e70c0e3a40513c845573c86fea79f682971d19997aaf36",
        "7c488d40b438c535",
    ),
    "serve_cpu": (
        "b6b66ffc46242005eacf43c09a78f35f7e2ae29881da6369360722b8f72163a7",
        "c774f689cc9ef752",
    ),
}


@pytest.mark.parametrize("task", sorted(PINNED))
def test_the_bundled_prompt_tasks_keep_their_fingerprint(task, tmp_path, monkeypatch) -> None:
    cfg = compose_judge_config([f"task={task}", f"judge.private_dir={tmp_path / 'judge'}"])
    monkeypatch.setattr(sys, "version", "PINNED")
    monkeypatch.setattr(np, "__version__", "PINNED")
    assert (private.task_fingerprint(cfg), settings_hash(cfg)) == PINNED[task]
