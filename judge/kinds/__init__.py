"""Task kinds: each a module behind :class:`TaskKind`, registered by name (``decode``, …)."""

from judge.kinds.base import Evaluator, Metric, TaskKind
from judge.kinds.registry import get_kind, kind_names, run_metric, task_kind

__all__ = ["Evaluator", "Metric", "TaskKind", "get_kind", "kind_names", "run_metric", "task_kind"]
