"""Bundled tasks and the schema every task config follows.

A task is a starting repository (the template, which becomes each arm's ``master``), the
judge's cases (hidden-input shapes), its frozen zone, the engine's ``serve`` command, a spec,
and a list of mutants with the verdict the judge must give each.
"""

from tasks.schema import (
    AlternatingConfig,
    B1Config,
    CaseConfig,
    DirectionConfig,
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
    "SpecConfig",
    "TaskConfig",
    "TimingConfig",
    "task_root",
]
