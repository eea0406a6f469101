"""Judge throughput, naive pipeline against staged, on the mixed workload a demo makes.

Evaluations per hour, whether the verdicts are the same, and whether the noise of x grew.

    .venv/bin/python bench/judge_throughput.py [--rounds 2] [--quick] [--private-dir DIR]

One round is a fixed list of submissions of task decode_cpu, queued at once as a demo's agents
would queue them: PASSes at several speeds (the unmodified baseline, the reference solution,
moves of the scripted agents' library applied to the template), WRONGs caught by each check
(mutants of the task's catalogue: tokens, batch-size transitions, the prefill cap, the
protocol, B=1, a hang), REJECTs (frozen-zone edits, shadowing) and duplicates (a tree already
submitted in that round, under another commit, same arm), then the unmodified baseline again
as re-judgements (never deduplicated), for the noise of x.

Each round is judged twice, by ``judge.pipeline=naive judge.duplicates=off`` and by
``judge.pipeline=staged`` with the default ``judge.duplicates``, one after the other; the order
alternates from round to round (naive first, then staged first, ...), so slow drift of the
machine hits both. Each pipeline's rounds use arms of their own (named after this invocation),
so nothing is reused across pipelines, rounds or earlier runs of this script.

Prints a table per pipeline (evaluations/hour = submissions answered / wall time of the judge),
every submission's verdict in both, whether every verdict and reason is identical, and the
standard deviation of x_baseline over the unmodified baseline's evaluations in each. Its last
line is ``judge throughput: naive N.N/h, staged M.M/h, ratio R.RR, identical verdicts: yes|no,
noise old S.SS new S.SS``. The numbers come from this one run on a shared machine.
"""

from __future__ import annotations

import argparse
import inspect
import math
import secrets
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.stats import spread_test
from judge import JudgeConfig, JudgeQueue, compose_judge_config, settings_hash
from judge.mutant import Mutant
from judge.preflight import build_mutant_repo, catalogue
from judge.private import setup
from judge.service import describe, queue_for, run_until_done
from tasks.schema import task_root

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from judge import Evaluation

TASK = "decode_cpu"
PIPELINES = ("naive", "staged")
# Who submits (the queue's agent column); arms are named per pipeline, round and invocation.
AGENT = "bench"


@dataclass(frozen=True)
class Item:
    """One submission of a round.

    Attributes:
        label: unique within a round (the queue's label).
        source: what is submitted: a name in the task's catalogue (its mutants.yaml and the
            decode kind's generated mutants) or ``move:NAME`` (a move of the scripted agents'
            library, applied to the template with the moves it requires).
        kind: ``pass``, ``wrong``, ``reject``, ``duplicate`` (a tree submitted before in the
            round, under another commit) or ``rejudge`` (the same commit again, re-judged).
        expect: the verdict the judge should give, ``PASS`` or ``WRONG (reason)``; for a
            duplicate, the original's.
    """

    label: str
    source: str
    kind: str
    expect: str

    @property
    def commit(self) -> str:
        """The bench repository's mutant (branch) whose commit is submitted: a duplicate's is
        the ``<name>_dup`` twin (the same tree, another sha)."""
        name = self.source.removeprefix("move:")
        return f"{name}_dup" if self.kind == "duplicate" else name

    @property
    def rejudge(self) -> bool:
        return self.kind == "rejudge"

    @property
    def noise(self) -> bool:
        """An evaluation of the unmodified baseline that counts for the noise of x."""
        return self.source == "baseline" and self.kind in ("pass", "rejudge")


