"""The scripted agent: a program, no model, that plays a worker or a critic through the same
tools a real agent uses (``submit``, ``board``, ``verdicts``; ``docs/agent-workspace.md``).

    python -I agents/scripted.py --role worker|critic --direction D --seed N --moves DIR
                                 [--deadline EPOCH]

Standard library and ``git`` only: it runs inside the agent's container, with the tools on
``PATH`` and the task's move library (``tasks/<task>/moves/``: ``moves.json`` and the patches)
mounted read-only at ``--moves``.

A **worker** loops until the deadline, on a branch ``scripted`` of its clone. It reads the
board; when another agent posted a PASS better than its own base and that commit holds a move
its next moves require (or a seeded draw says so), it fetches that commit from
``/work/submissions.git`` (``refs/submissions/<author>/<n>``), resets onto it and posts a
``relay``. It then picks the next untried move of its direction (once those run out, of any
direction, as an integrator would; first steps first) whose requirements its base holds,
applies the patch with ``git apply --3way``, commits (a ``Move:`` trailer names the move),
runs ``submit --wait`` and posts the ``result``. A conflict or an unmet requirement is a
``dead_end`` pinned to the base commit and the move, and so is a PASS no faster than its base.
The best PASS becomes the base. A critic's ``review`` that finds a bug in a commit makes it drop
any base built on that commit (or holding the move the critic blames) and never relay onto one.
Out of moves, it sweeps the library's parameters on its best engine, retries moves that did not
apply on an older base, then watches the board for something to build on; only when nothing at
all is left does it exit 0 (the supervisor restarts it with ``SWARMLAB_KEEP_GOING=1``; it then
continues from its notes and the board, never starting over).

**Never the same tree twice.** A worker never submits a tree (the code, whatever the commit)
that it or another agent of its arm already submitted: the arm's submissions are in
``/work/submissions.git``, its own in its notes (a tree whose only verdict was ERROR, the
judge's fault, may go again). Each submission is written to its notes as ``submitting`` (commit
and tree) *before* the request is made, so a kill at any point is settled on restart: a request
still in the outbox is waited for, the gateway's reply or its ``refs/submissions/<agent>/<n>``
gives the number, and only a request that never reached the gateway is forgotten (then tried
again). It does not re-measure its base: the runner re-judges every arm's best itself.

Reaching the target is not a reason to stop. Choices are deterministic given ``--seed``,
the agent's name and what it reads (``random.Random(f"{seed}:{agent}")``, whose state is saved
in its notes).

A **critic** never submits. For each new PASS a worker posts (the fastest first: it is the one
others will build on), it fetches the commit, runs the task's local check (``python -I -B
harness/check.py``) from a scratch copy under ``/tmp`` with a bounded timeout, probes a decode
longer than any the judge runs (past the KV cache's first size) and compares it with
``master``'s output, inspects the diff for rule-sensitive patterns (state kept across
``reset()``, caches keyed on prompts, module-level state, threads, processes, network, files
written, the clock, frozen-zone edits, top-level modules), and posts a ``review``: ``ok``,
``concern`` or ``bug``; for a bug whose base passes the probe, it names the move to blame. A
commit with the same tree as one already reviewed gets the same finding.

Everything it does is printed on stdout (the supervisor keeps it) and written to its notes
(``NOTES.md`` for people, ``scripted-state.json`` to resume). Its first board message says it
is scripted ("scripted: no model").

Environment: ``SWARMLAB_AGENT`` (its name), ``SWARMLAB_KEEP_GOING``, the tools' path variables
(``SWARMLAB_REPO``, ``SWARMLAB_NOTES``, ``SWARMLAB_SUBMISSIONS``, ...; defaults ``/work/...``),
and knobs for tests: ``SWARMLAB_SCRIPTED_POLL_S`` (board polling, default 5),
``SWARMLAB_SCRIPTED_IDLE_S`` (how long a worker with nothing left watches the board before
exiting, default 120), ``SWARMLAB_SCRIPTED_MAX_ACTIONS`` (stop after that many actions),
``SWARMLAB_CRITIC_CHECK_TIMEOUT`` (default 600 s), ``SWARMLAB_REPLY_TIMEOUT`` (how long a
request found in the outbox after a restart is waited for, default 120 s, as the tools).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DIRECTIONS = ("projections", "moe", "head", "integration")
ANY = ("any", "none", "null", "None", "")
STATE_FILE = "scripted-state.json"
NOTES_FILE = "NOTES.md"
# A relay needs a PASS clearly better than one's own base (not judge noise).
RELAY_MARGIN = 1.02
# Chance of relaying onto a better PASS that one does not strictly need.
RELAY_P = 0.35
# Chance of taking the library's next move rather than another eligible one.
FIRST_P = 0.75
FROZEN = ("harness/", "engine/config.py", "engine/weights.py")


def env_path(name: str, default: str) -> Path:
    """A folder of the contract, from the tools' ``SWARMLAB_*`` variable or its default."""
    return Path(os.environ.get("SWARMLAB_" + name) or default)


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        return default


def say(*parts: Any) -> None:
    """One line on stdout, timestamped (the supervisor keeps the container's output)."""
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


# -- the move library ------------------------------------------------------------------------


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


# -- git and the tools -----------------------------------------------------------------------


class CommandFailed(RuntimeError):
    """A command exited non-zero; ``code`` and ``output`` say how."""

    def __init__(self, argv: list[str], code: int, output: str) -> None:
        super().__init__(f"{' '.join(argv[:3])} ... exited {code}: {output.strip()[-300:]}")
        self.code = code
        self.output = output


