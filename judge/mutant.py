"""A mutant: a known candidate and the verdict the judge must give it.

Kinds derive generated mutants (``TaskKind.generated_mutants``), tasks list their own in
``mutants.yaml``; the preflight builds one repository of them. A generated mutant may carry
its own ``serve`` argv (a wrapper in its tree); the preflight records those overrides beside
its repository, and the evaluator honours them for that repository's commits alone, so no
agent can choose how its own candidate is served.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from judge.integrity import in_zone

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from judge.private import JudgeHome
    from judge.queue import Job

SERVE_FILE = "mutant-serve.json"


# gen_b1_random_slow: 2 of every 5 lone requests this many times as slow. At 3x (a geometric
# 1.55x) its excess over a 1.3x limit (the stub server's) was too small for 192 pairs to resolve
# on this machine's noise (CI of stop 32: B=1 ratio 1.46, p 0.00066 against 0.00033); at 5x (a
# geometric 1.90x, the mean 2.6x) it lies as far beyond such a limit as the 2x mutants.
RANDOM_SLOW_FACTOR = 5.0
RANDOM_SLOW_SHARE = 0.4


# A generated mutant's wrapper folder: a top-level name no import can reach (it has a dot),
# outside any sane frozen zone.
WRAP_DIRS = (".swarmlab_mutant", ".swarmlab_mutant_wrap")


def wrap_dir(task: DictConfig) -> str:
    """The first of :data:`WRAP_DIRS` outside ``task``'s frozen zone: where a kind's generated
    mutant puts the wrapper it is served through.

    Raises:
        ValueError: the frozen zone covers every one.
    """
    frozen = list(task.frozen)
    for name in WRAP_DIRS:
        if not in_zone(f"{name}/wrap.py", frozen):
            return name
    raise ValueError(f"task {task.name}: its frozen zone covers every wrapper folder {WRAP_DIRS}")


def random_slow_margin(b1_max_regression: float) -> float:
    """How far gen_b1_random_slow's true B=1 ratio (geometric) lies beyond the limit."""
    return round(RANDOM_SLOW_FACTOR**RANDOM_SLOW_SHARE - (1.0 + b1_max_regression), 4)


@dataclass(frozen=True)
class Mutant:
    """A known candidate and the verdict the judge must give it."""

    name: str
    patch: str | None
    expect: str
    reason: str | None = None
    min_x_baseline: float | None = None
    max_x_baseline: float | None = None
    # For a B=1 regression mutant: how far its true regression lies beyond the spec's limit.
    # The judge can only be asked to convict it where its B=1 resolution is at least this fine.
    b1_margin: float | None = None
    # Other verdicts that are as right as ``expect``, each "VERDICT" or "VERDICT (reason)", with
    # no bound on x: e.g. a PASS-expected mutant served through a relaying wrapper is really a
    # little slower alone in flight, so a B=1 regression is a true finding too, not the judge's
    # error (gen_serial's B=1 ratio measured 0.976-1.061 against a limit of 1.05).
    also_accept: tuple[str, ...] = ()
    # Text that must not appear in the verdict's detail (an engine's words carried out).
    detail_excludes: list[str] = field(default_factory=list)
    why: str = ""
    # A generated mutant: edits a checkout of the template in place (instead of a patch).
    tree: Callable[[Path], None] | None = field(default=None, compare=False, repr=False)
    # The candidate's serve argv for this mutant (a wrapper in its tree); None: the task's.
    serve: list[str] | None = None
    # "generated" (the task kind derived it) or "task" (the task's mutants.yaml).
    source: str = "task"


def record_serve(home: JudgeHome, overrides: dict[str, list[str]]) -> None:
    """Remember which of the mutant repository's commits are served how (preflight only)."""
    (home.root / SERVE_FILE).write_text(json.dumps(overrides, indent=1))


def candidate_serve(home: JudgeHome, job: Job) -> list[str] | None:
    """The serve argv this job's candidate runs under, if it is one of the judge's own
    generated mutants with a wrapper; None: the task's own ``serve``."""
    mutant_repo = home.root / "mutants"
    try:
        if Path(job.repo).resolve() != mutant_repo.resolve():
            return None
        overrides = json.loads((home.root / SERVE_FILE).read_text())
    except (OSError, ValueError):
        return None
    argv = overrides.get(job.commit)
    return [str(a) for a in argv] if isinstance(argv, list) else None


def frozen_zone_mutants(template: Path, frozen: list[str]) -> list[Mutant]:
    """Every kind's frozen-zone mutants of ``template``: one byte appended to its first frozen
    file, and a file added inside its first frozen folder (``dir/**``); each a REJECT
    ``frozen_zone``. None where the zone has no file (or no folder)."""
    mutants = []
    files = _frozen_files(template, frozen)
    if files:
        mutants.append(
            Mutant(
                name="gen_frozen_edit",
                patch=None,
                expect="REJECT",
                reason="frozen_zone",
                why=f"one byte appended to the frozen {files[0]}",
                tree=partial(_edit_frozen_byte, rel=files[0]),
                source="generated",
            )
        )
    folders = [p[:-3] for p in frozen if p.endswith("/**")]
    if folders:
        added = f"{folders[0]}/generated_mutant_added.txt"
        mutants.append(
            Mutant(
                name="gen_frozen_added",
                patch=None,
                expect="REJECT",
                reason="frozen_zone",
                why=f"a file added inside the frozen zone ({added})",
                tree=partial(_add_frozen_file, rel=added),
                source="generated",
            )
        )
    return mutants


def _edit_frozen_byte(tree: Path, rel: str) -> None:
    path = tree / rel
    # One byte more at the end: still valid source in every language the zone might hold.
    path.write_bytes(path.read_bytes() + b"\n")


def _add_frozen_file(tree: Path, rel: str) -> None:
    path = tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("added by a generated mutant: any file added to the frozen zone\n")


def _frozen_files(template: Path, frozen: list[str]) -> list[str]:
    return sorted(
        p.relative_to(template).as_posix()
        for p in template.rglob("*")
        if p.is_file() and in_zone(p.relative_to(template).as_posix(), frozen)
    )
