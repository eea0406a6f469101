"""The name-keyed registry of task kinds: a module of ``judge.kinds`` (flat or a subpackage)
registers its kind with ``@task_kind("name")`` and is found there by name, imported on first use
(a kind's heavy imports cost nothing until it is asked for); see :class:`registry.Registry`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from omegaconf import OmegaConf

from judge.kinds.base import Metric, TaskKind
from registry import Registry

# Kinds of installed distributions: the entry point group ``swarmlab.task_kinds``.
KINDS: Registry[type] = Registry("task kind", "judge.kinds", "task_kind", "swarmlab.task_kinds")
# The kind of a task config that names none: every task saved before kinds existed was a decode
# task (old run records, old saved judge configs), and ``new-task`` scaffolds it by default.
# The one place outside ``judge/kinds/decode/`` that names the kind.
DEFAULT_KIND = "decode"
T = TypeVar("T", bound=type)


def task_kind(name: str) -> Callable[[T], T]:
    """Class decorator: register a task kind under ``name``."""

    def register(cls: T) -> T:
        return KINDS.register(name, cls)

    return register


def kind_names() -> list[str]:
    """Every kind that can be asked for by name."""
    return KINDS.names()


def get_kind(name: str) -> TaskKind:
    """The kind registered as ``name``.

    Raises:
        KeyError: no such kind (the message lists the known ones).
    """
    cls = KINDS.find(name)
    if cls is None:
        raise KeyError(f"unknown task kind {name!r}: known kinds are {', '.join(kind_names())}")
    return cls()


def kind_of(task: Mapping[str, Any]) -> TaskKind:
    """The kind of a task config (:data:`DEFAULT_KIND` for one saved before kinds existed).

    Raises:
        KeyError: the task names no known kind.
    """
    return get_kind(str(task.get("kind") or DEFAULT_KIND))


def run_metric(meta: Mapping[str, Any]) -> Metric:
    """The metric a run recorded in its meta (``"metric"``, written by the runner).

    The one reading of records made before kinds owned their metric: they have none, and every
    such run was a decode run, so they read as the decode kind's metric for the recorded task.
    """
    recorded = meta.get("metric")
    if isinstance(recorded, Mapping) and recorded.get("name"):
        return Metric.from_dict(recorded)
    task = (meta.get("config") or {}).get("task") or {}
    return kind_of(task).metric(OmegaConf.create(task))
