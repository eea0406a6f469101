"""Bundled tasks, the schema every task config follows, and the loader of task folders.

A task is a folder anywhere holding ``task.yaml`` (docs/tasks.md): a starting repository (the
template, which becomes each arm's ``master``), the judge's cases (hidden-input shapes) and
input generator, its frozen zone, the engine's ``serve`` command, a spec, and its mutants.
``task=NAME`` names a bundled one (``tasks/NAME/``), ``task=PATH`` any folder (tasks/folder.py).
"""

from tasks.folder import (
    TaskFolderError,
    bundled_task_names,
    load_task_callable,
    register_task_folders,
    resolve_task_overrides,
)
from tasks.schema import (
    AlternatingConfig,
    B1Config,
    CaseConfig,
    DirectionConfig,
    PromptTaskConfig,
    SpecConfig,
    TaskConfig,
    TimingConfig,
    task_root,
)

__all__ = [
    "AlternatingConfig",
    "B1Config",
    "CaseConfig",
    "DirectionConfig",
    "PromptTaskConfig",
    "SpecConfig",
    "TaskConfig",
    "TaskFolderError",
    "TimingConfig",
    "bundled_task_names",
    "load_task_callable",
    "register_task_folders",
    "resolve_task_overrides",
    "task_root",
]
