"""The arms' paths side by side: each arm's improvements, and which of them the arms share.

An **improvement** is a PASS that raised its arm's best ``x_baseline`` (in order of the judge
finishing). Its **base** is the commit it built on: its nearest PASSed ancestor among the arm's
submitted commits (walking through submitted commits that did not pass), or the arm's start
commit. What it changed is read from ``git diff base commit`` in the arm's ``submissions.git``:
the files, the Python functions (git's own hunk headers), and the added and removed lines.

Improvements are **matched across arms by code, not by meaning**: two improvements of two arms
are the same step when their changed lines are alike (the Jaccard index of the two sets of
normalised added/removed lines, at least :data:`SIMILAR`), or, failing any such pair, when
they changed exactly the same non-empty set of functions. Pairs are taken greedily, best
first, one partner per arm each; across three or more arms the pairs join into groups. Two
different ideas written alike are matched; one idea written two ways (other functions, other
lines) is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from analysis._git import _DEF, Changes, _git
from runrecord import PSEUDO_AGENTS, CommitGraph

#: Jaccard index of changed lines from which two improvements are the same step.
SIMILAR = 0.5

#: Said wherever matches are shown: what the matching can and cannot see.
LABEL = (
    "Matched by code, not by meaning: two arms' improvements are paired when their diffs "
    "change alike lines (or, failing that, exactly the same functions); the same idea written "
    "differently is not paired, and different ideas written alike are."
)

_SPACE = re.compile(r"\s+")


@dataclass
class Improvement:
    """One PASS that raised its arm's best."""

    arm: str
    agent: str
    job_id: int
    commit: str
    base: str | None
    base_x: float | None  # the base's x_baseline (None: the start commit)
    x: float
    gain_x: float  # over the arm's best before it (1.0, the baseline, at first)
    t_end_s: float
    message: str
    files: list[str] = field(default_factory=list)
    functions: dict[str, list[str]] = field(default_factory=dict)
    lines: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        """A stable id within a run: ``arm:job``."""
        return f"{self.arm}:{self.job_id}"

    def describe(self) -> str:
        """Files and functions, as ``file (f, g); other``."""
        return Changes(self.files, self.functions).describe()


@dataclass
class Step:
    """One matched group: the improvements (the first per arm) judged to be the same step, and
    any later improvement of an arm that made the same change again (on another line)."""

    members: dict[str, Improvement]  # by arm
    again: list[Improvement] = field(default_factory=list)

    def found_by(self, arms: list[str]) -> str:
        """``both arms`` / ``all arms``, ``only <arm>``, or ``<arm> and <arm>``."""
        have = [a for a in arms if a in self.members]
        if len(have) == len(arms):
            return "both arms" if len(arms) == 2 else "all arms"
        if len(have) == 1:
            return f"only {have[0]}"
        return " and ".join(have)

    @property
    def first_t_s(self) -> float:
        return min(m.t_end_s for m in self.members.values())


# Commits never change: the live view rebuilds every few seconds and asks again.
@lru_cache(maxsize=4096)
def diff_of(repo: Path, base: str, commit: str) -> tuple[Changes, frozenset[str]]:
    """Files, functions and normalised changed lines from ``base`` to ``commit``.

    Lines are kept with their sign, file and enclosing function (``engine.py:moe:+x = 1``),
    whitespace collapsed, blank ones dropped: the same edit applied on two bases reads the same.
    """
    diff = _git(repo, "diff", "-U0", "--no-color", "--no-ext-diff", base, commit, attributes=True)
    files: dict[str, set[str]] = {}
    lines: set[str] = set()
    current, where = None, ""
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            current, where = line.rsplit(" b/", 1)[-1], ""
            files.setdefault(current, set())
        elif current is None:
            continue
        elif line.startswith("@@"):
            match = _DEF.match(line.split("@@", 2)[-1])
            where = match.group(1) if match else ""
            if match:
                files[current].add(match.group(1))
        elif line[:1] in "+-" and not line.startswith(("+++", "---")):
            match = _DEF.match(line[1:])
            if match:
                files[current].add(match.group(1))
            text = _SPACE.sub(" ", line[1:]).strip()
            if text:
                # The enclosing function too: one edit made in two functions is two edits.
                lines.add(f"{current}:{where}:{line[0]}{text}")
    changes = Changes(
        files=sorted(files), functions={k: sorted(v) for k, v in sorted(files.items()) if v}
    )
    return changes, frozenset(lines)


