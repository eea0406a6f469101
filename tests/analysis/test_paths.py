"""The arms' paths side by side (``analysis.paths``): improvements read from real
``submissions.git`` repositories, and the matcher scored against the scripted agents' moves.

The demo here plays the decode_cpu task's real move library (``tasks/decode_cpu/moves``: the
patches the scripted agents apply) into three arms' repositories the way the scripted worker
does (``git apply --3way`` on its base, one ``Move:`` trailer per commit), each arm in its own
seeded order and subset, with failed submissions on side branches and relays between seats.
The matcher reads the diffs only; the trailers are the ground truth.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis.paths import (
    LABEL,
    arm_paths,
    improvements,
    match_steps,
    moves_between,
    pair_truth,
    precision_recall,
)
from analysis.report.paths import paths_section
from analysis.tables import load_run

ROOT = Path(__file__).resolve().parents[2]
MOVES = ROOT / "tasks" / "decode_cpu" / "moves"
TEMPLATE = ROOT / "tasks" / "decode_cpu" / "template"
ARMS = {"swarm": 1, "independent": 2, "solo": 3}


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, check=check, capture_output=True, text=True)


def _play(root: Path, arm: str, seed: int, start_files: Path) -> tuple[list[dict], str]:
    """One arm's repository and its evaluations: moves applied in a seeded order."""
    rng = random.Random(seed)
    library = {m["name"]: m for m in json.loads((MOVES / "moves.json").read_text())["moves"]}
    work, bare = root / "work" / arm, root / "arms" / arm / "submissions.git"
    bare.mkdir(parents=True)
    _git(bare, "init", "-q", "--bare")
    shutil.copytree(start_files, work, ignore=shutil.ignore_patterns("__pycache__"))
    _git(work, "init", "-q", "-b", "master")
    _git(work, "config", "user.email", "t@t")
    _git(work, "config", "user.name", "t")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "task template")
    start = _git(work, "rev-parse", "HEAD").stdout.strip()
    good = [n for n, m in library.items() if m["kind"] in ("good", "dead")]
    wrong = [n for n, m in library.items() if m["kind"] == "wrong"]
    # Each arm skips a few moves (so some steps are one arm's only) and orders the rest anew.
    required = {r for m in library.values() for r in m["requires"]}
    skipped = set(rng.sample([m for m in good if m not in required], 3))
    done: list[str] = []
    rows: list[dict] = []
    head, x, t, n = start, 1.0, 0.0, 0

    def submit(base: str, name: str) -> str | None:
        nonlocal n
        _git(work, "reset", "-q", "--hard", base)
        _git(work, "clean", "-qfdx")
        patch = str(MOVES / library[name]["patch"])
        if _git(work, "apply", "--3way", patch, check=False).returncode:
            return None
        _git(work, "add", "-A")
        _git(work, "commit", "-qm", f"{name} on {base[:10]}\n\nMove: {name}")
        sha = _git(work, "rev-parse", "HEAD").stdout.strip()
        n += 1
        _git(work, "push", "-q", str(bare), f"{sha}:refs/submissions/w{n % 3 + 1}/{n}")
        return sha

    while True:
        ready = [
            m
            for m in good
            if m not in done and m not in skipped and set(library[m]["requires"]) <= set(done)
        ]
        if not ready:
            break
        name = rng.choice(ready)
        if wrong and rng.random() < 0.3:  # a failed try on a side branch, never built on
            bad = rng.choice(wrong)
            if set(library[bad]["requires"]) <= set(done):
                sha = submit(head, bad)
                if sha:
                    t += 30
                    rows.append(dict(commit=sha, verdict="WRONG", x_baseline=None, t_end_s=t))
        sha = submit(head, name)
        done.append(name)
        if sha is None:
            continue
        t += 60
        x += 0.1 + rng.random() * 0.3
        rows.append(dict(commit=sha, verdict="PASS", x_baseline=x, t_end_s=t))
        head = sha
    for i, row in enumerate(rows):
        row.update(job_id=seed * 1000 + i, arm=arm, agent=f"w{i % 3 + 1}")
    return rows, start


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, dict]:
    root = tmp_path_factory.mktemp("paths_demo")
    rows, starts = [], {}
    for arm, seed in ARMS.items():
        got, starts[arm] = _play(root, arm, seed, TEMPLATE)
        rows += got
    return root, pd.DataFrame(rows), starts


