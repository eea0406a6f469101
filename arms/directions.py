"""Which direction each seat of an arm starts on: the task's, not the arm's.

A task lists the lines of work its workers may start on (``directions: [{name, text}]`` in its
``task.yaml``). An arm with ``task_directions: true`` (the swarm) hands them to its workers in
order, skipping those a seat names itself; a worker left over starts on none, and so does every
worker of an arm without it (solo). A critic never has one. A seat that names a direction the
task does not have is refused before anything starts (:func:`direction_problems`).

Real agents' prompts carry the direction's text (:func:`direction_texts`); the scripted agent
gets its name (and reads the text from its task card).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def task_direction_names(task: Any) -> list[str]:
    """The task's directions' names, in its order."""
    return [str(d.name) for d in (task.get("directions") or [])]


def direction_texts(task: Any) -> dict[str, str]:
    """Name -> what the direction means (its name when the task gives no text)."""
    return {str(d.name): str(d.get("text") or d.name) for d in (task.get("directions") or [])}


def seat_directions(task: Any, arm: Any) -> list[str | None]:
    """The starting direction of each of `arm`'s seats, in the seats' order.

    Args:
        task: The task's config (``cfg.task``): its ``directions``.
        arm: One arm's config (``cfg.arms.<name>``): its ``seats`` and ``task_directions``.

    Returns:
        A direction name or None per seat.
    """
    seats = list(arm.seats)
    named = {str(s.direction) for s in seats if s.direction}
    free: Iterable[str] = (
        [n for n in task_direction_names(task) if n not in named]
        if arm.get("task_directions")
        else []
    )
    left = iter(free)
    out: list[str | None] = []
    for seat in seats:
        if seat.direction:
            out.append(str(seat.direction))
        elif seat.role == "worker":
            out.append(next(left, None))
        else:
            out.append(None)
    return out


def direction_problems(cfg: Any) -> list[str]:
    """Seats naming a direction their task does not have, one line each."""
    known = task_direction_names(cfg.task)
    problems = []
    for key, arm in (cfg.get("arms") or {}).items():
        for seat in arm.seats:
            if seat.direction and str(seat.direction) not in known:
                has = f"directions {', '.join(known)}" if known else "no directions"
                problems.append(
                    f"arms.{key}.seats.{seat.name}.direction={seat.direction}: task "
                    f"{cfg.task.name} has {has} (task.yaml `directions:`)"
                )
    return problems