# (label, source, kind, expected verdict) in the order a demo might queue them (see Item).
_ROWS = {
    "baseline": ("baseline", "pass", "PASS"),
    "row_shift": ("gen_row_shift", "wrong", "WRONG (mismatch)"),
    "head_cache": ("move:head_cache", "pass", "PASS"),
    "frozen_edit": ("gen_frozen_edit", "reject", "REJECT (frozen_zone)"),
    "reference": ("reference", "pass", "PASS"),
    "stale_state": ("stale_state", "wrong", "WRONG (alternating)"),
    "huge_token_id": ("huge_token_id", "wrong", "WRONG (protocol)"),
    "decode_in_prefill": ("gen_decode_in_prefill", "wrong", "WRONG (prefill_cap)"),
    "baseline_dup": ("baseline", "duplicate", "PASS"),
    "serve_skip_check": ("move:serve_skip_token_check", "reject", "REJECT (frozen_zone)"),
    "b1_slow_2x": ("gen_b1_slow_2x", "wrong", "WRONG (b1_regression)"),
    "hang": ("gen_hang", "wrong", "WRONG (timeout)"),
    "shadow_stdlib": ("shadow_stdlib", "reject", "REJECT (shadowing)"),
    "row_shift_dup": ("gen_row_shift", "duplicate", "WRONG (mismatch)"),
}
_QUICK = ["baseline", "row_shift", "frozen_edit", "reference", "baseline_dup", "row_shift_dup"]
# B=1 (b1_slow_2x) only with --b1: a conviction always takes every B=1 unit (task.b1.max_pairs
# lone pairs, 64), a minute or more on this loaded machine, in both pipelines alike.
_FULL = [
    "baseline",
    "row_shift",
    "head_cache",
    "frozen_edit",
    "reference",
    "stale_state",
    "huge_token_id",
    "decode_in_prefill",
    "baseline_dup",
    "serve_skip_check",
    "b1_slow_2x",
    "hang",
    "shadow_stdlib",
    "row_shift_dup",
]


def workload(quick: bool, baselines_per_round: int, b1: bool = False) -> list[Item]:
    """One round's submissions, in queue order.

    Args:
        quick: the small workload (a few minutes in all) instead of the full one.
        baselines_per_round: evaluations of the unmodified baseline per round (its first
            submission, then re-judgements of the same commit), at least 1.
        b1: include the B=1 regression mutant (full workload only).

    Returns:
        The items, in queue order.
    """
    names = _QUICK if quick else [n for n in _FULL if b1 or n != "b1_slow_2x"]
    items = [Item(name, *_ROWS[name]) for name in names]
    for i in range(1, baselines_per_round):
        rejudge = Item(f"baseline_rejudge{i}", "baseline", "rejudge", "PASS")
        # The first re-judgement mid-round, the others at its end (a runner re-judges late).
        items.insert(len(items) // 2, rejudge) if i == 1 else items.append(rejudge)
    return items


def _moves(cfg: DictConfig) -> tuple[Path, dict[str, dict[str, Any]]]:
    folder = task_root(cfg.task) / str(cfg.task.moves)
    entries = yaml.safe_load((folder / "moves.yaml").read_text())["moves"]
    return folder, {entry["name"]: entry for entry in entries}


def move_closure(name: str, moves: dict[str, dict[str, Any]]) -> list[str]:
    """``name`` and every move it requires, transitively, in library order (the order their
    patches apply in: each is a diff against the template with its requirements applied)."""
    seen: set[str] = set()
    stack = [name]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(moves[current].get("requires", []))
    order = list(moves)
    return sorted(seen, key=order.index)


def _apply_patches(tree: Path, patches: list[Path]) -> None:
    for patch in patches:
        subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True, capture_output=True)


def bench_mutants(cfg: DictConfig, items: list[Item]) -> list[Mutant]:
    """The mutants the bench repository needs for ``items``: catalogue entries as they are, a
    move as a mutant applying its patch chain, and a ``<source>_dup`` twin per duplicated
    source (the same change, so the same tree, committed separately: another sha).

    Raises:
        KeyError: a source that is neither in the catalogue nor a move of the task.
    """
    known = {m.name: m for m in catalogue(cfg)}
    folder, moves = _moves(cfg)

    def source(name: str) -> Mutant:
        if name.startswith("move:"):
            move = name.removeprefix("move:")
            chain = [folder / moves[n]["patch"] for n in move_closure(move, moves)]
            return Mutant(
                name=move, patch=None, expect="PASS", tree=partial(_apply_patches, patches=chain)
            )
        return known[name]

    out: dict[str, Mutant] = {}
    for item in items:
        original = source(item.source)
        out.setdefault(original.name, original)
        if item.kind == "duplicate":
            out.setdefault(item.commit, replace(original, name=item.commit))
    return list(out.values())


