"""The task's move library (``moves.json``): moves with their requirements, and sweeps."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MoveSpec:
    """One move of the library (``kind`` is never read by the agent: it is the author's)."""

    name: str
    direction: str
    requires: tuple[str, ...]
    patch: Path
    why: str
    depth: int  # how many moves it builds on, transitively
    index: int  # its place in the library


@dataclass(frozen=True)
class SweepSpec:
    """A parameter of the engine: replace ``old`` by ``new.format(value=v)`` in ``file``."""

    name: str
    file: str
    old: str
    new: str
    values: tuple[int, ...]
    after: tuple[str, ...]
    why: str


@dataclass
class Library:
    """The task's moves and sweeps, read from ``moves.json``."""

    moves: dict[str, MoveSpec]
    sweeps: list[SweepSpec]

    @classmethod
    def load(cls, folder: Path) -> Library:
        data = json.loads((folder / "moves.json").read_text())
        raw = {m["name"]: m for m in data["moves"]}

        def depth(name: str, seen: tuple[str, ...] = ()) -> int:
            if name in seen:
                raise ValueError(f"moves.json: {name} requires itself")
            needs = raw[name]["requires"]
            return 0 if not needs else 1 + max(depth(n, (*seen, name)) for n in needs)

        moves = {
            m["name"]: MoveSpec(
                name=m["name"],
                direction=m["direction"],
                requires=tuple(m["requires"]),
                patch=folder / m["patch"],
                why=m["why"],
                depth=depth(m["name"]),
                index=i,
            )
            for i, m in enumerate(data["moves"])
        }
        sweeps = [
            SweepSpec(
                name=s["name"],
                file=s["file"],
                old=s["old"],
                new=s["new"],
                values=tuple(s["values"]),
                after=tuple(s.get("after", ())),
                why=s["why"],
            )
            for s in data.get("sweeps", [])
        ]
        return cls(moves, sweeps)

    def ordered(self, names: list[str]) -> list[MoveSpec]:
        """Moves by how much they build on, then in library order: first steps first."""
        return sorted((self.moves[n] for n in names), key=lambda m: (m.depth, m.index))