def test_matcher_pairs_the_same_moves_across_arms(demo: tuple[Path, pd.DataFrame, dict]) -> None:
    root, ev, starts = demo
    by_arm = arm_paths(root, ARMS, ev, starts)
    assert all(len(v) >= 5 for v in by_arm.values())
    moves = {
        i.key: moves_between(root / "arms" / i.arm / "submissions.git", i.base, i.commit)
        for items in by_arm.values()
        for i in items
    }
    # Every improvement here brings exactly one move: the failed tries are never built on.
    assert all(len(m) == 1 for m in moves.values())
    truth, found = pair_truth(by_arm, moves)
    precision, recall = precision_recall(truth, found)
    print(
        f"matcher on {sum(map(len, by_arm.values()))} improvements in {len(by_arm)} arms:"
        f" {len(truth)} true pairs, {len(found)} matched; precision {precision:.3f},"
        f" recall {recall:.3f}"
    )
    assert len(truth) >= 10
    assert precision >= 0.9 and recall >= 0.9
    # Some steps are one arm's only (each arm skipped moves) and labelled so.
    steps, why = match_steps(by_arm)
    labels = {s.found_by(list(ARMS)) for s in steps}
    assert "all arms" in labels and any(lab.startswith("only ") for lab in labels)
    assert any(w.startswith("similar diff") for w in why.values())


def test_improvements_are_the_passes_that_raised_the_best(tmp_path: Path) -> None:
    from tests.analysis.conftest import make_run

    run = make_run(tmp_path / "run")
    tables = load_run(run.path)
    ev = tables.evaluations[tables.evaluations["arm"] == "solo"]
    imps = improvements(run.path / "arms" / "solo" / "submissions.git", ev, run.start)
    # s1 110 on the start, s3 140 on s1; s2 (105, after s1) raised nothing.
    assert len(imps) == 2 and imps[0].x < imps[1].x
    assert imps[0].base == run.start and imps[1].base == imps[0].commit
    assert imps[0].functions == {"engine.py": ["moe"]}
    assert imps[0].gain_x == pytest.approx(imps[0].x - 1.0)
    assert imps[1].gain_x == pytest.approx(imps[1].x - imps[0].x)


def test_report_section_names_the_arms_and_the_label(tmp_path: Path) -> None:
    from tests.analysis.conftest import make_run

    run = make_run(tmp_path / "run")
    tables = load_run(run.path)
    text = "\n".join(paths_section(tables, tables.runs[0]))
    assert LABEL in text
    # swarm's c2 (moe) and solo's s1 (moe) changed the same function: one step, both arms.
    assert "both arms" in text and "only swarm" in text
    assert "engine.py (moe)" in text


def test_an_arm_making_the_same_change_twice_is_one_step_found_again() -> None:
    from analysis.paths import Improvement

    def imp(arm: str, job: int, t: float, lines: set[str]) -> Improvement:
        return Improvement(arm, "w1", job, f"{job:040x}", None, None, 1.0 + job, 0.1, t, "",
                           ["e.py"], {"e.py": ["moe"]}, frozenset(lines))  # fmt: skip

    cache = {"e.py:moe:+cache = {}", "e.py:moe:-cache = None"}
    by_arm = {
        "swarm": [imp("swarm", 1, 10, cache), imp("swarm", 2, 30, cache | {"e.py:moe:+x"})],
        "solo": [imp("solo", 3, 20, cache)],
    }
    steps, why = match_steps(by_arm)
    assert len(steps) == 1 and steps[0].found_by(["swarm", "solo"]) == "both arms"
    assert [i.job_id for i in steps[0].again] == [2] and why["swarm:2"].startswith("again")
    moves = {k: frozenset({"cache"}) for k in ("swarm:1", "swarm:2", "solo:3")}
    assert precision_recall(*pair_truth(by_arm, moves)) == (1.0, 1.0)
