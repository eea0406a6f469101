"""The task's move library (``moves.json``): moves with their requirements, sweeps, and how the
critic checks and probes a tree of this task (``docs/scripted-agent.md``)."""

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


@dataclass(frozen=True)
class ProbeSpec:
    """A decode longer than any the judge runs: one prompt per length, ``steps`` new tokens.

    The prompts are fixed token sequences below the card's vocabulary (no randomness: every
    critic of every run probes the same).
    """

    prompt_lens: tuple[int, ...]
    steps: int

    def prompts(self, vocab: int) -> list[list[int]]:
        steps = ((37, 11), (53, 5), (61, 3), (71, 7), (29, 13), (43, 17), (59, 19), (67, 23))
        return [
            [(a * i + b) % vocab for i in range(length)]
            for (a, b), length in zip(steps, self.prompt_lens, strict=False)
        ]


@dataclass
class Library:
    """The task's moves and sweeps, read from ``moves.json``; ``check`` (argv, ``{python}``
    and ``{build}`` filled in by the agent) is the task's quick local check the critic runs on
    a PASS; ``probe`` its long decode (None: the critic does not probe)."""

    moves: dict[str, MoveSpec]
    sweeps: list[SweepSpec]
    check: tuple[str, ...] | None = None
    probe: ProbeSpec | None = None

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
        probe = data.get("probe")
        if probe and not 0 < len(probe["prompt_lens"]) <= 8:
            raise ValueError("moves.json: a probe has one to eight prompts")
        return cls(
            moves,
            sweeps,
            check=tuple(data["check"]) if data.get("check") else None,
            probe=(
                ProbeSpec(tuple(int(n) for n in probe["prompt_lens"]), int(probe["steps"]))
                if probe
                else None
            ),
        )

    def ordered(self, names: list[str]) -> list[MoveSpec]:
        """Moves by how much they build on, then in library order: first steps first."""
        return sorted((self.moves[n] for n in names), key=lambda m: (m.depth, m.index))