def pipeline_overrides(pipeline: str, private_dir: str) -> list[str]:
    """Config overrides of one side: ``judge.pipeline`` (and, for the naive side,
    ``judge.duplicates=off``: the old judge recognised no identical tree), each only where the
    judge has that setting."""
    fields = JudgeConfig.__dataclass_fields__
    overrides = [f"task={TASK}", f"judge.private_dir={private_dir}"]
    if "pipeline" in fields:
        overrides.append(f"judge.pipeline={pipeline}")
    if "duplicates" in fields and pipeline == "naive":
        overrides.append("judge.duplicates=off")
    return overrides


@dataclass
class Side:
    """One pipeline's config and what it answered, round by round."""

    name: str
    cfg: Any
    wall_s: float = 0.0
    results: list[list[Evaluation]] = field(default_factory=list)


def cancel_leftovers(home: Any) -> list[int]:
    """Withdraw the jobs an interrupted bench run left queued (or running: its worker is gone,
    and the next worker would re-queue them) in this judge folder: a worker takes the oldest
    first, and would judge them before this run's. Only bench jobs: the folder is the bench's."""
    queue = JudgeQueue(home.queue_path)  # made here on a new judge folder: nothing to withdraw
    with sqlite3.connect(home.queue_path) as db:
        ids = [
            row[0]
            for row in db.execute(
                "SELECT id FROM jobs WHERE state IN ('queued', 'running') AND agent = ?"
                " AND arm LIKE 'bench-%'",
                (AGENT,),
            )
        ]
    return queue.cancel(ids, "left by an interrupted bench run", running=True)


def run_round(
    side: Side,
    home: Any,
    repo: Path,
    shas: dict[str, str],
    items: list[Item],
    arm: str,
    progress: Callable[[str], None],
) -> None:
    """Queue ``items`` at once under ``side``'s settings and judge them to the end."""
    queue = queue_for(side.cfg, home)
    takes_rejudge = "rejudge" in inspect.signature(queue.enqueue).parameters
    start = time.perf_counter()
    jobs = []
    for item in items:
        extra = {"rejudge": True} if item.rejudge and takes_rejudge else {}
        jobs.append(
            queue.enqueue(
                arm=arm,
                agent=AGENT,
                repo=str(repo),
                commit=shas[item.commit],
                label=item.label,
                **extra,
            )
        )
    evaluations = run_until_done(side.cfg, home, jobs, progress=progress)
    side.wall_s += time.perf_counter() - start
    side.results.append(evaluations)
    for item, e in zip(items, evaluations, strict=True):
        progress(f"  {side.name:>6} {item.label:<20} {describe(e)}")


def verdict_text(e: Evaluation) -> str:
    return str(e.verdict) + (f" ({e.reason})" if e.reason else "")


def noise_xs(side: Side, items: list[Item]) -> list[float]:
    """x_baseline of each of the unmodified baseline's PASSes."""
    return [
        float(e.metrics["x_baseline"])
        for evaluations in side.results
        for item, e in zip(items, evaluations, strict=True)
        if item.noise and "x_baseline" in e.metrics
    ]


def noise(side: Side, items: list[Item]) -> tuple[float, int]:
    """(standard deviation of x_baseline, how many) over the unmodified baseline's PASSes."""
    xs = noise_xs(side, items)
    return (statistics.stdev(xs) if len(xs) >= 2 else math.nan), len(xs)


def per_hour(side: Side) -> float:
    jobs = sum(len(r) for r in side.results)
    return 3600.0 * jobs / side.wall_s if side.wall_s else math.nan


