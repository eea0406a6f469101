"""`python -m runner` end to end on the real Docker engine, with simple shell agents (the
scripted agents have their own end-to-end test): a run to its deadline, Ctrl-C/SIGTERM,
SIGKILL then resume, agents that exit early, and bad input."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runner.events import EventLog
from runrecord import REJUDGE, agent_name, rejudging_started_at
from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker

SUBMIT_ONCE = '"cd /work/repo && submit -m first --wait; board post done; sleep 1000"'


def _runner(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs,
    )  # fmt: skip


# A ceiling for runs that end on counts (budget.evaluations): never reached unless the judge
# hangs. A busy machine makes such a run slower, not different (CI saw a 0.5-minute run
# finish with no evaluation at all while other work shared the machine).
CEILING_MINUTES = 20


def _base(
    private_dir: Path,
    run_dir: Path,
    minutes: float,
    command: str = SUBMIT_ONCE,
    rechecks: tuple[int, int] = (0, 0),
    evaluations: int | None = None,
) -> list[str]:
    return [
        f"judge.private_dir={private_dir}", f"hydra.run.dir={run_dir}", f"budget.minutes={minutes}",
        "budget.drain_minutes=1", "progress_every_s=5", f"agent.command=[sh,-c,{command}]",
        f"rejudge.runs={rechecks[0]}", f"rejudge.baseline_runs={rechecks[1]}",
        f"budget.evaluations={'null' if evaluations is None else evaluations}",
    ]  # fmt: skip


def _containers(run_dir: Path) -> list[str]:
    """The containers still there of this run (by its id: other runs may share the engine)."""
    run_id = EventLog(run_dir / "events.sqlite").meta()["run_id"]
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=org.swarmlab.run={run_id}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_run_to_its_end_writes_its_summary(judge_private_dir, base_image, tmp_path):
    run_dir = tmp_path / "run"
    post_then_submit = '"cd /work/repo && board post done && submit -m first --wait; sleep 1000"'
    args = _base(judge_private_dir, run_dir, CEILING_MINUTES, post_then_submit, (2, 1), 1)
    proc = _runner("arm=solo", "judge.preflight=skip", "view=true", *args)
    # view=true: the live view's address comes first (a taken port is said before it), and
    # it answers while the run goes on.
    first = [proc.stderr.readline() for _ in range(2)]
    url = re.search(r"http://\S+/", "".join(first))
    assert url and "analysis.view" in first[0], first
    with urllib.request.urlopen(url.group(0) + "api/changes?since=0", timeout=60) as res:
        assert res.status == 200
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err
    with pytest.raises(OSError):  # stopped with the run
        urllib.request.urlopen(url.group(0), timeout=5)
    assert "solo" in out and f"results: {run_dir}" in out
    assert "left]" in err  # progress lines while it ran (an evaluation takes well over 5 s)
    assert "judge budget is spent" in err
    events = EventLog(run_dir / "events.sqlite")
    evaluations = events.table("evaluations")
    [evaluation] = [e for e in evaluations if e["agent"] == "w1"]
    assert evaluation["verdict"] == "PASS"
    # After the deadline the runner judged the arm's best twice and the starting commit once,
    # as its own pseudo-agents, after every agent evaluation.
    confirms = [e for e in evaluations if agent_name(e["agent"]) == REJUDGE]
    [baseline] = [e for e in evaluations if e["agent"] == "baseline"]
    assert [e["commit_sha"] for e in confirms] == [evaluation["commit_sha"]] * 2
    assert baseline["commit_sha"] == events.meta()["start_commit"]
    assert min(e["started_at"] for e in [*confirms, baseline]) >= evaluation["finished_at"]
    # The run ended on its judge budget, long before its deadline, and re-judged after that.
    assert events.meta()["ended_by"] == "evaluations"
    assert rejudging_started_at(events.meta()) < events.meta()["deadline"]
    assert rejudging_started_at(events.meta()) >= evaluation["finished_at"]
    row = next(csv.DictReader((run_dir / "summary.csv").open()))
    assert row["evaluations"] == "1"  # the runner's re-judgements are not the agent's
    # The run records what its scores count: the decode kind's metric.
    metric = events.meta()["metric"]
    assert (metric["unit"], metric["higher_is_better"]) == ("tok/s", True)
    assert (row["metric"], row["unit"]) == (metric["name"], "tok/s")
    assert row["rejudged_verdicts"] == ",".join(e["verdict"] for e in confirms)
    [message] = events.messages("solo")
    assert message["author"] == "w1" and message["text"] == "done"
    summary = (run_dir / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("arm,") and summary[1].startswith("solo,")
    assert events.meta()["status"] == "finished"
    assert _containers(run_dir) == []


def test_sigterm_stops_agents_and_keeps_partial_results(judge_private_dir, base_image, tmp_path):
    run_dir = tmp_path / "run"
    proc = _runner("arm=solo", "judge.preflight=skip", *_base(judge_private_dir, run_dir, 10))
    db = run_dir / "events.sqlite"
    _wait_for(lambda: db.exists() and EventLog(db).table("submissions"), 120, "a submission")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    events = EventLog(db)
    assert events.meta()["status"] == "interrupted"
    assert [r["event"] for r in events.table("lifecycle")] == ["started", "stopped"]
    assert (run_dir / "summary.csv").exists()
    assert _containers(run_dir) == []


@pytest.mark.parametrize("stop", ["sigkill", "slurm_sigterm"])
def test_sigkill_then_resume_loses_no_submission(judge_private_dir, base_image, tmp_path, stop):
    """Killed outright, or sent SIGTERM inside a SLURM job (how SLURM preempts, cancels or ends
    one): the run stays unfinished, and ``resume=DIR`` ends it with nothing lost. After the
    SIGTERM the agents' containers are gone before the runner exits (143), none left working."""
    run_dir = tmp_path / "run"
    args = _base(judge_private_dir, run_dir, CEILING_MINUTES, evaluations=1)
    env = {**os.environ, "SLURM_JOB_ID": "4242"} if stop == "slurm_sigterm" else None
    proc = _runner("arm=solo", "judge.preflight=skip", *args, env=env)
    db = run_dir / "events.sqlite"
    _wait_for(lambda: db.exists() and EventLog(db).table("submissions"), 120, "a submission")
    if stop == "sigkill":
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    else:
        os.killpg(proc.pid, signal.SIGTERM)  # SLURM signals every process of the job
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 143, err
        assert "stopped by SLURM" in err and "resume=" in err, err
        assert _containers(run_dir) == []
        assert EventLog(db).meta()["preempted_at"] > 0
    events = EventLog(db)
    assert events.meta()["status"] == "running"
    resumed = _runner(f"resume={run_dir}")
    _, err = resumed.communicate(timeout=1500)
    assert resumed.returncode == 0, err
    evaluations = events.table("evaluations")
    submissions = events.table("submissions")
    assert {e["job_id"] for e in evaluations} == {s["job_id"] for s in submissions}
    assert len({s["commit_sha"] for s in submissions}) == 1
    kinds = [r["event"] for r in events.table("lifecycle")]
    if stop == "slurm_sigterm":  # its agents were stopped in order, then resumed
        assert kinds[:3] == ["started", "stopped", "resumed"], kinds
    else:
        assert kinds[:2] == ["started", "resumed"], kinds
    assert "restarted" in kinds
    assert events.meta()["status"] == "finished"
    assert _containers(run_dir) == []


