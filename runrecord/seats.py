"""The seats of a run as its record says: the run's metadata and its saved configuration."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runrecord.names import agent_kind_label


@dataclass(frozen=True)
class SeatRecord:
    """One seat of an arm as the run recorded it (not the workspace's live seat)."""

    arm: str
    agent: str
    role: str
    direction: str | None
    agent_kind: str
    scripted: bool


def run_config(run_dir: Path, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The run's configuration: the copy in its metadata, else ``.hydra/config.yaml``."""
    config = meta.get("config")
    if isinstance(config, dict):
        return config
    saved = Path(run_dir) / ".hydra" / "config.yaml"
    if saved.is_file():
        loaded = yaml.safe_load(saved.read_text())
        return loaded if isinstance(loaded, dict) else {}
    return {}


def seat_records(
    meta: Mapping[str, Any], config: Mapping[str, Any], kind: str, scripted: bool
) -> list[SeatRecord]:
    """Every seat of every arm, in the order the metadata lists them.

    Args:
        meta: The run's metadata (``seats``: per arm, ``[name, role, direction]`` rows).
        config: The run's configuration (a seat may name its own agent kind there).
        kind: The run's agent kind, for seats that name none.
        scripted: Whether the run's agents are scripted, for seats that do not say.
    """
    seats: list[SeatRecord] = []
    arms_cfg = config.get("arms") or {}
    for arm, rows in (meta.get("seats") or {}).items():
        cfg_seats = {s.get("name"): s for s in (arms_cfg.get(arm) or {}).get("seats") or []}
        for row in rows:
            name, role, direction = [*row, None, None, None][:3]
            own = cfg_seats.get(name) or {}
            # A seat may name its own agent kind (mixed arms); otherwise the run's applies.
            seat_kind = str(own.get("kind") or own.get("agent") or kind)
            seat_scripted = bool(own.get("scripted", scripted))
            seats.append(
                SeatRecord(
                    arm=arm,
                    agent=str(name),
                    role=str(role or "worker"),
                    direction=direction,
                    agent_kind=agent_kind_label(seat_kind, seat_scripted),
                    scripted=seat_scripted,
                )
            )
    return seats


def arm_agent_kind(seats: Iterable[SeatRecord], run_label: str) -> str:
    """The ``agent_kind`` an arm shows: its seats' labels joined, else the run's label."""
    return ", ".join(sorted({s.agent_kind for s in seats})) or run_label


def arm_scripted(seats: Iterable[SeatRecord], run_scripted: bool) -> bool:
    """Whether every seat of an arm is scripted (the run's flag for an arm without seats)."""
    seats = list(seats)
    return all(s.scripted for s in seats) if seats else run_scripted
