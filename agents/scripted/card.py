"""The task card: everything the scripted agent knows about its task, and nothing more.

The runner writes it from the task's config (:func:`make_card`) into the agent's environment
(``SWARMLAB_TASK_CARD``, JSON); the agent reads only that (:meth:`TaskCard.from_environ`) and
the move library its command names (``--moves``). No task is named in the agent's code: the
frozen zone, the build and serve commands, the vocabulary and the directions all come from here.

``{python}`` in ``build``/``serve`` is resolved by the runner (the agent's interpreter is the
host's, mounted at the same path); ``{build}`` is left for the agent to fill with the writable,
executable folder it builds each tree into (under ``$SWARMLAB_BUILD``: one subfolder per tree,
so the critic can build ``master`` and a candidate side by side).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = "SWARMLAB_TASK_CARD"
VERSION = 1


@dataclass(frozen=True)
class Direction:
    """A line of work a worker starts on: its name (the seat's) and what it means."""

    name: str
    text: str = ""


@dataclass(frozen=True)
class TaskCard:
    """What the scripted agent may know of its task (see the module's docstring)."""

    name: str
    frozen: tuple[str, ...] = ()
    package_names: tuple[str, ...] = ()
    serve: tuple[str, ...] = ()
    build: tuple[str, ...] | None = None
    vocab: int = 0
    directions: tuple[Direction, ...] = field(default_factory=tuple)
    # The unit of the judge's ``score`` for this task, for the agent's messages.
    unit: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskCard:
        """A card from its JSON form (unknown keys are ignored: a newer runner's card)."""
        if data.get("version") != VERSION:
            raise ValueError(f"task card version {data.get('version')!r}, expected {VERSION}")
        build = data.get("build")
        return cls(
            name=str(data["name"]),
            frozen=tuple(data.get("frozen") or ()),
            package_names=tuple(data.get("package_names") or ()),
            serve=tuple(data.get("serve") or ()),
            build=tuple(build) if build else None,
            vocab=int(data.get("vocab") or 0),
            directions=tuple(
                Direction(str(d["name"]), str(d.get("text") or ""))
                for d in data.get("directions") or ()
            ),
            unit=str((data.get("metric") or {}).get("unit") or ""),
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> TaskCard:
        """The card the runner put in ``SWARMLAB_TASK_CARD``.

        Raises:
            ValueError: the variable is missing or not a card.
        """
        text = (os.environ if environ is None else environ).get(ENV)
        if not text:
            raise ValueError(f"${ENV} is not set: the runner hands the scripted agent its task")
        return cls.from_json(json.loads(text))

    def direction_names(self) -> list[str]:
        return [d.name for d in self.directions]

    def is_frozen(self, path: str) -> bool:
        """Whether a path of the tree is in the frozen zone, as the judge reads it
        (``judge.integrity.in_zone``): ``dir/**`` covers a folder, anything else names a file."""
        for pattern in self.frozen:
            if pattern.endswith("/**") and path.startswith(pattern[:-2]):
                return True
            if path == pattern:
                return True
        return False

    def argv(self, argv: tuple[str, ...], build: Path) -> list[str]:
        """A command of the card with ``{build}`` filled in."""
        return [part.replace("{build}", str(build)) for part in argv]


def make_card(
    task: Mapping[str, Any], python: str, metric: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The card of a task, from its config as plain data (``OmegaConf.to_container``).

    Args:
        task: The task's config (``cfg.task``).
        python: The interpreter the agent's container runs (``{python}`` in the commands).
        metric: The task's metric (``judge.kinds`` ``Metric.to_dict()``): its name and unit.

    Returns:
        The card's JSON form (what ``SWARMLAB_TASK_CARD`` holds).
    """

    def resolve(argv: Any) -> list[str] | None:
        return [str(p).replace("{python}", python) for p in argv] if argv else None

    return {
        "version": VERSION,
        "name": task["name"],
        "frozen": list(task.get("frozen") or []),
        "package_names": list(task.get("package_names") or []),
        "serve": resolve(task.get("serve")) or [],
        "build": resolve(task.get("build")),
        "vocab": int(task.get("vocab") or 0),
        "directions": [
            {"name": d["name"], "text": d.get("text") or ""} for d in task.get("directions") or []
        ],
        "metric": {k: metric[k] for k in ("name", "unit") if k in metric} if metric else {},
    }
