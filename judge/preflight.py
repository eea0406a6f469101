"""Preflight: the judge scores the task's mutants before any agent starts, and the run only
goes ahead when every verdict is the expected one. A judge whose criteria changed must pass
this again: its result is kept with a fingerprint of the judge's code, the task and the
judge's settings.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import git
import yaml
from omegaconf import DictConfig, OmegaConf

from isolation.gitutil import commit_all, template_repo
from judge.mutant import Mutant, record_serve
from judge.private import JudgeHome, task_fingerprint
from judge.service import describe, queue_for, run_until_done
from judge.verdict import Evaluation, Verdict
from tasks.schema import task_root

Progress = Callable[[str], None]
_AUTHOR = ("swarmlab judge", "judge@swarmlab.invalid")


@dataclass
class PreflightRow:
    """One mutant's outcome. ``status``: ``ok``, ``MISMATCH``, or ``UNRESOLVED`` (a B=1 mutant
    this machine's timing noise cannot resolve; see ``judge.b1_unresolved``)."""

    mutant: str
    expected: str
    got: str
    seconds: float
    status: str
    detail: str
    source: str = "task"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class PreflightReport:
    """All rows; ``ok`` when every row is as expected (or UNRESOLVED, where tolerated)."""

    rows: list[PreflightRow]
    ok: bool
    note: str
    b1_resolution: float


# Keys of Mutant that only the task's kind sets (a yaml entry cannot hold a callable).
_GENERATED_ONLY = ("tree", "source")


def load_mutants(cfg: DictConfig) -> list[Mutant]:
    """The task's own mutants (its ``mutants.yaml``); none when the task has no such file.

    Raises:
        FileNotFoundError: a mutants file other than the default name is named but missing.
        ValueError: an entry that is not a mapping of Mutant's fields.
    """
    path = task_root(cfg.task) / cfg.task.mutants
    if not path.is_file():
        if cfg.task.mutants == "mutants.yaml":
            return []  # a task may have no mutants of its own: its kind's generated ones
        raise FileNotFoundError(f"task {cfg.task.name}: mutants file {path} does not exist")
    entries = yaml.safe_load(path.read_text()) or []
    known = set(Mutant.__dataclass_fields__) - set(_GENERATED_ONLY)
    mutants = []
    for entry in entries:
        bad = sorted(set(entry) - known) if isinstance(entry, dict) else ["(not a mapping)"]
        if bad:
            raise ValueError(f"{path}: mutant entry {entry!r}: unknown keys {', '.join(bad)}")
        others = entry.get("also_accept") or []
        if isinstance(others, str) or not all(
            isinstance(o, str) and o.split(" ", 1)[0] in Verdict.__members__ for o in others
        ):
            raise ValueError(
                f"{path}: mutant {entry.get('name')!r}: also_accept must be a list of"
                f' "VERDICT" or "VERDICT (reason)", got {others!r}'
            )
        mutants.append(Mutant(**{**entry, "also_accept": tuple(others)}))
    return mutants


def catalogue(cfg: DictConfig) -> list[Mutant]:
    """The kind's generated mutants, then the task's own; a task's entry of the same name
    replaces the generated one (a task may restate an expectation)."""
    from judge.kinds import get_kind

    own = load_mutants(cfg)
    names = {m.name for m in own}
    kind = get_kind(cfg.task.kind)
    return [m for m in kind.generated_mutants(cfg) if m.name not in names] + own


def _is_unmodified_pass(m: Mutant) -> bool:
    return m.expect == "PASS" and not m.patch and m.tree is None and m.serve is None


def catalogue_problem(cfg: DictConfig, mutants: list[Mutant]) -> str | None:
    """Why ``mutants`` cannot vouch for the judge, or None: it must hold an unmodified PASS
    and, for each of the kind's checks, a mutant that check must catch."""
    from judge.kinds import get_kind

    kind = get_kind(cfg.task.kind)
    required = kind.required_reasons(cfg.task)
    held = {f"{m.expect} ({m.reason})" for m in mutants if m.reason}
    missing = [r for r in required if r not in held]
    if not any(_is_unmodified_pass(m) for m in mutants):
        missing.insert(0, "PASS (an unmodified copy)")
    if not mutants:
        return f"task {cfg.task.name}: no mutants at all (an empty catalogue proves nothing)"
    if missing:
        return (
            f"task {cfg.task.name}: the mutant catalogue holds no {'; no '.join(missing)}:"
            f" add them to {task_root(cfg.task) / cfg.task.mutants}"
        )
    return None