def report(sides: dict[str, Side], items: list[Item]) -> list[str]:
    """The tables and the last line, as lines of text."""
    lines = [
        "",
        f"{'pipeline':<8} {'jobs':>5} {'wall s':>8} {'busy s':>8} {'evals/h':>8}"
        f" {'dups':>5} {'sd x':>6} {'n x':>4} {'median x':>9}",
    ]
    for side in sides.values():
        evaluations = [e for r in side.results for e in r]
        busy = sum(e.stages.get("total", 0.0) for e in evaluations)
        dups = sum(1 for e in evaluations if getattr(e, "duplicate_of", None))
        sd, n = noise(side, items)
        xs = noise_xs(side, items)
        median_x = statistics.median(xs) if xs else math.nan
        lines.append(
            f"{side.name:<8} {len(evaluations):>5} {side.wall_s:>8.1f} {busy:>8.1f}"
            f" {per_hour(side):>8.1f} {dups:>5} {sd:>6.3f} {n:>4} {median_x:>9.3f}"
        )
    naive, staged = sides["naive"], sides["staged"]
    lines += [
        "",
        f"{'round':>5} {'submission':<20} {'expected':<22} {'naive':<26} {'staged':<26}"
        f" {'naive s':>8} {'staged s':>8}",
    ]
    differ: list[str] = []
    unexpected: list[str] = []
    for r, (old_round, new_round) in enumerate(zip(naive.results, staged.results, strict=True)):
        for item, old, new in zip(items, old_round, new_round, strict=True):
            a, b = verdict_text(old), verdict_text(new)
            mark = "" if a == b else "  <- differs"
            if a != b:
                differ.append(f"round {r + 1} {item.label}: naive {a}, staged {b}")
            for name, got in (("naive", a), ("staged", b)):
                if got != item.expect:
                    unexpected.append(f"round {r + 1} {item.label}: {name} {got}")
            new_text = b + (" [dup]" if getattr(new, "duplicate_of", None) else "")
            lines.append(
                f"{r + 1:>5} {item.label:<20} {item.expect:<22} {a:<26} {new_text:<26}"
                f" {old.stages.get('total', 0.0):>8.1f} {new.stages.get('total', 0.0):>8.1f}" + mark
            )
    if differ:
        lines += ["", "verdicts that differ between the pipelines:", *differ]
    if unexpected:
        lines += ["", "verdicts other than expected (either pipeline):", *unexpected]
    old_rate, new_rate = per_hour(naive), per_hour(staged)
    old_sd, old_n = noise(naive, items)
    new_sd, new_n = noise(staged, items)
    p = spread_test(noise_xs(naive, items), noise_xs(staged, items))
    lines += [
        "",
        f"noise of x (the unmodified baseline): sd naive {old_sd:.3f} (n {old_n}),"
        f" staged {new_sd:.3f} (n {new_n}); equal spread, permutation test: p {p:.2f}"
        + (" (a difference this size is not shown at these counts)" if p >= 0.05 else ""),
    ]
    lines.append("")
    lines.append(
        f"judge throughput: naive {old_rate:.1f}/h, staged {new_rate:.1f}/h,"
        f" ratio {new_rate / old_rate:.2f}, identical verdicts: {'no' if differ else 'yes'},"
        f" noise old {old_sd:.2f} new {new_sd:.2f}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="default 2 (1 with --quick)")
    parser.add_argument(
        "--quick", action="store_true", help="the small workload: a few minutes, a smoke run"
    )
    parser.add_argument(
        "--b1", action="store_true", help="add the B=1 regression mutant (27 pairs a side)"
    )
    parser.add_argument(
        "--baselines",
        type=int,
        default=None,
        help="unmodified-baseline evaluations per pipeline over all rounds (default 6; 2 quick)",
    )
    # Its own folder by default: the bench rebuilds <home>/mutants, which a judge using
    # results/judge (a demo's preflight) must not see change under it.
    parser.add_argument("--private-dir", default="results/judge-bench")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    baselines = args.baselines or (2 if args.quick else 6)
    items = workload(args.quick, max(1, math.ceil(baselines / rounds)), args.b1)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    sides = {
        name: Side(name, compose_judge_config(pipeline_overrides(name, args.private_dir)))
        for name in PIPELINES
    }
    if settings_hash(sides["naive"].cfg) == settings_hash(sides["staged"].cfg):
        progress("note: this judge has no judge.pipeline setting: both sides run the same code")
    t0 = time.perf_counter()
    cfg = sides["naive"].cfg
    home = setup(cfg, progress=progress)
    if withdrawn := cancel_leftovers(home):
        progress(f"withdrew {len(withdrawn)} job(s) an interrupted bench run left queued")
    repo, shas = build_mutant_repo(cfg, home, bench_mutants(cfg, items))
    print(
        f"judge setup and bench repository: {time.perf_counter() - t0:.1f} s;"
        f" {len(items)} submissions a round, {rounds} round(s), each judged by both pipelines",
        flush=True,
    )
    run_id = secrets.token_hex(3)
    for r in range(rounds):
        order = PIPELINES if r % 2 == 0 else PIPELINES[::-1]
        for name in order:
            progress(f"round {r + 1}/{rounds}: {name}")
            run_round(
                sides[name], home, repo, shas, items, f"bench-{run_id}-{name}-r{r + 1}", progress
            )
    print("\n".join(report(sides, items)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
