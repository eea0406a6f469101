"""Task kinds: each a module behind :class:`TaskKind`, registered by name (``decode``, …)."""

from judge.kinds.base import Evaluator, Metric, TaskKind
from judge.kinds.registry import DEFAULT_KIND, get_kind, kind_names, kind_of, run_metric, task_kind

__all__ = [
    "DEFAULT_KIND",
    "Evaluator",
    "Metric",
    "TaskKind",
    "get_kind",
    "kind_names",
    "kind_of",
    "run_metric",
    "task_kind",
]