def expectation(m: Mutant) -> str:
    text = m.expect + (f" ({m.reason})" if m.reason else "")
    if m.min_x_baseline is not None:
        text += f" x>={m.min_x_baseline:g}"
    if m.max_x_baseline is not None:
        text += f" x<={m.max_x_baseline:g}"
    return " or ".join([text, *m.also_accept])


def accepted_otherwise(m: Mutant, e: Evaluation) -> bool:
    """Whether ``e`` is one of the mutant's other right verdicts (``also_accept``)."""
    got = {str(e.verdict), f"{e.verdict} ({e.reason})"}
    return any(alternative in got for alternative in m.also_accept)


def matches(m: Mutant, e: Evaluation) -> bool:
    if accepted_otherwise(m, e):
        return True
    if str(e.verdict) != m.expect or (m.reason and e.reason != m.reason):
        return False
    if any(text in e.detail for text in m.detail_excludes):
        return False
    x = e.metrics.get("x_baseline")
    if m.min_x_baseline is not None and (x is None or x < m.min_x_baseline):
        return False
    return not (m.max_x_baseline is not None and (x is None or x > m.max_x_baseline))


def status(m: Mutant, e: Evaluation) -> str:
    if matches(m, e):
        return "ok"
    resolution = e.metrics.get("b1_resolution")
    if (
        m.b1_margin is not None
        and e.verdict.value == "PASS"
        and resolution is not None
        and resolution > m.b1_margin
    ):
        return "UNRESOLVED"
    return "MISMATCH"


def resolution_note(rows: list[PreflightRow], results: list[Evaluation]) -> str:
    """What an UNRESOLVED row means, with this machine's measured B=1 resolution."""
    worst = max(
        (
            e.metrics.get("b1_resolution", 0.0)
            for r, e in zip(rows, results, strict=True)
            if r.status == "UNRESOLVED"
        ),
        default=0.0,
    )
    return (
        f"UNRESOLVED: this machine's B=1 timing noise gives a resolution of +/-{100 * worst:.1f}%,"
        " too coarse to tell these mutants from the limit; B=1 regressions smaller than that"
        " above the limit pass unconvicted here (flagged b1_unresolved). Use a quieter machine"
        " or more B=1 pairs (task.b1.max_pairs, task.b1.per_process); judge.b1_unresolved=fail"
        " makes this an error."
    )


def build_mutant_repo(
    cfg: DictConfig, home: JudgeHome, mutants: list[Mutant]
) -> tuple[Path, dict[str, str]]:
    """A repository with the template on ``master`` and a branch ``mutant/<name>`` per mutant;
    returns (its path, {name: sha})."""
    root = home.root / "mutants"
    shutil.rmtree(root, ignore_errors=True)
    record_serve(home, {})  # a stale record must never name commits of a new repository
    root, base = template_repo(
        task_root(cfg.task) / cfg.task.template, root, author=_AUTHOR, message="template"
    )
    repo = git.Repo(root)
    shas = {}
    for m in mutants:
        repo.git.checkout("-q", "-f", base)
        repo.git.clean("-qfdx")
        if m.patch:
            patch = task_root(cfg.task) / m.patch
            try:
                repo.git.apply(str(patch))
            except git.GitCommandError as exc:
                raise ValueError(
                    f"mutant {m.name}: patch {patch} does not apply: {exc.stderr.strip()}"
                ) from None
        if m.tree is not None:
            m.tree(root)
        shas[m.name] = commit_all(root, f"mutant {m.name}", _AUTHOR)
        # A branch per mutant keeps it reachable: `candidate=DIR@mutant/NAME` works by hand.
        repo.git.update_ref(f"refs/heads/mutant/{m.name}", shas[m.name])
    repo.git.checkout("-q", "-f", base)
    # Written only by the judge, beside its own repository: the evaluator serves these commits
    # (and no other) through their wrapper (judge.mutant.candidate_serve).
    record_serve(home, {shas[m.name]: list(m.serve) for m in mutants if m.serve})
    return root, shas


