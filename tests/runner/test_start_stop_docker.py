"""How a run ends when the user presses Ctrl-C twice (real containers, the real judge): the
second signal only makes the orderly stop faster, it never cuts the cleanup short."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker

# Every worker submits the template once (the one judge takes them one at a time, so some
# wait in its queue); the shell ignores SIGTERM, so each container holds its whole grace period
# unless it is killed at once.
STUBBORN = "\"trap '' TERM; cd /work/repo && submit -m first; sleep 1000\""


def _run_containers(run_id: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=org.swarmlab.run={run_id}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _queue_states(judge_home: str, job_ids: list[int]) -> dict[int, str]:
    db = sqlite3.connect(Path(judge_home) / "queue.sqlite")
    try:
        marks = ",".join("?" * len(job_ids))
        rows = db.execute(f"SELECT id, state FROM jobs WHERE id IN ({marks})", job_ids)
        return dict(rows.fetchall())
    finally:
        db.close()


def test_two_ctrl_c_stop_the_run_in_order(judge_private_dir, base_image, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "arm=swarm", "judge.preflight=skip",
         f"judge.private_dir={judge_private_dir}", f"hydra.run.dir={run_dir}",
         "budget.minutes=20", "budget.drain_minutes=1", "progress_every_s=0",
         "rejudge.runs=0", "rejudge.baseline_runs=0", f"agent.command=[sh,-c,{STUBBORN}]"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    run_id = None
    try:
        db = run_dir / "events.sqlite"
        _wait_for(lambda: db.exists() and EventLog(db).meta().get("run_id"), 600, "the run")
        events = EventLog(db)
        meta = events.meta()
        run_id = meta["run_id"]
        _wait_for(lambda: len(_run_containers(run_id)) == 5, 300, "five agent containers")
        # All four workers' submissions taken in: the gateway runs no git that the process
        # group's SIGINT could hit (as a terminal's Ctrl-C would).
        _wait_for(lambda: len(events.table("submissions")) >= 4, 300, "four submissions")
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        left = _run_containers(run_id) if run_id else []
        if left:  # a failed stop leaves no container behind for the tests that follow
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "stopping faster" in err, err
    assert left == []
    meta = events.meta()
    assert meta["status"] == "interrupted"
    assert (run_dir / "summary.csv").is_file() and f"results: {run_dir}" in out
    stopped = [r for r in events.table("lifecycle") if r["event"] == "stopped"]
    assert len(stopped) == 5
    # The agents still being stopped when the second signal came were killed at once.
    graces = [json.loads(r["detail"])["grace_s"] for r in stopped]
    assert graces[-1] == 0, graces
    # Nothing of this run is left waiting in the judge's queue: withdrawn (or judged, or the
    # one under evaluation when the run ended).
    jobs = [s["job_id"] for s in events.table("submissions") if s["job_id"] is not None]
    assert jobs
    states = _queue_states(meta["judge_home"], jobs)
    assert "queued" not in states.values(), states
    assert "cancelled" in states.values(), states
