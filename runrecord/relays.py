"""Relays, from an arm's submission repository (``arms/<arm>/submissions.git``).

A **relay** is a PASS by agent X whose nearest PASS ancestor by another agent Y finished before
it, with no PASS of X's own in between (the first time X took up Y's work; later PASSes of X on
the same line are not counted again). One ``git log`` per repository gives the whole commit
graph; the rest is walks in Python over the *submission graph* (each submitted commit linked to
its nearest submitted ancestors, or to the arm's start commit).
"""

from __future__ import annotations

import json
import subprocess
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runrecord.facts import Judged
from runrecord.names import PSEUDO_AGENTS


def _git_log(repo: Path) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), "log", "--all", "--format=%H %P"],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    return result.stdout if result.returncode == 0 else ""


@dataclass
class CommitGraph:
    """Parents of every commit reachable from any ref of one repository."""

    repo: Path
    parents: dict[str, list[str]]

    @classmethod
    def load(cls, repo: Path) -> CommitGraph:
        """Read the graph with one ``git log`` (empty for a missing repository)."""
        out = _git_log(Path(repo)) if Path(repo).is_dir() else ""
        parents = {}
        for line in out.splitlines():
            sha, *rest = line.split()
            parents[sha] = rest
        return cls(Path(repo), parents)

    def nearest(self, commit: str, targets: set[str]) -> list[str]:
        """The nearest proper ancestors of ``commit`` that are in ``targets`` (walks stop there)."""
        found: list[str] = []
        seen = {commit}
        queue = deque(self.parents.get(commit, []))
        while queue:
            sha = queue.popleft()
            if sha in seen:
                continue
            seen.add(sha)
            if sha in targets:
                found.append(sha)
            else:
                queue.extend(self.parents.get(sha, []))
        return sorted(found)


def submission_parents(graph: CommitGraph, commits: set[str], start: str | None) -> dict:
    """Each submitted commit's nearest submitted ancestors (or the start commit)."""
    targets = set(commits) | ({start} if start else set())
    return {c: graph.nearest(c, targets) for c in sorted(commits)}


def relay_pairs(
    graph: CommitGraph, judged: Iterable[Judged], start: str | None = None
) -> list[tuple[Judged, Judged]]:
    """Every relay of one arm: (later PASS, the other agent's PASS it first built on) pairs.

    Args:
        graph: The arm's submission repository.
        judged: The arm's evaluations (pseudo-agents' are left out here).
        start: The arm's start commit (walks stop there).

    Returns:
        The pairs, the later PASSes in order of finishing (a commit judged twice counts once, at
        its first PASS), each one's sources in the order the walk met them.
    """
    mine = [j for j in judged if j.agent not in PSEUDO_AGENTS]
    passes: list[Judged] = []
    seen_commits: set[str] = set()
    ordered = sorted(
        (j for j in mine if j.verdict == "PASS"), key=lambda j: (j.finished_at, j.job_id)
    )
    for j in ordered:
        if j.commit not in seen_commits:
            seen_commits.add(j.commit)
            passes.append(j)
    if not passes:
        return []
    parents = submission_parents(graph, {j.commit for j in mine}, start)
    by_commit = {j.commit: j for j in passes}
    pairs = []
    for later in passes:
        seen: set[str] = set()
        queue = deque(parents.get(later.commit, []))
        while queue:
            sha = queue.popleft()
            if sha in seen:
                continue
            seen.add(sha)
            earlier = by_commit.get(sha)
            if earlier is None:  # not a PASS (or the start): look further back
                queue.extend(parents.get(sha, []))
                continue
            if earlier.agent != later.agent and earlier.finished_at < later.finished_at:
                pairs.append((later, earlier))
            # Either way the walk stops at a PASS: beyond an own PASS the pickup was earlier,
            # beyond another's PASS lies that agent's own history.
    return pairs


def relay_count(pairs: Iterable[tuple[Judged, Judged]]) -> int:
    """How many PASSes were relays (one PASS built on two others' counts once)."""
    return len({later.job_id for later, _ in pairs})


def start_commit(run_dir: Path, arm: str, meta: Mapping[str, Any]) -> str | None:
    """The commit an arm started from (``arms/<arm>/arm.json``; else the run's ``start_commit``)."""
    path = Path(run_dir) / "arms" / arm / "arm.json"
    if path.is_file():
        try:
            commit = json.loads(path.read_text()).get("commit")
        except (OSError, ValueError):
            commit = None
        if commit:
            return str(commit)
    value = meta.get("start_commit")
    return str(value) if value else None