def test_an_agent_that_exits_early_is_restarted_and_recorded(
    judge_private_dir, base_image, tmp_path
):
    run_dir = tmp_path / "run"
    args = _base(judge_private_dir, run_dir, 0.3, command='"echo giving up; exit 3"')
    proc = _runner("arm=solo", "judge.preflight=skip", *args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    rows = EventLog(run_dir / "events.sqlite").table("lifecycle")
    exits = [r for r in rows if r["event"] == "exited"]
    restarts = [r for r in rows if r["event"] == "restarted"]
    assert len(exits) >= 2 and len(restarts) == len(exits)
    assert json.loads(exits[0]["detail"])["code"] == 3
    assert "giving up" in json.loads(exits[0]["detail"])["log_tail"]


def test_unknown_arm_lists_the_valid_ones(tmp_path):
    proc = _runner("arm=nope", f"hydra.run.dir={tmp_path / 'run'}")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "Could not find 'arm/nope'" in err and "swarm" in err and "solo" in err


def test_no_docker_engine_names_the_fix(judge_private_dir, tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = _runner("arm=solo", *_base(judge_private_dir, tmp_path / "run", 1), env=env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "docker-engine.sh" in err and "isolation=local" in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_continuation_starts_every_agent_from_the_champion(
    judge_private_dir, base_image, tmp_path
):
    first = tmp_path / "round1"
    args = _base(judge_private_dir, first, CEILING_MINUTES, evaluations=1)
    proc = _runner("arm=solo", "judge.preflight=skip", *args)
    _, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err
    [best] = [e for e in EventLog(first / "events.sqlite").table("evaluations")]
    assert best["verdict"] == "PASS"
    second = tmp_path / "round2"
    # The champion's re-measurement is queued first, so it is judged before the run's one
    # submission, whose verdict ends the run.
    args = _base(judge_private_dir, second, CEILING_MINUTES, evaluations=1)
    proc = _runner("arm=continuation", f"from_run={first}", "judge.preflight=skip", *args)
    out, err = proc.communicate(timeout=1500)
    assert proc.returncode == 0, err
    origin = second / "arms" / "continuation" / "origin.git"
    head = subprocess.run(
        ["git", "-C", str(origin), "rev-parse", "master"], capture_output=True, text=True
    ).stdout.strip()
    assert head == best["commit_sha"]
    clone = second / "arms" / "continuation" / "agents" / "w1" / "repo"
    # The clone belongs to the agent's uid: git wants it named safe to read it as root.
    log = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(clone), "log", "--format=%H", "--all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert log[0] == best["commit_sha"]
    events = EventLog(second / "events.sqlite")
    [champion] = [e for e in events.table("evaluations") if e["agent"] == "champion"]
    assert champion["commit_sha"] == best["commit_sha"] and champion["verdict"] == "PASS"
    assert events.meta()["champion"]["commit"] == best["commit_sha"]
    assert "continuation" in out


def test_a_continuation_needs_a_run_to_continue(judge_private_dir, base_image, tmp_path):
    proc = _runner("arm=continuation", f"from_run={tmp_path}", "judge.preflight=skip",
                   *_base(judge_private_dir, tmp_path / "run", 0.3))  # fmt: skip
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "is not a run directory" in err