def improvements(
    repo: Path,
    evaluations: pd.DataFrame,
    start: str | None,
    graph: CommitGraph | None = None,
    messages: dict[str, str] | None = None,
) -> list[Improvement]:
    """The improvements of one arm, in order of finishing.

    Args:
        repo: The arm's ``submissions.git``.
        evaluations: The arm's rows of the ``evaluations`` table (``job_id``, ``arm``, ``agent``,
            ``commit``, ``verdict``, ``x_baseline``, ``t_end_s``).
        start: The arm's start commit.
        graph: The repository's graph if already loaded.
        messages: Commit messages by commit (the submission's message), for display.

    Returns:
        One :class:`Improvement` per PASS that raised the arm's best.
    """
    ev = evaluations[~evaluations["agent"].isin(list(PSEUDO_AGENTS))]
    passes = ev[(ev["verdict"] == "PASS") & ev["x_baseline"].notna()]
    passes = passes.sort_values(["t_end_s", "job_id"]).drop_duplicates("commit")
    if passes.empty:
        return []
    graph = graph or CommitGraph.load(repo)
    x_of = dict(zip(passes["commit"], passes["x_baseline"].astype(float), strict=True))
    targets = set(x_of) | ({start} if start else set())
    out: list[Improvement] = []
    best = 1.0
    for row in passes.itertuples(index=False):
        x = float(row.x_baseline)
        if x <= best:
            continue
        ups = graph.nearest(row.commit, targets)
        # Of several PASSed ancestors (a merge), the best one is what it built on.
        base = max(ups, key=lambda c: x_of.get(c, 0.0)) if ups else start
        changes, lines = diff_of(repo, base, row.commit) if base else (Changes(), frozenset())
        out.append(
            Improvement(
                arm=str(row.arm),
                agent=str(row.agent),
                job_id=int(row.job_id),
                commit=str(row.commit),
                base=base,
                base_x=x_of.get(base) if base else None,
                x=x,
                gain_x=x - best,
                t_end_s=float(row.t_end_s),
                message=(messages or {}).get(str(row.commit), ""),
                files=changes.files,
                functions=changes.functions,
                lines=lines,
            )
        )
        best = x
    return out


def similarity(a: Improvement, b: Improvement) -> float:
    """Jaccard index of two improvements' changed lines (0 when either changed none)."""
    if not a.lines or not b.lines:
        return 0.0
    return len(a.lines & b.lines) / len(a.lines | b.lines)


def _functions(imp: Improvement) -> frozenset[str]:
    return frozenset(f"{f}:{fn}" for f, fns in imp.functions.items() for fn in fns)


def match_pairs(
    a: list[Improvement], b: list[Improvement], threshold: float = SIMILAR
) -> list[tuple[Improvement, Improvement, str]]:
    """One-to-one pairs of two arms' improvements: ``(a, b, why)``, ``why`` being
    ``similar diff (J=0.83)`` or ``same functions``."""
    scored = [
        (similarity(x, y), i, j) for i, x in enumerate(a) for j, y in enumerate(b)
    ]  # fmt: skip
    used_a: set[int] = set()
    used_b: set[int] = set()
    pairs: list[tuple[Improvement, Improvement, str]] = []
    for score, i, j in sorted(scored, key=lambda s: (-s[0], s[1], s[2])):
        if score < threshold or i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        pairs.append((a[i], b[j], f"similar diff (J={score:.2f})"))
    for i, x in enumerate(a):
        if i in used_a or not _functions(x):
            continue
        for j, y in enumerate(b):
            if j not in used_b and _functions(x) == _functions(y):
                used_a.add(i)
                used_b.add(j)
                pairs.append((x, y, "same functions"))
                break
    return pairs


