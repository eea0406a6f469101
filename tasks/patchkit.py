"""The patch kit of the bundled tasks' generators (``tasks/*/make_*.py``): scripted edits of a
task's template saved as ``git diff``s, so each generator is the data of its moves, mutants and
sweeps plus a few lines that say where to write them.

Every edit names the exact text it replaces and that text must occur exactly once, so a
template change that breaks an edit fails here instead of producing a patch that does nothing.
A move's patch is a ``git diff`` against the template with the moves it ``requires`` applied
first (in library order); a mutant's is whole (its base included). ``kind`` is the author's
intent (good | wrong | rule | dead); the judge decides verdicts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ON_REFERENCE",
    "Edit",
    "Library",
    "Move",
    "Mutant",
    "PatchError",
    "Sweep",
    "apply_edits",
    "check_applies",
    "commit",
    "diff",
    "fresh_repo",
    "git",
]

# (path, old, new): replace ``old`` (which must occur exactly once) by ``new``; an ``old`` of
# None or "" creates the file (``new`` as bytes: a binary file, e.g. bytecode).
Edit = tuple[str, str | None, str | bytes]
# An edit whose path is this applies the task's reference/solution.patch: a mutant of a fast
# engine.
ON_REFERENCE = "<reference>"


class PatchError(ValueError):
    """An edit does not apply: the template changed under it."""


@dataclass(frozen=True)
class Move:
    """One entry of a task's move library: its metadata and the edits that make its patch.

    Attributes:
        reason: for wrong and rule moves, the judge reason the author expects (tests and
            stand-ins only).
        latent: a bug outside what the judge exercises (it PASSes): only a reviewer who probes
            further finds it.
    """

    name: str
    direction: str
    kind: str
    why: str
    edits: list[Edit]
    requires: tuple[str, ...] = ()
    reason: str | None = None
    latent: bool = False

    def entry(self) -> dict[str, Any]:
        """The move's ``moves.yaml`` entry."""
        entry: dict[str, Any] = {
            "name": self.name,
            "direction": self.direction,
            "kind": self.kind,
            "requires": list(self.requires),
            "patch": f"{self.name}.patch",
        }
        if self.reason:
            entry["reason"] = self.reason
        if self.latent:
            entry["latent"] = True
        entry["why"] = self.why
        return entry


@dataclass(frozen=True)
class Mutant:
    """A task-specific mutant: edits on the template, after the library's ``moves`` (their
    closure) or, ``on_reference``, after every good move."""

    name: str
    edits: list[Edit]
    on_reference: bool = False
    moves: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sweep:
    """A parameter of the engine a worker may vary: replace ``old`` by ``new`` with a value."""

    name: str
    file: str
    old: str
    new: str
    values: tuple[int, ...]
    why: str
    after: tuple[str, ...] = field(default=())

    def entry(self) -> dict[str, Any]:
        """The sweep's ``moves.yaml`` entry."""
        return {
            "name": self.name,
            "file": self.file,
            "old": self.old,
            "new": self.new,
            "values": list(self.values),
            "after": list(self.after),
            "why": self.why,
        }


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (paths unquoted in its output); its stdout.

    Raises:
        subprocess.CalledProcessError: git failed.
    """
    return subprocess.run(
        ["git", "-c", "core.quotepath=off", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def commit(repo: Path, message: str) -> None:
    """Commit everything in ``repo``'s work tree."""
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


def fresh_repo(where: Path, template: Path) -> Path:
    """A git repository ``where/repo`` holding a clean copy of ``template``, one commit
    (build outputs and bytecode left out)."""
    repo = where / "repo"
    shutil.copytree(template, repo, ignore=shutil.ignore_patterns("__pycache__", "build"))
    git(repo, "init", "-q")
    commit(repo, "template")
    return repo


def apply_edits(repo: Path, edits: Iterable[Edit], label: str, task: Path | None = None) -> None:
    """Make ``edits`` in ``repo``'s work tree.

    Args:
        repo: the repository.
        edits: the edits, in order (:data:`Edit`; :data:`ON_REFERENCE` applies
            ``task/reference/solution.patch``).
        label: what the edits make, for the error.
        task: the task folder (only for :data:`ON_REFERENCE`).

    Raises:
        PatchError: an old text does not occur exactly once, or a file to create exists.
    """
    for path, old, new in edits:
        if path == ON_REFERENCE:
            if task is None:
                raise PatchError(f"{label}: {ON_REFERENCE} needs the task folder")
            git(repo, "apply", str(task / "reference" / "solution.patch"))
            continue
        target = repo / path
        if isinstance(new, bytes) or not old:
            if target.exists():
                raise PatchError(f"{label}: {path} exists already")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(new, bytes):
                target.write_bytes(new)
            else:
                target.write_text(new)
            continue
        text = target.read_text()
        count = text.count(old)
        if count != 1:
            raise PatchError(
                f"{label}: the text to replace occurs {count} times in {path}:\n{old[:200]}"
            )
        target.write_text(text.replace(old, str(new)))


def diff(repo: Path) -> str:
    """The ``git diff`` of ``repo``'s work tree against its last commit (binary files whole)."""
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary", "--no-color", "--no-ext-diff")


def check_applies(template: Path, patch: Path) -> None:
    """``git apply --check`` ``patch`` on a fresh copy of ``template``.

    Raises:
        subprocess.CalledProcessError: it does not apply.
    """
    with tempfile.TemporaryDirectory() as tmp:
        git(fresh_repo(Path(tmp), template), "apply", "--check", str(patch))


