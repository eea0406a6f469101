"""The SLURM side of sweeps without a cluster: the launcher preset's resources (GPU as gres, the
time limit), what job.json records of SLURM, a requeued job resuming its own unfinished run, and
the `slurm` test marker's policy (fail under CI, skip elsewhere)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runner import sweep
from runner.config import register_configs
from runner.events import EventLog
from tasks.schema import PROJECT_ROOT


def _launcher(*overrides: str):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="runner",
            overrides=["experiment=swarm_vs_solo", "hydra/launcher=slurm", *overrides],
            return_hydra_config=True,
        )
    return cfg.hydra.launcher


@pytest.mark.parametrize(
    ("device", "gres"), [("cuda:0", "gpu:1"), ("cuda:3", "gpu:1"), ("gpu", "gpu:1"), ("cpu", None)]
)
def test_the_judge_device_maps_to_a_gpu_gres(device, gres):
    assert _launcher(f"judge.device={device}").gres == gres


def test_the_gpu_slurm_gave_is_the_judges_device_in_the_job(monkeypatch):
    """docs/cluster.md: Docker names GPUs by the host's index; in the job SLURM_JOB_GPUS says
    which one SLURM gave. At submission (no such variable) the device still asks for a GPU."""
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="runner",
            overrides=["experiment=swarm_vs_solo", "hydra/launcher=slurm",
                       "judge.device='cuda:${oc.env:SLURM_JOB_GPUS,0}'"],
            return_hydra_config=True,
        )  # fmt: skip
    assert (cfg.hydra.launcher.gres, cfg.judge.device) == ("gpu:1", "cuda:0")
    monkeypatch.setenv("SLURM_JOB_GPUS", "3")
    assert cfg.judge.device == "cuda:3"


def test_the_time_limit_is_budget_drain_rejudging_and_a_setup_margin():
    launcher = _launcher("budget.minutes=45", "budget.drain_minutes=2.5", "rejudge.max_minutes=7")
    assert launcher.timeout_min == 45 + 3 + 7 + 30  # the drain's half minute rounded up
    assert _launcher().timeout_min == 60 + 3 + 10 + 30  # the defaults
    assert _launcher("hydra.launcher.timeout_min=20").timeout_min == 20  # by hand
    assert _launcher().name == "swarmlab-swarm_vs_solo"


def test_job_json_names_the_slurm_job():
    env = {"SLURM_JOB_ID": "41", "SLURMD_NODENAME": "gpu07", "SLURM_ARRAY_JOB_ID": "40",
           "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_PARTITION": "short", "HOME": "/root"}  # fmt: skip
    assert sweep.slurm_record(env) == {
        "job_id": "41",
        "node": "gpu07",
        "array_job_id": "40",
        "array_task_id": "1",
        "partition": "short",
    }
    assert sweep.slurm_record({"HOME": "/root"}) is None


class Recorder:
    """Stands in for Run and resume_experiment: records which one the job called."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, cfg, run_dir):
        calls = self.calls

        class _Run:
            def start(self) -> int:
                calls.append("start")
                return 0

        return _Run()

    def resume(self, run_dir) -> int:
        self.calls.append(f"resume {run_dir.name}")
        return 0


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(sweep, "Run", rec.run)
    monkeypatch.setattr(sweep, "resume_experiment", rec.resume)
    monkeypatch.setattr(sweep, "_INTERRUPTED", [])
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    return rec


def test_a_requeued_job_resumes_its_unfinished_run(recorder, tmp_path, monkeypatch):
    job = tmp_path / "seed=1"
    job.mkdir()
    # What a job stopped mid-run leaves behind: its run still "running", job.json interrupted.
    EventLog(job / "events.sqlite").set_meta(run_id="r1", status="running")
    killed = {"status": "interrupted", "error": "SystemExit in the job", "slurm": {"job_id": "7"}}
    (job / sweep.JOB_FILE).write_text(json.dumps(killed))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert sweep.run_job(OmegaConf.create({"seed": 1}), job) == 0
    assert recorder.calls == ["resume seed=1"]  # not a new run over the old one
    record = json.loads((job / sweep.JOB_FILE).read_text())
    assert (record["status"], record["resumed"]) == ("ok", True)
    assert record["attempts"] == [killed]
    assert record["slurm"] == {"job_id": "7", "node": "node1", "restart_count": "1"}

    # Requeued once more: the history keeps both earlier attempts, oldest first.
    EventLog(job / "events.sqlite").set_meta(status="running")
    assert sweep.run_job(OmegaConf.create({"seed": 1}), job) == 0
    record = json.loads((job / sweep.JOB_FILE).read_text())
    assert [a["status"] for a in record["attempts"]] == ["interrupted", "ok"]


@pytest.mark.parametrize(
    ("state", "code", "status"), [("finished", 0, "ok"), ("interrupted", 130, "interrupted")]
)
def test_a_job_run_again_after_its_run_ended_keeps_that_run(
    recorder, tmp_path, state, code, status
):
    """Requeued after its run ended (finished, or stopped in order by SIGTERM): neither resumed
    nor started over; the job's outcome is that run's."""
    job = tmp_path / "job"
    job.mkdir()
    EventLog(job / "events.sqlite").set_meta(run_id="r1", status=state)
    assert sweep.run_job(OmegaConf.create({"seed": 1}), job) == code
    assert recorder.calls == []
    record = json.loads((job / sweep.JOB_FILE).read_text())
    assert (record["status"], record["resumed"]) == (status, False)


@pytest.mark.parametrize("meta", [None, {"status": "running"}])
def test_a_folder_without_an_unfinished_run_starts_one(recorder, tmp_path, meta):
    """No event log, or a run killed before it started its agents (no run id): no resume."""
    job = tmp_path / "job"
    job.mkdir()
    if meta is not None:
        EventLog(job / "events.sqlite").set_meta(**meta)
    assert sweep.run_job(OmegaConf.create({"seed": 1}), job) == 0
    assert recorder.calls == ["start"]
    record = json.loads((job / sweep.JOB_FILE).read_text())
    assert record["resumed"] is False and "attempts" not in record


# A failure in set-up is pytest's "error": the run fails (status 1) all the same.
@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_the_slurm_marker_fails_under_ci_and_skips_elsewhere(tmp_path, ci, outcome):
    """Without SLURM's clients (PATH holds none) a `slurm` test fails under CI, never skips."""
    bin_dir = tmp_path / "bin"  # git (GitPython needs it at import), no sinfo nor scontrol
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(CI=ci, PATH=str(bin_dir), SLURM_CONF=str(tmp_path / "none.conf"))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/runner/test_sweep_slurm.py::test_sweep_through_slurm"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert outcome in out, out[-3000:]
    assert result.returncode == (1 if ci else 0), out[-3000:]
    if ci:
        assert "CI is set and a SLURM test cannot run" in out, out[-3000:]
    else:
        assert "needs a SLURM cluster" in out, out[-3000:]
