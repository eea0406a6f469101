"""The name-keyed registry of task kinds, imported lazily (``"module"`` per name)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from judge.kinds.base import TaskKind

# Bundled kinds: imported on first use, so a kind's heavy imports cost nothing until asked for.
_BUNDLED = {"decode": "judge.kinds.decode"}
_KINDS: dict[str, type] = {}
T = TypeVar("T", bound=type)


def task_kind(name: str) -> Callable[[T], T]:
    """Class decorator: register a task kind under ``name``."""

    def register(cls: T) -> T:
        _KINDS[name] = cls
        return cls

    return register


def kind_names() -> list[str]:
    """Every kind that can be asked for by name."""
    return sorted({*_BUNDLED, *_KINDS})


def get_kind(name: str) -> TaskKind:
    """The kind registered as ``name``.

    Raises:
        KeyError: no such kind (the message lists the known ones).
    """
    if name not in _KINDS and name in _BUNDLED:
        importlib.import_module(_BUNDLED[name])
    if name not in _KINDS:
        raise KeyError(f"unknown task kind {name!r}: known kinds are {', '.join(kind_names())}")
    return _KINDS[name]()