def match_steps(by_arm: dict[str, list[Improvement]]) -> tuple[list[Step], dict[str, str]]:
    """Every improvement of every arm in one group with its matches in the other arms.

    Returns:
        The groups, in order of the first finish among their members, and why each matched
        improvement (by :attr:`Improvement.key`) was paired.
    """
    arms = list(by_arm)
    imps = {i.key: i for items in by_arm.values() for i in items}
    group_of = {k: k for k in imps}
    members: dict[str, set[str]] = {k: {k} for k in imps}
    why: dict[str, str] = {}
    for n, first in enumerate(arms):
        for second in arms[n + 1 :]:
            for x, y, reason in match_pairs(by_arm[first], by_arm[second]):
                gx, gy = group_of[x.key], group_of[y.key]
                # A group holds one improvement per arm: a pair that would put two of one arm
                # together (through a third arm) is left out.
                if gx == gy or {imps[k].arm for k in members[gx]} & {
                    imps[k].arm for k in members[gy]
                }:
                    continue
                for k in members.pop(gy):
                    group_of[k] = gx
                    members[gx].add(k)
                why.setdefault(x.key, reason)
                why.setdefault(y.key, reason)
    steps = [Step({imps[k].arm: imps[k] for k in keys}) for keys in members.values()]
    # An arm may make the same change twice (a seat re-applying it on a line that lacked it):
    # a lone improvement whose diff is like a member's of its own arm joins that step, again.
    lone = [s for s in steps if len(s.members) == 1]
    for step in sorted(lone, key=lambda s: s.first_t_s):
        (imp,) = step.members.values()
        best = max(
            (
                (similarity(imp, m), -other.first_t_s, n)
                for n, other in enumerate(steps)
                if other is not step and other.members.get(imp.arm) is not None
                for m in [other.members[imp.arm]]
                if m.t_end_s < imp.t_end_s
            ),
            default=None,
        )
        if best is not None and best[0] >= SIMILAR:
            target = steps[best[2]]
            target.again.append(imp)
            why.setdefault(imp.key, f"again (J={best[0]:.2f})")
            step.members = {}
    steps = [s for s in steps if s.members]
    steps.sort(key=lambda s: (s.first_t_s, min(m.key for m in s.members.values())))
    return steps, why


def pair_truth(
    by_arm: dict[str, list[Improvement]], moves: dict[str, frozenset[str]]
) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """Ground-truth and matched cross-arm pairs, given each improvement's moves (scripted runs).

    A true pair is two improvements of two arms that brought the same set of moves; a matched
    pair is two improvements in one group of :func:`match_steps`.
    """
    steps, _ = match_steps(by_arm)
    found = set()
    for step in steps:
        keys = sorted(m.key for m in [*step.members.values(), *step.again])
        found |= {
            (p, q)
            for n, p in enumerate(keys)
            for q in keys[n + 1 :]
            if p.split(":")[0] != q.split(":")[0]  # the truth holds cross-arm pairs only
        }
    all_imps = sorted((i for items in by_arm.values() for i in items), key=lambda i: i.key)
    truth = {
        (p.key, q.key)
        for n, p in enumerate(all_imps)
        for q in all_imps[n + 1 :]
        if p.arm != q.arm and moves.get(p.key) and moves.get(p.key) == moves.get(q.key)
    }
    return truth, found


def precision_recall(truth: set, found: set) -> tuple[float, float]:
    """Precision and recall of ``found`` against ``truth`` (1.0 for an empty denominator)."""
    hits = len(truth & found)
    return (hits / len(found) if found else 1.0, hits / len(truth) if truth else 1.0)


def moves_between(repo: Path, base: str | None, commit: str) -> frozenset[str]:
    """The scripted agents' ``Move:`` trailers of the commits in ``base..commit``."""
    spec = f"{base}..{commit}" if base else commit
    out = _git(repo, "log", "--format=%(trailers:key=Move,valueonly,separator=%x2C)", spec)
    return frozenset(n.strip() for line in out.splitlines() for n in line.split(",") if n.strip())


def arm_paths(
    run_dir: Path,
    arms: Iterable[str],
    evaluations: pd.DataFrame,
    starts: dict[str, str | None],
    messages: dict[str, str] | None = None,
) -> dict[str, list[Improvement]]:
    """:func:`improvements` of each arm that has a ``submissions.git`` in ``run_dir``."""
    out = {}
    for arm in arms:
        repo = Path(run_dir) / "arms" / arm / "submissions.git"
        if not repo.is_dir():
            continue
        ev = evaluations[evaluations["arm"] == arm]
        out[arm] = improvements(repo, ev, starts.get(arm), messages=messages)
    return out
