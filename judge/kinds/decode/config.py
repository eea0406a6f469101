"""The ``decode`` kind's node of a task config: the prompt-set fields (``vocab``, ``cases``, the
batch-size transitions, timing, B=1), nothing of its own besides."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.schema import PromptTaskConfig


@dataclass
class DecodeTaskConfig(PromptTaskConfig):
    """A ``decode`` task: a prompt task whose engine speaks the JSON-lines protocol."""
