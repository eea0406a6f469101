"""What a kind whose hidden inputs are prompts has in common: :class:`PromptKind`.

A prompt kind's task (``tasks.schema.PromptTaskConfig``) names an input generator
(``inputs``: ``f(seed, batch, prompt_len, vocab)``) and the sets it draws (``cases``,
``alternating``, ``timing``, ``b1``); set-up (``judge.private.setup``) stores the correctness
sets drawn by it and the baseline's answers to them. The decode and server kinds build on this
class; a kind whose inputs are no prompts (the kernel kind) writes the same three methods its
own way (``judge.kinds.base.TaskKind``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from tasks.schema import PromptTaskConfig, task_root

if TYPE_CHECKING:
    from judge.private import InputSet


class PromptKind:
    """The prompt kinds' task node, input check, stored sets and generator file."""

    task_node: type = PromptTaskConfig
    # Whether the task's generator may yield text prompts (str), sent as they are.
    text_prompts: bool = False

    def check_inputs(self, task: DictConfig) -> str | None:
        """Why the task's prompt generator is unusable (one line), tried on a tiny draw, or
        None (``judge.private.check_prompt_inputs``)."""
        from judge.private import check_prompt_inputs

        return check_prompt_inputs(task)

    def stored_sets(self, cfg: DictConfig, seed: int) -> list[InputSet]:
        """The prompt sets set-up stores, drawn from ``seed`` (``judge.private.plan_inputs``).

        Raises:
            judge.private.TaskInputError: the generator failed or answered the wrong shape.
        """
        from judge.private import plan_inputs

        return plan_inputs(cfg, seed)

    def inputs_files(self, task: DictConfig) -> list[Path]:
        """The task's file holding its generator: its bytes join the task's fingerprint (a
        generator of a module name, from a config saved before task folders, has none)."""
        path = task_root(task) / str(task.inputs).partition(":")[0]
        return [path] if path.suffix == ".py" and path.is_file() else []