def judge_code_hash(root: Path | None = None) -> str:
    """sha256 over the judge's code (``root``: the judge package, by default this one)."""
    digest = hashlib.sha256()
    here = root or Path(__file__).parent
    # Every module below judge/, the kinds' packages included (their checks, harnesses and
    # generated mutants are the judge's criteria): a kind's subpackage edited must void a pass.
    for file in sorted(here.rglob("*.py")):
        if "__pycache__" not in file.parts:
            digest.update(str(file.relative_to(here)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def preflight_fingerprint(cfg: DictConfig) -> str:
    settings = OmegaConf.to_container(cfg.judge, resolve=True)
    # Settings that change no verdict: where the folder lives, queue order, preflight itself.
    for name in ("private_dir", "queue_policy", "preflight", "preflight_parallel", "sets_seed"):
        settings.pop(name, None)  # type: ignore[union-attr]
    blob = json.dumps(
        {"judge": judge_code_hash(), "task": task_fingerprint(cfg), "settings": settings},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def run_preflight(
    cfg: DictConfig,
    home: JudgeHome,
    only: list[str] | None = None,
    progress: Progress | None = None,
) -> PreflightReport:
    """Score every mutant (or those in ``only``) through the judge's own queue."""
    mutants = catalogue(cfg)
    problem = catalogue_problem(cfg, mutants)
    if problem:
        raise ValueError(problem)
    if only:
        unknown = sorted(set(only) - {m.name for m in mutants})
        if unknown:
            raise ValueError(
                f"no mutant named {', '.join(unknown)}; known: {', '.join(m.name for m in mutants)}"
            )
        mutants = [m for m in mutants if m.name in only]
    repo, shas = build_mutant_repo(cfg, home, mutants)
    queue = queue_for(cfg, home)  # jobs carry these settings: no other worker judges them
    jobs = {
        # rejudge: preflight checks the judge as it is now, never answered from an earlier run.
        m.name: queue.enqueue(
            arm="preflight",
            agent="judge",
            repo=str(repo),
            commit=shas[m.name],
            label=m.name,
            rejudge=True,
        )
        for m in mutants
    }
    results = run_until_done(
        cfg, home, list(jobs.values()), progress=progress, parallel=cfg.judge.preflight_parallel
    )
    rows = [
        PreflightRow(
            m.name,
            expectation(m),
            describe(e),
            e.stages.get("total", 0.0),
            status(m, e),
            e.detail,
            m.source,
        )
        for m, e in zip(mutants, results, strict=True)
    ]
    unresolved = [r.mutant for r in rows if r.status == "UNRESOLVED"]
    tolerated = cfg.judge.b1_unresolved == "warn"
    report = PreflightReport(
        rows=rows,
        ok=bool(rows) and all(r.ok or (r.status == "UNRESOLVED" and tolerated) for r in rows),
        note=resolution_note(rows, results) if unresolved else "",
        b1_resolution=max((e.metrics.get("b1_resolution", 0.0) for e in results), default=0.0),
    )
    record = {
        "fingerprint": preflight_fingerprint(cfg),
        "at": time.time(),
        "complete": not only,
        "ok": report.ok,
        "unresolved": unresolved,
        "note": report.note,
        "b1_resolution": report.b1_resolution,
        "rows": [asdict(r) for r in rows],
    }
    (home.root / ("preflight.json" if not only else "preflight-partial.json")).write_text(
        json.dumps(record, indent=1)
    )
    return report


def passed_preflight(cfg: DictConfig, home: JudgeHome) -> bool:
    """True if a complete preflight with these exact judge code, task and settings passed."""
    path = home.root / "preflight.json"
    if not path.exists():
        return False
    record = json.loads(path.read_text())
    return bool(
        record.get("ok")
        and record.get("complete")
        and record.get("fingerprint") == preflight_fingerprint(cfg)
    )


def format_table(rows: list[PreflightRow]) -> str:
    headers = ("mutant", "source", "expected", "got", "seconds", "")
    body = [(r.mutant, r.source, r.expected, r.got, f"{r.seconds:.1f}", r.status) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *body, strict=True)]
    lines = [
        "  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
