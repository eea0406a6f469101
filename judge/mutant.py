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
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judge.private import JudgeHome
    from judge.queue import Job

SERVE_FILE = "mutant-serve.json"


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
