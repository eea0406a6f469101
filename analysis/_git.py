"""Ancestry of an arm's submissions (``arms/<arm>/submissions.git``): relays and dead ends.

One ``git log`` per repository gives the whole commit graph; everything after that is walks in
Python over the *submission graph* (each submitted commit linked to its nearest submitted
ancestors, or to the arm's start commit). Only the dead-end ledger asks git again, once per dead
direction, for the files and functions it changed.

Definitions (what the report prints):

- **relay**: a PASS by agent X whose nearest PASS ancestor by another agent Y finished before it,
  with no PASS of X's own in between (the first time X took up Y's work; later PASSes of X on
  the same line are not counted again).
- **kept**: the arm's best PASS and every PASS another agent relayed from, with all their
  submitted ancestors.
- **dead end**: a line of one agent's submitted commits, none of them kept: a direction that
  never reached a PASS that the arm's result or another agent built on.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from runrecord import (
    JUDGED_FIELDS,
    PSEUDO_AGENTS,
    CommitGraph,
    judged_rows,
    relay_pairs,
    submission_parents,
)

__all__ = [
    "PSEUDO_AGENTS",
    "Changes",
    "CommitGraph",
    "DeadEnd",
    "changes",
    "dead_ends",
    "relay_table",
    "submission_parents",
]

RELAY_COLUMNS = [
    "arm", "to_job", "to_agent", "to_commit", "to_score", "to_t_end_s", "from_job", "from_agent",
    "from_commit", "from_score", "from_t_end_s"
]  # fmt: skip


def _git(repo: Path, *args: str, attributes: bool = False) -> str:
    prefix = ["-c", f"core.attributesFile={_python_attributes()}"] if attributes else []
    result = subprocess.run(
        ["git", *prefix, "-C", str(repo), *args],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    return result.stdout if result.returncode == 0 else ""


def _python_attributes() -> str:
    # Git's built-in Python hunk headers name the enclosing def; a bare repository has no
    # .gitattributes, so one is supplied from outside (the run directory is never written).
    # Checked on every call, not cached: a temporary folder can be emptied under a long-lived
    # process (a test's tmp dir), and a missing file silently drops every function name.
    path = Path(tempfile.gettempdir()) / "swarmlab-analysis.gitattributes"
    if not path.exists():
        path.write_text("*.py diff=python\n")
    return str(path)


def relay_table(
    repo: Path,
    evaluations: pd.DataFrame,
    graph: CommitGraph | None = None,
    start: str | None = None,
) -> pd.DataFrame:
    """Every relay of one arm (``runrecord.relays``), one row per (PASS, source) pair.

    Args:
        repo: The arm's ``submissions.git``.
        evaluations: The arm's rows of the ``evaluations`` table.
        graph: The repository's graph if already loaded.
        start: The arm's start commit (walks stop there).

    Returns:
        Rows with ``RELAY_COLUMNS``, sorted by the later PASS's job id then the source's.
    """
    judged = judged_rows(evaluations[list(JUDGED_FIELDS)].itertuples(index=False, name=None))
    if not any(j.verdict == "PASS" and j.agent not in PSEUDO_AGENTS for j in judged):
        return pd.DataFrame(columns=RELAY_COLUMNS)
    pairs = relay_pairs(graph or CommitGraph.load(repo), judged, start)
    by_job = evaluations.set_index("job_id")
    rows = [
        [
            later.arm,
            later.job_id,
            later.agent,
            later.commit,
            by_job.at[later.job_id, "score"],
            by_job.at[later.job_id, "t_end_s"],
            earlier.job_id,
            earlier.agent,
            earlier.commit,
            by_job.at[earlier.job_id, "score"],
            by_job.at[earlier.job_id, "t_end_s"],
        ]
        for later, earlier in pairs
    ]
    table = pd.DataFrame(rows, columns=RELAY_COLUMNS)
    return table.sort_values(["to_job", "from_job"], ignore_index=True)


# -- dead ends -------------------------------------------------------------------------------


@dataclass
class Changes:
    """Files and Python functions a range of commits touched."""

    files: list[str] = field(default_factory=list)
    functions: dict[str, list[str]] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for name in self.files:
            funcs = self.functions.get(name)
            parts.append(f"{name} ({', '.join(funcs)})" if funcs else name)
        return "; ".join(parts) if parts else "no file changes"


_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")


def changes(repo: Path, base: str, tips: list[str]) -> Changes:
    """Files and functions changed from ``base`` to each of ``tips`` (union over tips)."""
    files: dict[str, set[str]] = {}
    for tip in tips:
        diff = _git(repo, "diff", "-U0", "--no-color", "--no-ext-diff", base, tip, attributes=True)
        current = None
        for line in diff.splitlines():
            if line.startswith("diff --git "):
                current = line.rsplit(" b/", 1)[-1]
                files.setdefault(current, set())
            elif current is None:
                continue
            elif line.startswith("@@"):
                head = line.split("@@", 2)[-1]
                match = _DEF.match(head)
                if match:
                    files[current].add(match.group(1))
            elif line[:1] in "+-" and not line.startswith(("+++", "---")):
                match = _DEF.match(line[1:])
                if match:
                    files[current].add(match.group(1))
    return Changes(
        files=sorted(files), functions={k: sorted(v) for k, v in sorted(files.items()) if v}
    )


@dataclass
class DeadEnd:
    """One abandoned direction: a line of one agent's submitted commits, none of them kept."""

    arm: str
    agent: str
    commits: list[str]
    verdicts: list[str]
    messages: list[str]
    base: str | None
    base_owner: str
    t_first_s: float
    t_last_s: float
    # The direction's best PASS (the highest x_baseline, which reads the same way for every
    # metric): its score, in the run's metric, and its x_baseline.
    best_score: float | None
    best_x_baseline: float | None
    changes: Changes | None
    declared: list[str]