def run(
    argv: list[str], cwd: Path | None = None, timeout: float | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output; raise CommandFailed on failure when `check`."""
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stdout + done.stderr)
    return done


class Git:
    """The agent's clone (``/work/repo``)."""

    def __init__(self, repo: Path, agent: str) -> None:
        self.repo = repo
        self.agent = agent

    def __call__(self, *args: str, check: bool = True) -> str:
        return run(["git", *args], cwd=self.repo, check=check).stdout.strip()

    def head(self) -> str:
        return self("rev-parse", "HEAD")

    def reset(self, commit: str) -> None:
        """Put the work tree exactly at `commit` (whatever a failed apply left behind)."""
        self("reset", "-q", "--hard", commit)
        self("clean", "-q", "-fdx")

    def moves_in(self, commit: str) -> list[str]:
        """The moves in `commit`'s history, oldest first (``Move:`` trailers)."""
        out = self(
            "log", "--reverse", "--format=%(trailers:key=Move,valueonly,separator=%x2C)", commit
        )
        names: list[str] = []
        for line in out.splitlines():
            for name in line.split(","):
                name = name.strip()
                if name and name not in names:
                    names.append(name)
        return names

    def is_ancestor(self, older: str, newer: str) -> bool:
        return (
            run(
                ["git", "merge-base", "--is-ancestor", older, newer], cwd=self.repo, check=False
            ).returncode
            == 0
        )

    def has(self, commit: str) -> bool:
        return (
            run(
                ["git", "cat-file", "-e", commit + "^{commit}"], cwd=self.repo, check=False
            ).returncode
            == 0
        )

    def fetch_submission(self, submissions: Path, author: str, number: int, commit: str) -> bool:
        """Fetch another agent's submitted commit (for a relay or a review)."""
        if self.has(commit):
            return True
        ref = f"refs/submissions/{author}/{number}"
        done = run(["git", "fetch", "-q", str(submissions), ref], cwd=self.repo, check=False)
        if done.returncode != 0:
            say(f"fetch {ref} failed: {(done.stdout + done.stderr).strip()[-200:]}")
            return False
        return self.has(commit)

    def commit_all(self, message: str) -> str:
        self("add", "-A")
        self("commit", "-q", "--no-verify", "--allow-empty", "-m", message)
        return self.head()


class Tools:
    """The contract's tools on PATH: ``submit``, ``board``, ``verdicts``."""

    def post(self, kind: str, text: str, refs: dict[str, Any] | None = None) -> int | None:
        argv = ["board", "post", "--kind", kind]
        for key, value in (refs or {}).items():
            if value is not None:
                argv += ["--ref", f"{key}={value}"]
        done = run([*argv, "--", text], check=False)
        if done.returncode != 0:
            say(f"board post refused ({done.returncode}): {done.stderr.strip()[-200:]}")
            return None
        try:
            return int(done.stdout.split()[0])
        except (IndexError, ValueError):
            return None

    def read(self, since: int) -> list[dict[str, Any]]:
        done = run(["board", "read", "--json", "--since", str(since)], check=False)
        rows = []
        for line in done.stdout.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("id"), int):
                rows.append(row)
        return rows

    def submit(
        self, commit: str, message: str, timeout: float
    ) -> tuple[int | None, dict[str, Any] | None, str]:
        """Submit and wait: (submission number, verdict or None, why there is none)."""
        argv = ["submit", "-m", message[:1900], "--wait", "--timeout", f"{max(timeout, 1):.0f}"]
        done = run([*argv, commit], check=False)
        number, verdict = None, None
        for line in done.stdout.splitlines():
            line = line.strip()
            if number is None and line.isdigit():
                number = int(line)
            elif line.startswith("{"):
                with contextlib.suppress(ValueError):
                    verdict = json.loads(line)
        return number, verdict, done.stderr.strip()[-300:]

    def verdicts(self) -> list[dict[str, Any]]:
        done = run(["verdicts", "--json"], check=False)
        rows = []
        for line in done.stdout.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        return rows


# -- notes -----------------------------------------------------------------------------------


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
    tok_s: float | None = None
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
    actions: int = 0
    starts: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> State:
        data = dict(data)
        data["attempts"] = [Attempt(**a) for a in data.get("attempts", [])]
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


def conflicted_files(lines: list[str]) -> set[str]:
    """Files a failed ``git apply --3way`` names: ``U path`` or ``patch failed: path:line``."""
    found = set()
    for line in lines:
        match = re.match(r"^U (.+)$", line) or re.search(r"patch failed: ([^:]+):", line)
        if match:
            found.add(match.group(1).strip())
    return found


def short(commit: str | None) -> str:
    return (commit or "?")[:10]


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# -- the common part -------------------------------------------------------------------------


