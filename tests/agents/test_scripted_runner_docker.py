"""``agent=scripted`` seated by the runner on each bundled task with a move library: the real
runner, judge and containers, one judged submission (``budget.evaluations=1``), no preflight
and no re-judging (their own tests cover them). The workers' directions are the task's and the
agents read the task only from their card."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import yaml

from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker

# A ceiling: the run ends on its judge budget long before (a busy machine is slower, not different).
CEILING_MINUTES = 20
TASKS = [t for t in ("decode_cpu", "decode_c") if (PROJECT_ROOT / "tasks" / t / "moves").is_dir()]


@pytest.mark.parametrize("task", TASKS)
def test_scripted_swarm_plays_the_tasks_library(judge_private_dir, base_image, tmp_path, task):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "arm=swarm", f"task={task}", "judge.preflight=skip",
         f"judge.private_dir={judge_private_dir}", f"hydra.run.dir={run_dir}",
         f"budget.minutes={CEILING_MINUTES}", "budget.drain_minutes=0.5", "budget.evaluations=1",
         "rejudge.runs=0", "rejudge.baseline_runs=0", "progress_every_s=30"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60 * (CEILING_MINUTES + 5),
    )  # fmt: skip
    report = done.stdout[-2000:] + "\n" + done.stderr[-3000:]
    assert done.returncode == 0, report
    events = EventLog(run_dir / "events.sqlite")
    meta = events.meta()
    assert meta["ended_by"] == "evaluations", report
    # The workers start on the task's directions, in order; the critic on none.
    spec = yaml.safe_load((PROJECT_ROOT / "tasks" / task / "task.yaml").read_text())
    names = [d["name"] for d in spec["directions"]]
    assert meta["seats"]["swarm"] == [
        *[[f"w{i + 1}", "worker", name] for i, name in enumerate(names[:4])],
        ["critic", "critic", None],
    ]
    board = events.messages("swarm")
    for seat in ("w1", "w2", "w3", "w4", "critic"):
        first = next(m for m in board if m["author"] == seat)
        assert first["text"].startswith("scripted: no model"), (seat, first)
    moves = {m["name"] for m in json.loads((PROJECT_ROOT / "tasks" / task / "moves" /
                                            "moves.json").read_text())["moves"]}  # fmt: skip
    judged = [e for e in events.table("evaluations") if e["agent"].startswith("w")]
    assert judged and {e["verdict"] for e in judged} <= {"PASS", "WRONG", "REJECT"}, judged
    # What was judged is a commit the worker made from a move of this task's library (its
    # ``Move:`` trailer; the board's result may come after the run stopped on its budget).
    repo = run_dir / "arms" / "swarm" / "submissions.git"
    for evaluation in judged:
        trailer = "%(trailers:key=Move,valueonly,separator=%x2C)"
        named = subprocess.run(
            ["git", "--git-dir", str(repo), "log", "-1", f"--format={trailer}",
             evaluation["commit_sha"]],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert named and set(named.split(",")) <= moves, (named, evaluation)
    row = next(csv.DictReader((run_dir / "summary.csv").open()))
    assert row["agent_kind"] == "scripted (no model)"