def dead_ends(
    repo: Path,
    submissions: pd.DataFrame,
    relays: pd.DataFrame,
    best_commit: str | None,
    start: str | None,
    messages: pd.DataFrame | None = None,
    graph: CommitGraph | None = None,
    max_diffs: int = 200,
) -> list[DeadEnd]:
    """The dead-end ledger of one arm (see the module docstring).

    Args:
        repo: The arm's ``submissions.git``.
        submissions: The arm's rows of the ``submissions`` table.
        relays: The arm's :func:`relay_table`.
        best_commit: The arm's best PASS commit, if any.
        start: The arm's start commit.
        messages: The arm's board (``dead_end`` posts naming a commit are quoted).
        graph: The repository's graph if already loaded.
        max_diffs: Ask git for changed files of at most this many directions (the newest ones
            keep theirs); the rest are listed without files.

    Returns:
        One :class:`DeadEnd` per direction, in order of its first submission.
    """
    # A submission the judge never scored was cut off by the deadline, not abandoned.
    subs = submissions[
        ~submissions["agent"].isin(list(PSEUDO_AGENTS))
        & (submissions["verdict"] != "not evaluated")
    ].sort_values("submission_id")
    if subs.empty:
        return []
    graph = graph or CommitGraph.load(repo)
    commits = set(subs["commit"])
    parents = submission_parents(graph, commits, start)
    first = subs.drop_duplicates("commit")
    owner = dict(zip(first["commit"], first["agent"], strict=True))
    kept_roots = set(relays["from_commit"]) if len(relays) else set()
    if best_commit:
        kept_roots.add(best_commit)
    kept: set[str] = set()
    queue = deque(c for c in kept_roots if c in commits)
    while queue:
        sha = queue.popleft()
        if sha in kept or sha not in commits:
            continue
        kept.add(sha)
        queue.extend(parents.get(sha, []))
    dead = [c for c in first["commit"] if c not in kept]
    # A dead commit joins its parent's direction when the parent is dead and the same agent's.
    root: dict[str, str] = {}
    for sha in dead:  # submission order: parents come first
        ups = [p for p in parents.get(sha, []) if p in root and owner.get(p) == owner[sha]]
        root[sha] = root[ups[0]] if ups else sha
    lines: dict[str, list[str]] = {}
    for sha in dead:
        lines.setdefault(root[sha], []).append(sha)
    declared: dict[str, list[str]] = {}
    if messages is not None and len(messages):
        posts = messages[(messages["kind"] == "dead_end") & messages["ref_commit"].notna()]
        for commit, text in zip(posts["ref_commit"], posts["text"], strict=True):
            declared.setdefault(commit, []).append(text)
    rows = {c: g for c, g in subs.groupby("commit", sort=False)}
    ledger = []
    heads = list(lines)
    with_diffs = set(heads[-max_diffs:]) if max_diffs > 0 else set()
    for head in heads:
        members = lines[head]
        base_list = [p for p in parents.get(head, []) if p not in members]
        base = base_list[0] if base_list else start
        member_set = set(members)
        tips = [c for c in members if not any(c in parents.get(o, []) for o in member_set)]
        group = pd.concat([rows[c] for c in members])
        passes = group[group["verdict"] == "PASS"].dropna(subset=["x_baseline"])
        top = passes.loc[passes["x_baseline"].idxmax()] if len(passes) else None
        ledger.append(
            DeadEnd(
                arm=str(group["arm"].iloc[0]),
                agent=owner[head],
                commits=members,
                verdicts=[_verdict(rows[c]) for c in members],
                messages=[
                    str(rows[c]["message"].iloc[0]).splitlines()[0]
                    if str(rows[c]["message"].iloc[0])
                    else ""
                    for c in members
                ],
                base=base,
                base_owner=("start" if base == start else owner.get(base, "?")) if base else "?",
                t_first_s=float(group["t_s"].min()),
                t_last_s=float(group["t_s"].max()),
                best_score=float(top["score"]) if top is not None else None,
                best_x_baseline=float(top["x_baseline"]) if top is not None else None,
                changes=changes(repo, base, tips) if base and head in with_diffs else None,
                declared=[t for c in members for t in declared.get(c, [])],
            )
        )
    return ledger


def _verdict(rows: pd.DataFrame) -> str:
    row = rows.iloc[-1]
    if (rows["verdict"] == "PASS").any():
        row = rows[rows["verdict"] == "PASS"].iloc[0]
        x = row["x_baseline"]
        return f"PASS {x:.2f}x" if pd.notna(x) else "PASS"
    reason = row["reason"]
    return f"{row['verdict']} {reason}".strip() if isinstance(reason, str) else str(row["verdict"])