class Agent:
    """What workers and critics share: notes, tools, the clone, the deadline."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.agent = os.environ.get("SWARMLAB_AGENT") or "agent"
        self.role = args.role
        self.direction = "any" if args.direction in ANY else args.direction
        self.seed = args.seed
        self.deadline = args.deadline
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


# -- worker ----------------------------------------------------------------------------------


class Worker(Agent):
    """Plays moves of its direction (then of any), relays onto better PASSes, never stops."""

    def run(self) -> int:
        if self.state.master is None:
            self.state.master = self.git("rev-parse", "master")
        if self.state.base is None:
            self.state.base = self.state.master
        self.reconcile()  # first what became of a submission being made when we stopped
        self.announce()
        # Work on a branch of our own: master stays the starting commit, for anyone looking.
        self.git("checkout", "-q", "-B", "scripted", self.state.base)
        self.git.reset(self.state.base)
        self.settle_pending()
        self.save()
        while self.time_left() > 0 and not self.out_of_actions():
            self.settle_pending()
            self.absorb(self.read_board())
            if self.maybe_relay():
                self.save()
                continue
            acted = self.act()
            self.save()
            if acted:
                self.state.idle_since = None
                continue
            if self.state.idle_since is None:
                self.state.idle_since = time.time()
                self.notes.log("nothing left to try on this base; watching the board for a PASS")
            idle_limit = env_float("SWARMLAB_SCRIPTED_IDLE_S", 120.0)
            if time.time() - self.state.idle_since >= idle_limit:
                self.notes.log("nothing left at all: exiting (the supervisor restarts me)")
                self.state.idle_since = None
                self.save()
                return 0
            self.sleep(self.poll)
        self.notes.log("deadline reached" if self.time_left() <= 0 else "action budget used")
        self.save()
        return 0

    # -- what the board says --

    def absorb(self, rows: list[dict[str, Any]]) -> None:
        """Learn others' PASSes and the critic's findings."""
        for row in rows:
            refs = row.get("refs") or {}
            kind, author = row.get("kind"), row.get("author")
            if kind == "result" and author != self.agent and refs.get("verdict") == "PASS":
                x, commit = as_float(refs.get("x_baseline")), refs.get("commit")
                if x is not None and commit:
                    moves = [m for m in str(refs.get("moves", "")).split(",") if m]
                    self.state.others.append(
                        Pass(str(author), commit, as_int(refs.get("submission")), x, moves)
                    )
            if kind == "review" and refs.get("finding") == "bug" and refs.get("commit"):
                self.flag(str(refs["commit"]), refs.get("culprit"), row)

    def flag(self, commit: str, culprit: Any, row: dict[str, Any]) -> None:
        """A reviewer found a bug in `commit`: never build on it; leave it if it is our base."""
        if commit in self.state.flagged_commits:
            return
        self.state.flagged_commits.append(commit)
        if isinstance(culprit, str) and culprit in self.library.moves:
            self.state.flagged_moves.append(culprit)
        tainted = self.tainted(self.state.base or "")
        self.notes.log(
            f"{row.get('author')} found a bug in {short(commit)}"
            + (f" (move {culprit})" if culprit else "")
            + ("; my base is built on it" if tainted else "")
        )
        if tainted:
            fallback = [p for p in self.state.passes if not self.tainted(p.commit)]
            best = max(fallback, key=lambda p: p.x, default=None)
            old = self.state.base
            if best is None:
                self.state.base, self.state.base_x = self.state.master, 1.0
                self.state.base_from = "master"
            else:
                self.state.base, self.state.base_x = best.commit, best.x
                self.state.base_from = best.author
            self.git.reset(self.state.base or "master")
            self.state.considered = []  # other PASSes are worth a fresh look from here
            self.tools.post(
                "note",
                f"dropping my base {short(old)}: {row.get('author')} found a bug in "
                f"{short(commit)}; back on {short(self.state.base)} ({self.state.base_x:.2f}x)",
                {"commit": old, "base": self.state.base, "flagged": commit},
            )

    def tainted(self, commit: str) -> bool:
        """Whether `commit` is, or is built on, a commit a reviewer flagged."""
        if not commit:
            return False
        return any(
            self.git.has(bad) and self.git.is_ancestor(bad, commit)
            for bad in self.state.flagged_commits
        ) or bool(set(self.state.flagged_moves) & set(self.git.moves_in(commit)))

    # -- relays --

    def wanted(self, have: set[str]) -> set[str]:
        """Moves our untried moves require that `have` lacks (what a relay could bring)."""
        wanted: set[str] = set()
        for move in self.pool(phase_two=False):
            if move.name not in have and not self.finished(move.name):
                wanted |= set(move.requires) - have
        return wanted

    def maybe_relay(self) -> bool:
        base_x = self.state.base_x
        have = set(self.git.moves_in(self.state.base or "HEAD"))
        better = [
            p
            for p in self.state.others
            if p.x > base_x * RELAY_MARGIN
            and p.commit not in self.state.considered
            and not (set(p.moves) & set(self.state.flagged_moves))
            and p.commit not in self.state.flagged_commits
        ]
        if not better:
            return False
        best = max(better, key=lambda p: p.x)
        self.state.considered.extend(p.commit for p in better)
        needs = self.wanted(have) & set(best.moves)
        draw = self.rng.random()
        if not needs and draw >= RELAY_P:
            return False
        if best.submission is None or not self.git.fetch_submission(
            self.submissions, best.author, best.submission, best.commit
        ):
            return False
        if self.tainted(best.commit):
            return False
        old, old_x = self.state.base, base_x
        self.git.reset(best.commit)
        self.state.base, self.state.base_x, self.state.base_from = best.commit, best.x, best.author
        brought = [m for m in self.git.moves_in(best.commit) if m not in have]
        why = (
            f"it has {', '.join(sorted(needs))}, which my next moves need"
            if needs
            else ("it beats my base")
        )
        self.state.relays.append(
            {"from": best.author, "commit": best.commit, "x": best.x, "needs": sorted(needs)}
        )
        self.tools.post(
            "relay",
            f"building on {best.author}'s PASS {short(best.commit)} ({best.x:.2f}x, submission "
            f"{best.submission}) instead of my {short(old)} ({old_x:.2f}x): {why}. It brings "
            f"{', '.join(brought) or 'no new moves'}.",
            {
                "from": best.author,
                "commit": best.commit,
                "submission": best.submission,
                "x_baseline": best.x,
                "previous": old,
                "needs": ",".join(sorted(needs)),
            },
        )
        self.notes.log(f"relay onto {best.author}'s {short(best.commit)} ({best.x:.2f}x): {why}")
        return True

    # -- choosing --

    def pool(self, phase_two: bool) -> list[MoveSpec]:
        """Moves of our direction (all of them for ``any``), or of every other direction."""
        names = list(self.library.moves)
        if self.direction == "any":
            mine = names
        else:
            mine = [n for n in names if self.library.moves[n].direction == self.direction]
        if phase_two:
            return self.library.ordered([n for n in names if n not in mine])
        return self.library.ordered(mine)

    def outcomes(self, action: str) -> list[Attempt]:
        return [a for a in self.state.attempts if a.action == action]

    def finished(self, name: str) -> bool:
        """Whether a move is done with for good.

        WRONG or REJECT (a bug or a broken rule does not depend on the base), flagged by a
        reviewer, no faster than its base twice, or an ERROR (the judge's fault) twice. A
        conflict waits for ``retry_variant``. A move that PASSed and was kept stays available:
        after a relay onto a commit that lacks it, it is worth applying again.
        """
        if name in self.state.flagged_moves:
            return True
        tries = self.outcomes("move:" + name)
        if any(a.outcome in ("WRONG", "REJECT", "conflict") for a in tries):
            return True
        if sum(a.outcome == "PASS" and not a.kept for a in tries) >= 2:
            return True
        return sum(a.outcome == "ERROR" for a in tries) >= 2

    def blocked_here(self, name: str) -> bool:
        """Already tried on this very base: it did not apply, lacked a requirement, or PASSed
        no faster than the base."""
        return any(
            a.base == self.state.base
            and a.outcome in ("conflict", "unmet", "PASS", "refused", "duplicate")
            for a in self.outcomes("move:" + name)
        )

    def eligible(self, have: set[str], phase_two: bool) -> list[MoveSpec]:
        return [
            m
            for m in self.pool(phase_two)
            if m.name not in have
            and not self.finished(m.name)
            and not self.blocked_here(m.name)
            and set(m.requires) <= have
        ]

    def pick(self, moves: list[MoveSpec]) -> MoveSpec:
        """Usually the next one in order; sometimes another (seeded)."""
        if len(moves) == 1 or self.rng.random() < FIRST_P:
            return moves[0]
        return moves[1 + self.rng.randrange(len(moves) - 1)]

    def act(self) -> bool:
        """Do one thing; False when nothing is left to do on this base."""
        recent = [a.outcome for a in self.state.attempts[-3:]]
        if len(recent) == 3 and set(recent) == {"refused"}:
            return False  # the gateway refuses our submissions (a cap?): nothing to do
        base = self.state.base or "HEAD"
        have = set(self.git.moves_in(base))
        for phase_two in (False, True):
            moves = self.eligible(have, phase_two)
            if moves:
                self.try_move(self.pick(moves), have)
                return True
            if not phase_two:
                # Our own direction's next moves need something this base lacks: say so once.
                unmet = [
                    m
                    for m in self.pool(phase_two=False)
                    if m.name not in have
                    and not self.finished(m.name)
                    and not self.blocked_here(m.name)
                ]
                missing = sorted(
                    {r for m in unmet for r in m.requires} - have - {m.name for m in unmet}
                )
                key = ",".join(m.name for m in unmet) + "|" + ",".join(missing)
                if unmet and key not in self.state.unmet_posted:
                    self.state.unmet_posted.append(key)
                    self.record_unmet(unmet, have)
                    return True
        if self.try_sweep(have):
            return True
        # No re-measure of the base: that is a tree the arm had judged already, and the runner
        # re-judges every arm's best itself, alike for every arm.
        return self.retry_variant(have)

    # -- doing --

    def commit_message(self, title: str, trailers: dict[str, str]) -> str:
        lines = [title, ""]
        lines += [f"{k}: {v}" for k, v in trailers.items()]
        return "\n".join(lines) + "\n"

    def record_unmet(self, moves: list[MoveSpec], have: set[str]) -> None:
        """A dead end pinned to this base: the moves we would try next need what it lacks."""
        missing = sorted({r for m in moves for r in m.requires} - have - {m.name for m in moves})
        self.state.actions += 1
        for move in moves:
            self.state.attempts.append(
                Attempt(
                    "move:" + move.name,
                    self.state.base or "",
                    time.time(),
                    "unmet",
                    reason="needs " + ",".join(sorted(set(move.requires) - have)),
                )
            )
        names = ", ".join(m.name for m in moves)
        self.tools.post(
            "dead_end",
            f"can't do {names} on {short(self.state.base)} yet: "
            f"{'they need' if len(moves) > 1 else 'it needs'} {', '.join(missing)}, which this "
            "base lacks. Looking for a PASS that has it; meanwhile trying other directions.",
            {
                "move": ",".join(m.name for m in moves),
                "base": self.state.base,
                "reason": "unmet",
                "needs": ",".join(missing),
            },
        )
        self.notes.log(f"{names}: need {', '.join(missing)} (not on {short(self.state.base)})")

    def try_move(self, move: MoveSpec, have: set[str]) -> None:
        base = self.state.base or self.git.head()
        self.state.actions += 1
        self.git.reset(base)
        applied = run(
            ["git", "apply", "--3way", "--whitespace=nowarn", str(move.patch)],
            cwd=self.repo,
            check=False,
        )
        if applied.returncode != 0:
            self.git.reset(base)
            detail = (applied.stdout + applied.stderr).strip().splitlines()
            files = sorted(conflicted_files(detail))
            self.state.attempts.append(
                Attempt(
                    "move:" + move.name,
                    base,
                    time.time(),
                    "conflict",
                    reason="; ".join(detail[-3:])[:300],
                )
            )
            self.tools.post(
                "dead_end",
                f"{move.name} does not apply on {short(base)} (built on "
                f"{', '.join(sorted(have)) or 'master'}): conflict"
                + (f" in {', '.join(files)}" if files else "")
                + ". Pinned: this move, this base.",
                {"move": move.name, "base": base, "reason": "conflict"},
            )
            self.notes.log(f"{move.name}: conflict on {short(base)}")
            return
        commit = self.git.commit_all(
            self.commit_message(
                f"{move.name}: {move.why}",
                {"Move": move.name, "Direction": move.direction, "Base": base, "Agent": self.agent},
            )
        )
        self.submit_and_report("move:" + move.name, move.name, commit, base)

    def submit_and_report(self, action: str, label: str, commit: str, base: str) -> None:
        timeout = max(60.0, self.time_left() + 60.0)
        tree = self.git("rev-parse", commit + "^{tree}")
        earlier = self.judged_trees().get(tree)
        if earlier is not None:
            self.state.attempts.append(
                Attempt(
                    action,
                    base,
                    time.time(),
                    "duplicate",
                    commit=commit,
                    tree=tree,
                    reason=f"same tree as {earlier}",
                )
            )
            self.notes.log(f"{label} on {short(base)}: not submitted, the same code as {earlier}")
            self.git.reset(base)
            return
        attempt = Attempt(action, base, time.time(), "submitting", commit=commit, tree=tree)
        self.state.attempts.append(attempt)
        # On disk before the request exists: a kill from here on is settled by reconcile().
        self.save()
        self.notes.log(f"submit {label} on {short(base)} as {short(commit)}")
        number, verdict, why = self.tools.submit(commit, f"{label} on {short(base)}", timeout)
        attempt.outcome, attempt.submission = "timeout", number
        if number is None and "no reply from the gateway" in why:
            # The request is left in the outbox: the gateway may still take it (reconcile()).
            attempt.outcome, attempt.reason = "submitting", why
            self.notes.log(f"{label}: no reply yet from the gateway")
            self.git.reset(base)
            return
        if number is None:
            attempt.outcome, attempt.reason = "refused", why
            self.notes.log(f"{label}: submission refused: {why}")
            self.git.reset(base)
            if "judge budget is spent" in why:
                # Nothing more will be judged: wait for the run's end instead of asking again.
                self.notes.log("the arm's judge budget is spent: waiting for the run to end")
                while self.time_left() > 0:
                    self.sleep(self.poll)
            return
        if verdict is None:
            # The deadline came first (or the judge is slow): settled later from `verdicts`.
            attempt.reason = why
            self.notes.log(f"{label}: no verdict yet for submission {number}")
            self.git.reset(base)
            return
        self.judge(attempt, verdict, label)

    def judge(self, attempt: Attempt, verdict: dict[str, Any], label: str) -> None:
        """Record a verdict, post the result, keep the commit if it beats the base."""
        metrics = verdict.get("metrics") or {}
        attempt.outcome = str(verdict.get("verdict"))
        attempt.reason = verdict.get("reason")
        attempt.x, attempt.tok_s = (
            as_float(metrics.get("x_baseline")),
            as_float(metrics.get("tok_s")),
        )
        base, commit = attempt.base, attempt.commit or ""
        moves = self.git.moves_in(commit) if commit else []
        if attempt.outcome == "PASS" and attempt.x is not None:
            text = (
                f"PASS {attempt.x:.2f}x ({attempt.tok_s or 0:.1f} tok/s): {label} on "
                f"{short(base)} ({self.state.base_x:.2f}x) -> {short(commit)}, submission "
                f"{attempt.submission}"
            )
        else:
            first = str(verdict.get("detail") or "").strip().splitlines()
            text = (
                f"{attempt.outcome} {attempt.reason or ''}: {label} on {short(base)} -> "
                f"{short(commit)}, submission {attempt.submission}"
                + (f". {first[0][:300]}" if first else "")
            )
        self.tools.post(
            "result",
            text,
            {
                "verdict": attempt.outcome,
                "reason": attempt.reason,
                "x_baseline": attempt.x,
                "tok_s": attempt.tok_s,
                "commit": commit,
                "submission": attempt.submission,
                "move": label,
                "base": base,
                "base_x": self.state.base_x,
                "moves": ",".join(moves),
                "direction": self.direction,
            },
        )
        better = (
            attempt.outcome == "PASS"
            and attempt.x is not None
            and (attempt.x > self.state.base_x or attempt.action == "rerun")
        )
        if better and attempt.x is not None:
            attempt.kept = True
            if attempt.action != "rerun":
                self.state.passes.append(
                    Pass(self.agent, commit, attempt.submission, attempt.x, moves)
                )
            self.notes.log(f"{label}: PASS {attempt.x:.2f}x, kept (was {self.state.base_x:.2f}x)")
            self.state.base, self.state.base_x, self.state.base_from = (
                commit,
                attempt.x,
                self.agent,
            )
            self.git.reset(commit)
            return
        if attempt.outcome == "PASS":
            self.tools.post(
                "dead_end",
                f"{label} PASSes but is no faster: {attempt.x or 0:.2f}x against my base's "
                f"{self.state.base_x:.2f}x. Dead end for this implementation on this base "
                f"(commit {short(commit)}, base {short(base)}).",
                {
                    "move": label,
                    "base": base,
                    "commit": commit,
                    "reason": "no_faster",
                    "x_baseline": attempt.x,
                },
            )
        said = " ".join(
            part
            for part in (attempt.outcome, attempt.reason, attempt.x and f"{attempt.x:.2f}x")
            if part
        )
        self.notes.log(f"{label}: {said} - back to {short(self.state.base)}")
        self.git.reset(self.state.base or base)

    def judged_trees(self) -> dict[str, str]:
        """Tree -> whose submission it was, for every tree this agent or its arm submitted:
        the gateway's copies (``refs/submissions/<agent>/<n>`` in the arm's read-only
        ``submissions.git``) and this agent's notes (a submission the gateway has not copied
        yet). A submission of ours that got ERROR (the judge's fault) does not count."""
        errors = {
            a.submission
            for a in self.state.attempts
            if a.outcome == "ERROR" and a.submission is not None
        }
        trees: dict[str, str] = {}
        done = run(
            ["git", "--git-dir", str(self.submissions), "for-each-ref",
             "--format=%(refname) %(tree)", "refs/submissions/"],
            check=False,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            ref, _, tree = line.partition(" ")
            parts = ref.split("/")
            if len(parts) != 4 or not tree:
                continue
            author, number = parts[2], as_int(parts[3])
            if author == self.agent and number in errors:
                continue
            owner = "my" if author == self.agent else f"{author}'s"
            trees.setdefault(tree, f"{owner} submission {number}")
        for a in self.state.attempts:
            if a.tree and a.outcome in ("submitting", "timeout", "PASS", "WRONG", "REJECT"):
                trees.setdefault(a.tree, f"my submission {a.submission or '(being made)'}")
        return trees

    def find_submission(self, commit: str) -> tuple[int | None, str | None]:
        """What became of a request to submit `commit` whose answer we never read:
        (number, None) when the gateway took it, (None, why) when it did not."""
        wait = env_float("SWARMLAB_REPLY_TIMEOUT", 120.0)
        until = time.time() + wait
        waited = False
        while True:
            # Still in the outbox: the gateway has not handled it yet; it answers before it
            # deletes the request, so once the file is gone the reply is there.
            queued = False
            for request in self.outbox.glob("*.json"):
                with contextlib.suppress(OSError, ValueError):
                    body = json.loads(request.read_text())
                    queued = queued or (body.get("op") == "submit" and body.get("commit") == commit)
            if not queued or time.time() >= until:
                break
            if not waited:
                waited = True
                self.notes.log(f"my request for {short(commit)} is still in the outbox: waiting")
            time.sleep(min(self.poll, 0.5))
        for reply in (self.inbox / "replies").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                body = json.loads(reply.read_text())
                if body.get("ok") is True and body.get("commit") == commit:
                    return as_int(body.get("submission")), None
        mine = run(
            ["git", "--git-dir", str(self.submissions), "for-each-ref",
             "--format=%(refname) %(objectname)", f"refs/submissions/{self.agent}/"],
            check=False,
        )  # fmt: skip
        for line in mine.stdout.splitlines():
            ref, _, sha = line.partition(" ")
            if sha == commit:
                return as_int(ref.rsplit("/", 1)[-1]), None
        if queued:
            return None, f"still in the outbox after {wait:.0f} s"
        return None, "never reached the gateway (or it refused it)"

    def reconcile(self) -> None:
        """After a restart: submissions recorded as being made when the agent stopped. The
        gateway's answer says whether each was made; only one it never took is forgotten."""
        for attempt in [a for a in self.state.attempts if a.outcome == "submitting"]:
            number, why = self.find_submission(attempt.commit or "")
            label = attempt.action.split(":", 1)[-1]
            if number is not None:
                attempt.outcome, attempt.submission = "timeout", number
                self.notes.log(f"{label}: submission {number} was made before the restart")
            elif why and why.startswith("still"):
                # Not knowable yet: keep it counted as submitted (its tree is not sent again).
                self.notes.log(f"{label}: its request is {why}")
            else:
                self.state.attempts.remove(attempt)
                self.notes.log(f"{label}: {why}; it may be tried again")
        self.save()

    def settle_pending(self) -> None:
        """Submissions whose verdict came later (while we were away, or after ``submit``
        stopped waiting)."""
        if any(a.outcome == "submitting" for a in self.state.attempts):
            self.reconcile()
        pending = [a for a in self.state.attempts if a.outcome == "timeout" and a.submission]
        if not pending:
            return
        rows = {r.get("submission"): r for r in self.tools.verdicts()}
        for attempt in pending:
            row = rows.get(attempt.submission)
            if row is not None:
                label = attempt.action.split(":", 1)[-1]
                self.judge(attempt, row, label)

    def try_sweep(self, have: set[str]) -> bool:
        """Vary a parameter of the best engine (the library's sweeps), one value at a time."""
        base = self.state.base or "HEAD"
        for sweep in self.library.sweeps:
            if not set(sweep.after) <= have:
                continue
            for value in sweep.values:
                action = f"sweep:{sweep.name}={value}"
                if any(a.base == base for a in self.outcomes(action)):
                    continue
                self.git.reset(base)
                path = self.repo / sweep.file
                text = path.read_text() if path.is_file() else ""
                if text.count(sweep.old) != 1:
                    break  # this engine no longer has that parameter
                path.write_text(text.replace(sweep.old, sweep.new.format(value=value)))
                self.state.actions += 1
                commit = self.git.commit_all(
                    self.commit_message(
                        f"sweep {sweep.name}={value}: {sweep.why}",
                        {"Sweep": f"{sweep.name}={value}", "Base": base, "Agent": self.agent},
                    )
                )
                self.submit_and_report(action, f"{sweep.name}={value}", commit, base)
                return True
        return False

    def retry_variant(self, have: set[str]) -> bool:
        """Retry a move that was a dead end on an older base, now that the base changed."""
        base = self.state.base or "HEAD"
        for move in self.library.ordered([m for m in self.library.moves if m not in have]):
            if move.name in self.state.flagged_moves or not set(move.requires) <= have:
                continue
            tries = self.outcomes("move:" + move.name)
            if any(a.outcome in ("WRONG", "REJECT") or a.base == base for a in tries):
                continue
            if any(a.outcome in ("PASS", "conflict", "unmet", "ERROR") for a in tries):
                self.notes.log(f"retrying {move.name} on my new base {short(base)}")
                self.try_move(move, have)
                return True
        return False


# -- critic ----------------------------------------------------------------------------------

# A decode longer than any the judge runs: 40 + 100 positions, past the KV cache's first 128.
PROBE_PROMPTS = [[(37 * i + 11) % 4096 for i in range(40)], [(53 * i + 5) % 4096 for i in range(9)]]
PROBE_STEPS = 100

PATTERNS: list[tuple[str, str]] = [
    (
        r"\bimport threading\b|\bThread\(|concurrent\.futures|multiprocessing",
        "background threads or processes",
    ),
    (r"\bimport socket\b|urllib|http\.client|requests\b", "network access"),
    (r"\bsubprocess\b|os\.system|os\.popen", "starts processes"),
    (r"os\.environ", "reads or sets environment variables"),
    (r"open\([^)]*['\"][wa]|write_text|write_bytes|/tmp/", "writes files"),
    (
        r"tuple\(prompt|tuple\(tokens|hash\(prompt|prompts?\]\s*=|\[tuple\(",
        "a cache keyed on prompts or tokens",
    ),
    (r"perf_counter|time\.time\(|monotonic\(", "reads the clock"),
    (r"importlib|sys\.modules|__import__|sys\.path", "import machinery"),
]


class Serve:
    """One engine (``python -I -B harness/serve.py``) in a scratch tree, with timeouts."""

    def __init__(self, tree: Path, timeout: float) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "harness/serve.py"],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.lines.get(timeout=self.timeout)
        if not line:
            raise RuntimeError(f"the engine exited during {message['op']}")
        return json.loads(line)

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def probe(tree: Path, timeout: float) -> tuple[str, list[list[int]] | None]:
    """A batched decode of PROBE_STEPS on PROBE_PROMPTS: ("ok", tokens) or (what failed, None)."""
    engine = Serve(tree, timeout)
    try:
        for message in ({"op": "load"}, {"op": "prefill", "prompts": PROBE_PROMPTS}):
            reply = engine.ask(message)
            if not reply.get("ok"):
                return f"{message['op']} failed: {reply.get('error')}", None
        reply = engine.ask({"op": "decode", "steps": PROBE_STEPS})
        if not reply.get("ok"):
            return f"crash: {reply.get('error')}", None
        return "ok", reply["tokens"]
    except (queue.Empty, RuntimeError, ValueError, OSError) as exc:
        return f"crash: {type(exc).__name__}: {exc}"[:300], None
    finally:
        engine.close()


class Critic(Agent):
    """Reviews every worker's PASS; never submits."""

    def run(self) -> int:
        if self.state.master is None:
            self.state.master = self.git("rev-parse", "master")
        self.announce()
        self.save()
        self.expected: list[list[int]] | None = None
        while self.time_left() > 0 and not self.out_of_actions():
            for row in self.read_board():
                refs = row.get("refs") or {}
                if (
                    row.get("kind") == "result"
                    and row.get("role", "worker") != "critic"
                    and refs.get("verdict") == "PASS"
                    and refs.get("commit")
                    and refs.get("commit") not in self.state.reviewed
                    and not any(p["commit"] == refs["commit"] for p in self.state.pending_reviews)
                ):
                    self.state.pending_reviews.append(
                        {"author": row.get("author"), "message": row.get("id"), **refs}
                    )
            self.save()
            if not self.state.pending_reviews:
                self.sleep(self.poll)
                continue
            # The fastest PASS first: it is the one others will build on.
            pending = self.state.pending_reviews
            item = max(pending, key=lambda p: (as_float(p.get("x_baseline")) or 0.0, -p["message"]))
            pending.remove(item)
            self.state.actions += 1
            self.review(item)
            self.state.reviewed.append(item["commit"])
            self.save()
        self.notes.log("deadline reached" if self.time_left() <= 0 else "action budget used")
        return 0

    def extract(self, commit: str, where: Path) -> Path:
        """The commit's tree, as files, in a scratch folder (no git metadata)."""
        data = subprocess.run(
            ["git", "archive", "--format=tar", commit],
            cwd=self.repo,
            capture_output=True,
            check=True,
        ).stdout
        where.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(where, filter="data")
        return where

    def expected_probe(self, scratch: Path) -> list[list[int]] | None:
        """``master``'s output for the probe (the baseline engine), computed once."""
        if self.expected is None:
            tree = self.extract(self.state.master or "master", scratch / "master")
            outcome, tokens = probe(tree, timeout=300)
            self.expected = tokens if outcome == "ok" else None
        return self.expected

    def probe_commit(self, commit: str, scratch: Path) -> str:
        """The probe's outcome for `commit` (cached): ok, a mismatch or a crash."""
        if commit in self.state.probes:
            return self.state.probes[commit]
        tree = self.extract(commit, scratch / f"probe-{commit[:12]}")
        outcome, tokens = probe(tree, timeout=120)
        if outcome == "ok":
            expected = self.expected_probe(scratch)
            if expected is not None and tokens != expected:
                rows = [
                    i
                    for i, (a, b) in enumerate(zip(tokens or [], expected, strict=False))
                    if a != b
                ]
                outcome = f"mismatch against master in rows {rows}"
        self.state.probes[commit] = outcome
        return outcome

    def check(self, tree: Path) -> tuple[bool, str]:
        """The task's own local check, bounded."""
        timeout = env_float("SWARMLAB_CRITIC_CHECK_TIMEOUT", 600.0)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-B", "harness/check.py", "--repeat", "1"],
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
            )
        except subprocess.TimeoutExpired:
            return False, f"harness/check.py did not finish within {timeout:.0f} s"
        lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
        if done.returncode == 0:
            speed = next((ln for ln in lines if "aggregate" in ln), "")
            return True, "check.py OK" + (f" ({speed})" if speed else "")
        fails = [ln for ln in lines if ln.startswith("FAIL")]
        return False, "check.py FAILED: " + ("; ".join(fails[:2]) or done.stderr.strip()[-200:])

    def inspect(self, base: str, commit: str, tree: Path) -> tuple[list[str], list[str]]:
        """Rule-sensitive patterns in what `commit` adds to `base`: (concerns, notes)."""
        found: list[str] = []
        notes: list[str] = []
        names = self.git("diff", "--name-only", base, commit).splitlines()
        frozen = [n for n in names if n.startswith(FROZEN)]
        if frozen:
            found.append("edits the frozen zone: " + ", ".join(frozen))
        top = [n for n in names if "/" not in n and n.endswith(".py")]
        if top:
            found.append("adds top-level modules (shadowing?): " + ", ".join(top))
        added = "\n".join(
            ln[1:]
            for ln in self.git("diff", "-U0", base, commit, "--", "engine").splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        )
        for pattern, what in PATTERNS:
            if re.search(pattern, added):
                found.append(what)
        module_state = re.findall(r"^(_\w+)\s*(?::[^=]*)?=\s*(?:\{|\[|dict\(|set\()", added, re.M)
        if module_state:
            found.append("module-level mutable state: " + ", ".join(sorted(set(module_state))))
        attrs = set(re.findall(r"self\.(_?\w+)\s*(?::[^=]*)?=(?!=)", added))
        attrs |= set(re.findall(r"__dict__\.(?:setdefault|get)\(\"(\w+)\"", added))
        model = tree / "engine" / "model.py"
        text = model.read_text() if model.is_file() else ""
        reset = re.search(r"def reset\(self\).*?(?=\n    def |\Z)", text, re.S)
        body = reset.group(0) if reset else ""
        kept = sorted(a for a in attrs if a not in body and a not in ("seqs", "weights", "cfg"))
        derived, other = [], []
        lines = added.splitlines()
        for name in kept:
            # Weight-derived when the code around each place naming it works on the weights.
            near = "\n".join(
                "\n".join(lines[max(0, i - 4) : i + 5]) for i, ln in enumerate(lines) if name in ln
            )
            weighty = re.search(r"dequantize|weights", near)
            (derived if weighty else other).append(name)
        if derived:
            notes.append("weight-derived caches kept across reset(): " + ", ".join(derived))
        if other:
            found.append(
                "state that survives reset(): " + ", ".join(other) + " (a bug if it holds "
                "anything of a sequence or a batch)"
            )
        return found, notes

    def review(self, item: dict[str, Any]) -> None:
        commit, author = str(item["commit"]), str(item.get("author"))
        number = as_int(item.get("submission"))
        base = str(item.get("base") or self.state.master)
        self.notes.log(f"reviewing {author}'s PASS {short(commit)} ({item.get('move')})")
        if number is None or not self.git.fetch_submission(
            self.submissions, author, number, commit
        ):
            self.tools.post(
                "review",
                f"could not fetch {author}'s {short(commit)} to review it.",
                {"commit": commit, "author": author, "finding": "unreviewed"},
            )
            return
        if not self.git.has(base):
            base = self.state.master or "master"
        tree_sha = self.git("rev-parse", commit + "^{tree}")
        same = self.state.trees.get(tree_sha)
        if same is not None:
            # Moves commute: the same moves in another order make the very same tree.
            self.tools.post(
                "review",
                f"{same['label']} {author}'s PASS {short(commit)} ({item.get('move')}): the same "
                f"code as {same['author']}'s {short(same['commit'])}, reviewed already.",
                {
                    **same["refs"],
                    "commit": commit,
                    "author": author,
                    "submission": number,
                    "same_as": same["commit"],
                },
            )
            self.notes.log(f"review {short(commit)}: same tree as {short(same['commit'])}")
            return
        scratch = Path(tempfile.mkdtemp(prefix=f"review-{commit[:12]}-", dir="/tmp"))
        try:
            tree = self.extract(commit, scratch / "tree")
            ok, check_text = self.check(tree)
            probe_text = self.probe_commit(commit, scratch)
            patterns, remarks = self.inspect(base, commit, tree)
            culprit = None
            if probe_text != "ok" and base != self.state.master:
                base_probe = self.probe_commit(base, scratch)
                if base_probe == "ok":
                    culprit = str(item.get("move") or "") or None
            elif probe_text != "ok":
                culprit = str(item.get("move") or "") or None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        finding = "bug" if (not ok or probe_text != "ok") else ("concern" if patterns else "ok")
        parts = [check_text]
        parts.append(
            f"long decode ({len(PROBE_PROMPTS[0])}+{PROBE_STEPS} positions, past the judge's "
            f"lengths): {probe_text}"
        )
        if culprit:
            parts.append(f"its base {short(base)} passes the probe, so the bug came with {culprit}")
        elif probe_text != "ok":
            parts.append(f"inherited: its base {short(base)} fails the probe too")
        if patterns:
            parts.append("diff: " + "; ".join(patterns))
        if remarks:
            parts.append("noted: " + "; ".join(remarks))
        label = {"bug": "BUG", "concern": "CONCERN", "ok": "OK"}[finding]
        refs = {
            "commit": commit,
            "author": author,
            "submission": number,
            "finding": finding,
            "check": "ok" if ok else "fail",
            "probe": "ok" if probe_text == "ok" else probe_text[:120],
            "culprit": culprit,
            "patterns": " | ".join(patterns)[:500],
        }
        self.tools.post(
            "review",
            f"{label} {author}'s PASS {short(commit)} ({item.get('move')}): " + ". ".join(parts),
            refs,
        )
        self.state.trees[tree_sha] = {
            "commit": commit,
            "author": author,
            "label": label,
            "refs": refs,
        }
        self.notes.log(f"review {short(commit)}: {label}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("worker", "critic"), required=True)
    parser.add_argument("--direction", default="any", help=f"{', '.join(DIRECTIONS)} or any")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--moves", required=True, help="the task's moves/ folder")
    parser.add_argument(
        "--deadline",
        type=float,
        default=as_float(os.environ.get("SWARMLAB_DEADLINE")) or time.time() + 3600,
        help="epoch seconds (default: $SWARMLAB_DEADLINE, else an hour from now)",
    )
    args = parser.parse_args(argv)
    if args.direction not in DIRECTIONS and args.direction not in ANY:
        parser.error(f"--direction must be one of {', '.join(DIRECTIONS)} or any")
    # Everything goes to stdout, tracebacks included: the supervisor keeps the container's
    # output, and a crash is restarted with SWARMLAB_KEEP_GOING=1 (it resumes from its notes).
    sys.stderr = sys.stdout
    agent: Worker | Critic = Worker(args) if args.role == "worker" else Critic(args)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
