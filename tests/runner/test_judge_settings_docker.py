"""Two runs with different judge settings on one judge folder: each evaluation is judged under
its own run's settings, by a service of its own run (issue 9 item 9: a run asking for other
settings was judged by the service an earlier run had left running, with that run's settings).
Also: a killed runner's service leaves once nothing of its settings is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judge import load_judge_config
from judge.queue import JudgeQueue
from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker

SUBMIT_ONCE = '"cd /work/repo && submit -m first --wait; board post done; sleep 1000"'
# A ceiling for runs that end on counts (budget.evaluations=1): never reached unless the judge
# hangs; a busy machine makes the runs slower, not different.
CEILING_MINUTES = 20


def _runner(private_dir: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    args = [
        "arm=solo", "judge.preflight=skip", f"judge.private_dir={private_dir}",
        f"hydra.run.dir={run_dir}", f"budget.minutes={CEILING_MINUTES}", "budget.evaluations=1",
        "budget.drain_minutes=1", "progress_every_s=30", f"agent.command=[sh,-c,{SUBMIT_ONCE}]",
        "rejudge.runs=0", "rejudge.baseline_runs=0", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_two_runs_with_different_judge_settings_are_each_judged_under_their_own(
    judge_private_dir, base_image, tmp_path, find_judge_services
):
    strict, lenient = tmp_path / "strict", tmp_path / "lenient"
    first = _runner(judge_private_dir, strict, "judge.near_tie_policy=wrong")
    # The second starts while the first's service is live, as in the issue.
    _wait_for(lambda: (strict / "judge-service.log").exists(), 900, "the first run's judge")
    second = _runner(judge_private_dir, lenient, "judge.near_tie_policy=pass")
    for proc in (first, second):
        _, err = proc.communicate(timeout=1800)
        assert proc.returncode == 0, err
    hashes = {}
    for run in (strict, lenient):
        events = EventLog(run / "events.sqlite")
        # The run's own settings, as its runner hashed them when it started (not recomputed
        # here: in a working tree the task's files may have changed since).
        own = events.meta()["judge_settings_hash"]
        evaluations = events.table("evaluations")
        assert evaluations and {e["settings_hash"] for e in evaluations} == {own}, run
        # Judged by a service of this run: its own log names these settings.
        log = (run / "judge-service.log").read_text()
        assert f"with settings {own}" in log, log
        hashes[run] = own
    assert hashes[strict] != hashes[lenient]
    policies = {load_judge_config(r / "judge.yaml").judge.near_tie_policy for r in hashes}
    assert policies == {"wrong", "pass"}
    # No service outlives its run.
    assert find_judge_services(tmp_path) == []


def test_a_killed_runners_service_leaves_once_its_jobs_are_done(
    judge_private_dir, base_image, tmp_path, find_judge_services
):
    run = tmp_path / "killed"
    proc = _runner(judge_private_dir, run, "judge.prefill_cap_factor=1.6")
    db = run / "events.sqlite"
    _wait_for(lambda: db.exists() and EventLog(db).table("submissions"), 900, "a submission")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    [submission] = EventLog(db).table("submissions")
    home = Path(EventLog(db).meta()["judge_home"])
    queue = JudgeQueue(home / "queue.sqlite")
    # Its job is still judged (a resume would find the result), then the service leaves.
    _wait_for(lambda: queue.state(submission["job_id"]) == "done", 900, "the job")
    assert (
        queue.result(submission["job_id"]).settings_hash
        == EventLog(db).meta()["judge_settings_hash"]
    )
    _wait_for(lambda: not find_judge_services(tmp_path), 120, "the service to leave")
    assert "gone" in (run / "judge-service.log").read_text()
    # The run resumes, finds the result its killed runner's service made, and ends on it.
    resumed = subprocess.Popen(
        [sys.executable, "-m", "runner", f"resume={run}"], cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    _, err = resumed.communicate(timeout=1800)
    assert resumed.returncode == 0, err
    evaluations = EventLog(db).table("evaluations")
    assert submission["job_id"] in {e["job_id"] for e in evaluations}
    assert {e["settings_hash"] for e in evaluations} == {EventLog(db).meta()["judge_settings_hash"]}
    assert find_judge_services(tmp_path) == []
