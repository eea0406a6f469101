"""``experiment=swarm_vs_independent_vs_solo`` end to end (issue 28): a real ``python -m runner``
with three arms, one judge and real containers. Each seat commits a file of its own, posts and
submits; the run ends on its judge budget (one evaluation per arm). The private arm's seats
each read only their own post and fetch only their own submission, the swarm's share one
board, the fair queue judged every arm, and the report compares the three arms."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from analysis.report import main as report_main
from isolation.gitutil import git
from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker

# Every seat: a commit of its own, a post naming it, a submission (a critic's is refused).
SEAT = (
    '"cd /work/repo && echo $SWARMLAB_AGENT > SEAT && git add SEAT && git commit -qm seat'
    ' && board post hello from $SWARMLAB_AGENT; submit -m mine --wait; sleep 1000"'
)
# A ceiling: the run ends on its judge budget long before (a busy machine is slower, not
# different).
CEILING_MINUTES = 20


def test_three_arms_run_together_and_the_private_seats_stay_apart(
    judge_private_dir, base_image, tmp_path
):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable, "-m", "runner", "experiment=swarm_vs_independent_vs_solo",
            "judge.preflight=skip", f"judge.private_dir={judge_private_dir}",
            f"hydra.run.dir={run_dir}", f"budget.minutes={CEILING_MINUTES}",
            "budget.drain_minutes=1", "budget.evaluations=1", "rejudge.runs=0",
            "rejudge.baseline_runs=0", "progress_every_s=30", f"agent.command=[sh,-c,{SEAT}]",
        ],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60 * (CEILING_MINUTES + 10),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = EventLog(run_dir / "events.sqlite")
    meta = events.meta()
    assert meta["arms"] == ["swarm", "independent", "solo"] and meta["ended_by"] == "evaluations"
    assert meta["visibility"] == {"swarm": "shared", "independent": "private", "solo": "shared"}
    judged = {e["arm"] for e in events.table("evaluations")}
    assert judged == {"swarm", "independent", "solo"}  # the fair queue served every arm
    arms = run_dir / "arms"
    # The swarm's one board holds its five seats' posts; each private seat's, its own only.
    swarm_board = (arms / "swarm" / "board" / "board.jsonl").read_text()
    assert all(f"hello from {s}" in swarm_board for s in ("w1", "w2", "w3", "w4", "critic"))
    assert not (arms / "independent" / "board").exists()
    mine = {}
    for seat in ("w1", "w2", "w3", "w4"):
        own = arms / "independent" / "private" / seat
        board = (own / "board" / "board.jsonl").read_text().splitlines()
        assert len(board) == 1 and f"hello from {seat}" in board[0], board
        refs = git("for-each-ref", "--format=%(refname)", cwd=own / "submissions.git").split()
        assert all(r.startswith(f"refs/submissions/{seat}/") for r in refs), refs
        mine[seat] = refs
    # The arm's judge budget (one evaluation) is the arm's, not each seat's.
    assert sum(len(r) for r in mine.values()) == 1
    arm_refs = git(
        "for-each-ref",
        "--format=%(refname)",
        "refs/submissions",
        cwd=arms / "independent" / "submissions.git",
    ).split()
    assert arm_refs == [r for refs in mine.values() for r in refs]
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert [r["arm"] for r in rows] == ["swarm", "independent", "solo"]
    assert report_main([str(run_dir)]) == 0
    report = (run_dir / "analysis" / "report.md").read_text()
    assert "## Three arms" in report and "## What differs between the arms" in report
    assert "Relays are impossible in independent" in report
