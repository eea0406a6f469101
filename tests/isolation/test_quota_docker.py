"""A disk quota per seat (``isolation/quota.py``): a real container writing past it gets ENOSPC,
the host's folder stays under it, the runner's own writes still land, the event is recorded,
and at the end the files are back in a plain folder that anyone can read."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from isolation.backends import RUN_LABEL, AgentSpec, get_backend, wait_until_stopped
from isolation.quota import IMAGE_SUFFIX, QuotaPlan, QuotaWatch, main, quota_setting_problem
from isolation.workspace import Seat, load_arm, prepare_arm, release_quotas, template_repo
from runner.events import EventLog

MB = 1024 * 1024
QUOTA_MB = 64
AGENT_UID = 1000

needs_root = pytest.mark.skipif(
    QuotaPlan.here(QUOTA_MB).problem is not None,
    reason=f"seat quotas are not enforceable here: {QuotaPlan.here(QUOTA_MB).problem}",
)


def _allocated(folder: Path) -> int:
    """Bytes the files under ``folder`` take on disk (what ``du`` counts)."""
    total = 0
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total


def _arm(tmp_path: Path, quota: QuotaPlan, seats: list[Seat]):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, tmp_path / "template.git")
    uid = AGENT_UID if os.geteuid() == 0 else None
    return prepare_arm(tmp_path / "run", "solo", source, start, seats, uid, uid, quota=quota)


@needs_root
@pytest.mark.docker
def test_a_container_writing_past_its_quota_gets_enospc(tmp_path, base_image) -> None:
    quota = QuotaPlan.here(QUOTA_MB)
    arm = _arm(tmp_path, quota, [Seat("w1", "worker"), Seat("w2", "worker")])
    w1, w2 = arm.agents["w1"], arm.agents["w2"]
    backend = get_backend("docker")
    run = f"quota-{os.getpid()}-{time.time_ns()}"
    try:
        assert os.path.ismount(w1.root) and os.path.ismount(w2.root)
        assert quota.meta() == {
            "mb": QUOTA_MB, "enforced": True, "how": "an ext4 image per seat, loop-mounted"
        }  # fmt: skip
        # Twice the quota, into the notes then the clone: the second finds no room either.
        script = (
            "dd if=/dev/zero of=/work/notes/fill bs=1M count=128 2>&1; echo notes=$?;"
            " dd if=/dev/zero of=/work/repo/fill bs=1M count=8 2>&1; echo repo=$?"
        )
        spec = AgentSpec(
            arm="solo", agent="w1", workspace=w1, arm_workspace=arm,
            command=["sh", "-c", script], cpuset="0", memory="256m", pids_limit=64,
            labels={RUN_LABEL: run},
        )  # fmt: skip
        handle = backend.start(spec)
        assert wait_until_stopped(handle, 120) == 0
        out = handle.logs_tail(50)
        handle.stop(timeout=1)
        assert "No space left on device" in out and "notes=1" in out and "repo=1" in out, out
        # The host's folder holds no more than the quota; the other seat is untouched.
        assert _allocated(w1.root) <= QUOTA_MB * MB
        assert (w1.notes / "fill").stat().st_size > (QUOTA_MB // 2) * MB
        assert _allocated(w2.root) < 2 * MB
        # The runner still writes the agent's replies and verdicts: its inbox is not in the seat.
        assert not str(w1.inbox).startswith(str(w1.root) + "/")
        (w1.verdicts_file).write_bytes(b"x" * 4 * MB)
        # The runner's watch records it once, with the bytes.
        events = EventLog(tmp_path / "run" / "events.sqlite")
        watch = QuotaWatch.for_arms(events, [arm])
        assert set(watch.seats) == {("solo", "w1"), ("solo", "w2")}
        assert watch.check() == [("solo", "w1")] and watch.check() == []
        (row,) = [r for r in events.table("lifecycle") if r["event"] == "quota"]
        assert (row["arm"], row["agent"]) == ("solo", "w1")
        assert f'"limit_bytes": {QUOTA_MB * MB}' in row["detail"]
        assert '"used_bytes": ' in row["detail"]
        # After room is made again it would say so again (not on every look).
        (w1.notes / "fill").unlink()
        assert watch.check() == []
        # A resumed run finds the seats as they were (mounted).
        assert os.path.ismount(load_arm(tmp_path / "run", "solo").agents["w1"].root)
    finally:
        backend.cleanup(run)
        problems = release_quotas([arm])
    assert problems == []
    # Plain folders again at the same paths, the agent's files in them, no image left.
    for ws in (w1, w2):
        assert not os.path.ismount(ws.root)
        assert not ws.root.with_name(ws.root.name + IMAGE_SUFFIX).exists()
        assert (ws.repo / "engine" / "model.py").read_text() == "SPEED = 1\n"
        assert ws.notes.stat().st_uid == AGENT_UID
    assert (w1.repo / "fill").exists() and w1.verdicts_file.stat().st_size == 4 * MB
    assert release_quotas([arm]) == []  # again: nothing to do


@needs_root
def test_a_failed_preparation_leaves_no_mount_and_release_by_hand(tmp_path, monkeypatch) -> None:
    quota = QuotaPlan.here(QUOTA_MB)
    arm = _arm(tmp_path, quota, [Seat("w1", "worker")])
    seat = arm.agents["w1"].root
    assert os.path.ismount(seat)
    # As after a SIGKILL of the runner: the seat is still mounted; released by hand.
    assert main(["release", str(tmp_path / "run")]) == 0
    assert not os.path.ismount(seat) and (seat / "repo" / ".git").is_dir()
    # A preparation that fails half-way unmounts what it mounted.
    from isolation import workspace

    real = workspace._write

    def broken(path: Path, text: str, mode: int = 0o644) -> None:
        if path.name == "verdicts.jsonl":  # inside the seat, once it is mounted
            raise RuntimeError("clone failed")
        real(path, text, mode)

    monkeypatch.setattr(workspace, "_write", broken)
    with pytest.raises(RuntimeError, match="clone failed"):
        prepare_arm(tmp_path / "run2", "solo", arm.origin, _head(arm.origin),
                    [Seat("w1", "worker")], quota=quota)  # fmt: skip
    assert not (tmp_path / "run2" / "arms" / "solo").exists()
    assert str(tmp_path / "run2") not in Path("/proc/mounts").read_text()


def _head(repo: Path) -> str:
    from isolation.gitutil import git

    return git("rev-parse", "master", cwd=repo)


def test_without_root_the_quota_is_said_not_enforced(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    plan = QuotaPlan.here(QUOTA_MB)
    assert plan.meta() == {
        "mb": QUOTA_MB, "enforced": False, "why": "not root: loop-mounted filesystems need root"
    }  # fmt: skip
    assert plan.warning() and plan.warning().startswith("WARNING: isolation.disk_quota_mb=64")
    assert plan.seat(tmp_path / "seat") is None
    off = QuotaPlan.here(None)
    assert off.meta()["enforced"] is False and off.warning() is None
    assert quota_setting_problem(2048) is None and quota_setting_problem(None) is None
    for bad in (-1, 0, 10, 1.5, "2g", True):
        assert quota_setting_problem(bad), bad


@needs_root
@pytest.mark.docker
def test_a_run_records_its_seat_at_the_quota_and_leaves_plain_folders(
    judge_private_dir, base_image, tmp_path
) -> None:
    """Through the runner: the seat fills its quota (ENOSPC), the run records a ``quota``
    event with the bytes, the agent makes room, submits, and the run ends on its judge budget;
    afterwards the seat's files are in a plain folder and no image or mount is left."""
    import subprocess
    import sys

    from tasks.schema import PROJECT_ROOT

    run_dir = tmp_path / "run"
    agent = (
        '"dd if=/dev/zero of=/work/notes/fill bs=1M count=128 2>/work/notes/dd.err;'
        " until [ -e /work/inbox/go ]; do sleep 0.2; done; rm /work/notes/fill;"
        ' echo kept >/work/notes/kept; cd /work/repo && submit -m one --wait; sleep 1000"'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "arm=solo", "judge.preflight=skip",
         f"judge.private_dir={judge_private_dir}", f"hydra.run.dir={run_dir}",
         "budget.minutes=20", "budget.drain_minutes=1", "budget.evaluations=1",
         "rejudge.runs=0", "rejudge.baseline_runs=0", f"agent.command=[sh,-c,{agent}]",
         f"isolation.disk_quota_mb={QUOTA_MB}"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        db = run_dir / "events.sqlite"

        def quota_events() -> list[dict]:
            if not db.exists():
                return []
            return [r for r in EventLog(db).table("lifecycle") if r["event"] == "quota"]

        until = time.monotonic() + 900
        while not quota_events():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < until, "no quota event"
            time.sleep(0.5)
        seat = run_dir / "arms" / "solo" / "agents" / "w1"
        assert os.path.ismount(seat)
        # The agent's inbox is the runner's, outside its full seat.
        (run_dir / "arms" / "solo" / "inboxes" / "w1" / "go").write_text("")
        _, err = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.communicate()
            release_quotas([load_arm(run_dir, "solo")])
    assert proc.returncode == 0, err
    events = EventLog(run_dir / "events.sqlite")
    assert events.meta()["disk_quota"]["enforced"] is True
    assert events.meta()["ended_by"] == "evaluations"
    (row,) = quota_events()
    assert row["agent"] == "w1"
    assert f'"limit_bytes": {QUOTA_MB * MB}' in row["detail"]
    assert "No space left on device" in (seat / "notes" / "dd.err").read_text()
    assert not os.path.ismount(seat) and not seat.with_name("w1" + IMAGE_SUFFIX).exists()
    assert (seat / "notes" / "kept").read_text() == "kept\n"
    assert (seat / "repo" / ".git").is_dir()
    assert [e["verdict"] for e in events.table("evaluations")] == ["PASS"]
    assert str(run_dir) not in Path("/proc/mounts").read_text()