@dataclass
class Library:
    """A task's scripted-agent library and mutants, and the files they are written to.

    Attributes:
        task: the task folder (``template/``, ``moves/``, ``mutants/``, ``reference/``).
        moves: the moves, in library order (each after what it requires).
        sweeps: the sweeps.
        check: the critic's quick local check (``moves.yaml``'s ``check``).
        header: the comment heading ``moves.yaml``.
        probe: the critic's long decode (``moves.yaml``'s ``probe``), if the task has one.
        directions: the directions a move may name (empty: any).
        kinds: the kinds a move may be (empty: any).
    """

    task: Path
    moves: list[Move]
    sweeps: list[Sweep]
    check: list[str]
    header: str
    probe: Mapping[str, Any] | None = None
    directions: Sequence[str] = ()
    kinds: Sequence[str] = ()

    @property
    def template(self) -> Path:
        """The task's template folder."""
        return self.task / "template"

    def by_name(self) -> dict[str, Move]:
        """Every move by its name."""
        return {m.name: m for m in self.moves}

    def goods(self) -> list[str]:
        """The good moves, in library order: together they make the reference solution."""
        return [m.name for m in self.moves if m.kind == "good"]

    def closure(self, names: Iterable[str]) -> list[str]:
        """``names`` and every move they require, transitively, in library order."""
        moves = self.by_name()
        need: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name not in need:
                need.add(name)
                todo.extend(moves[name].requires)
        return [m.name for m in self.moves if m.name in need]

    def _repo(self, where: Path, base: list[str], committed: bool) -> Path:
        """A fresh repository of the template with the moves ``base`` applied (committed)."""
        repo = fresh_repo(where, self.template)
        moves = self.by_name()
        for name in base:
            apply_edits(repo, moves[name].edits, name, self.task)
        if base and committed:
            commit(repo, "base")
        return repo

    def move_patch(self, move: Move, where: Path) -> str:
        """``move``'s patch: against the template with its requirements applied."""
        repo = self._repo(where, self.closure(move.requires), committed=True)
        apply_edits(repo, move.edits, move.name, self.task)
        return diff(repo)

    def reference_patch(self, where: Path) -> str:
        """The reference solution: every good move on the template, whole."""
        return diff(self._repo(where, self.goods(), committed=False))

    def mutant_patch(self, mutant: Mutant, where: Path) -> str:
        """``mutant``'s patch, whole (its base moves included)."""
        base = self.goods() if mutant.on_reference else self.closure(mutant.moves)
        repo = self._repo(where, base, committed=False)
        apply_edits(repo, mutant.edits, mutant.name, self.task)
        return diff(repo)

    def _validate(self) -> None:
        """Each move after its requirements, of a known direction and kind.

        Raises:
            PatchError: one is not.
        """
        done: set[str] = set()
        for move in self.moves:
            if missing := set(move.requires) - done:
                raise PatchError(f"{move.name} is listed before its requirements {sorted(missing)}")
            if (self.directions and move.direction not in self.directions) or (
                self.kinds and move.kind not in self.kinds
            ):
                raise PatchError(f"{move.name}: bad direction or kind")
            done.add(move.name)

    def data(self) -> dict[str, Any]:
        """What ``moves.yaml`` and ``moves.json`` hold."""
        data: dict[str, Any] = {
            "moves": [m.entry() for m in self.moves],
            "sweeps": [s.entry() for s in self.sweeps],
            "check": self.check,
        }
        if self.probe is not None:
            data["probe"] = self.probe
        return data

    def write_moves(self, out: Path | None = None) -> dict[str, Any]:
        """Write every move's patch, ``moves.yaml`` and ``moves.json`` into ``out`` (default
        ``moves/``), removing patches of moves no longer listed; returns the data."""
        out = out or self.task / "moves"
        self._validate()
        out.mkdir(exist_ok=True)
        keep = {f"{m.name}.patch" for m in self.moves}
        for stale in out.glob("*.patch"):
            if stale.name not in keep:
                stale.unlink()
        with tempfile.TemporaryDirectory() as tmp:
            for i, move in enumerate(self.moves):
                (out / f"{move.name}.patch").write_text(self.move_patch(move, Path(tmp) / f"m{i}"))
        data = self.data()
        dumped = yaml.safe_dump(data, sort_keys=False, width=100)
        (out / "moves.yaml").write_text(self.header + dumped)
        # The same data for the scripted agent, which reads it with the standard library only.
        (out / "moves.json").write_text(json.dumps(data, indent=1) + "\n")
        return data

    def write_reference(self) -> None:
        """Write ``reference/solution.patch``: every good move, in library order."""
        (self.task / "reference").mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            patch = self.reference_patch(Path(tmp))
        (self.task / "reference" / "solution.patch").write_text(patch)

    def write_mutants(self, mutants: Iterable[Mutant], prune: bool = False) -> list[Path]:
        """Write each mutant's patch into ``mutants/`` (``prune``: removing the other
        patches there first); returns the files written."""
        out = self.task / "mutants"
        out.mkdir(exist_ok=True)
        if prune:
            for old in out.glob("*.patch"):
                old.unlink()
        written = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, mutant in enumerate(mutants):
                (out / f"{mutant.name}.patch").write_text(
                    self.mutant_patch(mutant, Path(tmp) / f"x{i}")
                )
                written.append(out / f"{mutant.name}.patch")
        return written
