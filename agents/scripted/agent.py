"""What workers and critics share: notes, tools, the clone, the deadline."""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

from agents.scripted.card import TaskCard
from agents.scripted.git import Git
from agents.scripted.library import Library
from agents.scripted.notes import Notes, State
from agents.scripted.tools import Tools
from agents.scripted.util import env_float, env_path, short

ANY = ("any", "none", "null", "None", "")


class Agent:
    """What workers and critics share: notes, tools, the clone, the deadline."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.agent = os.environ.get("SWARMLAB_AGENT") or "agent"
        self.role = args.role
        self.direction = "any" if args.direction in ANY else args.direction
        self.seed = args.seed
        self.deadline = args.deadline
        self.card = TaskCard.from_environ()
        self.library = Library.load(Path(args.moves))
        self.repo = env_path("REPO", "/work/repo")
        self.submissions = env_path("SUBMISSIONS", "/work/submissions.git")
        self.outbox = env_path("OUTBOX", "/work/outbox")
        self.inbox = env_path("INBOX", "/work/inbox")
        self.notes = Notes(env_path("NOTES", "/work/notes"))
        self.git = Git(self.repo, self.agent)
        self.tools = Tools()
        self.poll = env_float("SWARMLAB_SCRIPTED_POLL_S", 5.0)
        max_actions = os.environ.get("SWARMLAB_SCRIPTED_MAX_ACTIONS")
        self.max_actions = int(max_actions) if max_actions else None
        self.keep_going = os.environ.get("SWARMLAB_KEEP_GOING", "") not in ("", "0")
        state = self.notes.load()
        self.resumed = state is not None
        self.state = state or State(self.agent, self.role, self.direction, self.seed)
        self.state.starts += 1
        self.rng = random.Random(f"{self.seed}:{self.agent}")
        if self.state.rng is not None:
            # Resume the same stream: a restart makes the choices the run would have made.
            version, internal, gauss = self.state.rng
            self.rng.setstate((version, tuple(internal), gauss))

    def save(self) -> None:
        version, internal, gauss = self.rng.getstate()
        self.state.rng = [version, list(internal), gauss]
        self.notes.save(self.state)

    def time_left(self) -> float:
        return self.deadline - time.time()

    def out_of_actions(self) -> bool:
        return self.max_actions is not None and self.state.actions >= self.max_actions

    def announce(self) -> None:
        """The first message says what this agent is; a restart says where it resumes."""
        what = f"direction {self.direction}" if self.role == "worker" else "reviews PASSes"
        if not self.resumed:
            self.tools.post(
                "note",
                f"scripted: no model. {self.agent} is a scripted {self.role} ({what}, seed "
                f"{self.seed}): it plays moves from the task's move library through the same "
                "tools as any agent.",
                {"scripted": "true", "role": self.role, "direction": self.direction},
            )
            self.notes.log(f"start: scripted {self.role}, {what}, seed {self.seed}")
        else:
            self.tools.post(
                "note",
                f"scripted: no model. {self.agent} restarted"
                + (" (keep going)" if self.keep_going else "")
                + f": continuing from its notes ({len(self.state.attempts)} attempts so far, "
                f"base {short(self.state.base)} at {self.state.base_x:.2f}x).",
                {"scripted": "true", "restart": str(self.state.starts - 1)},
            )
            self.notes.log(f"restart #{self.state.starts - 1}: resuming from notes")

    def read_board(self) -> list[dict[str, Any]]:
        rows = self.tools.read(self.state.board_seen)
        if rows:
            self.state.board_seen = max(r["id"] for r in rows)
        return rows

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, self.time_left())))
