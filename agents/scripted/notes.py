"""What a scripted agent remembers across restarts: its attempts, PASSes and notes."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.scripted.util import say

STATE_FILE = "scripted-state.json"
NOTES_FILE = "NOTES.md"


@dataclass
class Attempt:
    """One thing a worker tried on a base: a move, a sweep value or a re-measure."""

    action: str  # "move:NAME", "sweep:NAME=VALUE" (or "rerun", in notes of older versions)
    base: str
    at: float
    # PASS | WRONG | REJECT | ERROR | conflict | unmet | refused | duplicate, or while no
    # verdict is known: submitting (recorded, the request may or may not have been made) |
    # timeout (submitted, its number known, no verdict yet)
    outcome: str
    commit: str | None = None
    submission: int | None = None
    x: float | None = None
    score: float | None = None  # the judge's metric (the task card's unit)
    reason: str | None = None
    kept: bool = False
    tree: str | None = None  # the commit's tree: what the judge scores


@dataclass
class Pass:
    """A PASS this agent knows of (its own or another's): enough to relay onto it."""

    author: str
    commit: str
    submission: int | None
    x: float
    moves: list[str]


@dataclass
class State:
    """What a scripted agent remembers across restarts (its notes)."""

    agent: str
    role: str
    direction: str
    seed: int
    rng: list[Any] | None = None
    base: str | None = None
    base_x: float = 1.0
    base_from: str = "master"
    master: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    passes: list[Pass] = field(default_factory=list)  # own PASSes
    board_seen: int = 0
    others: list[Pass] = field(default_factory=list)  # others' PASSes seen on the board
    considered: list[str] = field(default_factory=list)  # relay candidates already drawn for
    relays: list[dict[str, Any]] = field(default_factory=list)
    flagged_commits: list[str] = field(default_factory=list)
    flagged_moves: list[str] = field(default_factory=list)
    reviewed: list[str] = field(default_factory=list)
    probes: dict[str, str] = field(default_factory=dict)  # critic: commit -> probe outcome
    pending_reviews: list[dict[str, Any]] = field(default_factory=list)
    trees: dict[str, dict[str, Any]] = field(default_factory=dict)  # critic: tree -> review
    unmet_posted: list[str] = field(default_factory=list)  # "moves|missing" already posted
    idle_since: float | None = None
    others_judged: list[str] = field(default_factory=list)  # commits others posted a result for
    waiting_since: float | None = None  # waiting for a teammate's submission (``Worker.awaited``)
    waits_posted: list[str] = field(default_factory=list)  # "author/number" waits announced
    actions: int = 0
    starts: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> State:
        data = dict(data)
        fields = set(Attempt.__dataclass_fields__)
        data["attempts"] = [
            Attempt(**{k: v for k, v in a.items() if k in fields}) for a in data.get("attempts", [])
        ]
        data["passes"] = [Pass(**p) for p in data.get("passes", [])]
        data["others"] = [Pass(**p) for p in data.get("others", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


class Notes:
    """``NOTES.md`` (for people) and ``scripted-state.json`` (to resume) in the notes folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def load(self) -> State | None:
        try:
            return State.from_json(json.loads((self.folder / STATE_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, state: State) -> None:
        """Atomically and durably: a submission is recorded here before it is made."""
        tmp = self.folder / (STATE_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(asdict(state), indent=1, default=list))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.folder / STATE_FILE)

    def log(self, line: str) -> None:
        with open(self.folder / NOTES_FILE, "a", encoding="utf-8") as handle:
            handle.write(f"- {time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
        say(line)
