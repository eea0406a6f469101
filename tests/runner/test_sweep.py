"""Sweep wiring without containers: every job records its outcome in job.json, a failing job
never stops the others, and the aggregate is written at the end of the sweep, through the
basic launcher and through joblib's."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from judge import JudgeClient
from judge.preflight import preflight_fingerprint
from runner import sweep
from runner.config import register_configs
from runner.experiment import RunRefused, judge_app_config
from tasks.schema import PROJECT_ROOT


class FakeRun:
    outcome: object = 0

    def __init__(self, cfg, run_dir) -> None:
        self.run_dir = run_dir

    def start(self) -> int:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome  # type: ignore[return-value]


@pytest.fixture
def fake_run(monkeypatch):
    monkeypatch.setattr(sweep, "Run", FakeRun)
    monkeypatch.setattr(sweep, "_INTERRUPTED", [])
    return FakeRun


@pytest.mark.parametrize(
    ("outcome", "code", "status", "error"),
    [
        (0, 0, "ok", None),
        (130, 130, "interrupted", "interrupted"),
        (RunRefused("judge preflight failed"), 2, "failed", "refused: judge preflight failed"),
        (RuntimeError("boom"), 1, "failed", "RuntimeError: boom"),
    ],
)
def test_run_job_records_the_outcome(fake_run, tmp_path, outcome, code, status, error):
    fake_run.outcome = outcome
    cfg = OmegaConf.create({"seed": 7})
    assert sweep.run_job(cfg, tmp_path / "job") == code
    record = json.loads((tmp_path / "job" / sweep.JOB_FILE).read_text())
    assert (record["status"], record["exit_status"], record["seed"]) == (status, code, 7)
    if error is None:
        assert record["error"] is None
    else:
        assert record["error"].startswith(error)
    assert record["ended_at"] >= record["started_at"]


def test_after_an_interrupted_job_the_next_is_not_started(fake_run, tmp_path):
    fake_run.outcome = 130
    assert sweep.run_job(OmegaConf.create({"seed": 1}), tmp_path / "a") == 130
    fake_run.outcome = RuntimeError("must not run")
    assert sweep.run_job(OmegaConf.create({"seed": 2}), tmp_path / "b") == 130
    record = json.loads((tmp_path / "b" / sweep.JOB_FILE).read_text())
    assert (record["status"], record["error"]) == (
        "interrupted",
        "not started: the sweep was interrupted",
    )


def test_run_job_records_an_interrupt_and_lets_it_through(fake_run, tmp_path):
    fake_run.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        sweep.run_job(OmegaConf.create({"seed": 1}), tmp_path)
    assert json.loads((tmp_path / sweep.JOB_FILE).read_text())["status"] == "interrupted"


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_sweep_of_failing_jobs_is_aggregated(tmp_path, launcher):
    """A continuation swept over runs that do not exist: each job is refused before any judge
    or container, the sweep still ends with its aggregate, and exits 1. (The up-front check
    leaves a swept key to its jobs: the sweep's own config holds none of its values.)"""
    sweep_dir = tmp_path / "sweep"
    parallel = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    missing = f"{tmp_path}/no-run-a,{tmp_path}/no-run-b"
    result = subprocess.run(
        [sys.executable, "-m", "runner", "-m", "arm=continuation", "isolation=local",
         f"from_run={missing}", *parallel, f"hydra.sweep.dir={sweep_dir}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = result.stdout + result.stderr[-3000:]
    assert result.returncode == 1, report
    rows = list(csv.DictReader((sweep_dir / "aggregate.csv").open()))
    assert [(r["status"], r["arm"]) for r in rows] == [("failed", "continuation")] * 2, report
    assert [r["job_dir"].rsplit("no-run-", 1)[1][0] for r in rows] == ["a", "b"], report
    assert all("is not a run directory" in r["job_error"] for r in rows), report
    assert (sweep_dir / "aggregate_stats.csv").is_file()
    assert "2 job(s), 0 ok, 2 failed or incomplete" in result.stdout
    for row in rows:
        record = json.loads((sweep_dir / row["job_dir"] / "job.json").read_text())
        assert (record["status"], record["exit_status"]) == ("failed", 2)


def test_a_bad_setting_every_job_shares_is_refused_before_the_sweep(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = subprocess.run(
        [sys.executable, "-m", "runner", "-m", "arm=continuation", "isolation=local", "seed=1,2",
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "needs from_run" in result.stderr and not sweep_dir.exists()


def test_slurm_preset_composes_with_a_time_limit_past_the_budget():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="runner",
            overrides=["experiment=swarm_vs_solo", "budget.minutes=45", "hydra/launcher=slurm"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.timeout_min == 45 + 3 + 10 + 30  # budget, drain, rejudge.max_minutes, setup
    assert cfg.hydra.callbacks.aggregate_sweep._target_ == "runner.sweep.AggregateSweep"


def _judge_cfg(tmp_path):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="runner", overrides=[f"judge.private_dir={tmp_path}"])
    return judge_app_config(cfg)


def test_jobs_started_together_wait_for_one_judge_setup(tmp_path):
    """The second run waits while the first sets up and preflights; a preflight that failed
    while it waited is not run again."""
    judge_cfg = _judge_cfg(tmp_path)
    held, release = threading.Event(), threading.Event()

    def first() -> None:
        with JudgeClient(judge_cfg).setup_lock() as waited:
            assert waited is None
            held.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(10)
    threading.Timer(0.3, release.set).start()
    before = time.time()
    with JudgeClient(judge_cfg).setup_lock() as waited:
        assert waited is not None and waited >= before
        assert time.time() - before >= 0.25
    thread.join()

    home = SimpleNamespace(root=tmp_path / "home")
    home.root.mkdir()
    assert not JudgeClient(judge_cfg).failed_preflight_since(home, waited)  # type: ignore[arg-type]
    record = {"complete": True, "ok": False, "at": time.time(),
              "fingerprint": preflight_fingerprint(judge_cfg)}  # fmt: skip
    (home.root / "preflight.json").write_text(json.dumps(record))
    assert JudgeClient(judge_cfg).failed_preflight_since(home, waited)  # type: ignore[arg-type]
    assert not JudgeClient(judge_cfg).failed_preflight_since(home, time.time() + 1)  # type: ignore[arg-type]
    (home.root / "preflight.json").write_text(json.dumps({**record, "ok": True}))
    assert not JudgeClient(judge_cfg).failed_preflight_since(home, waited)  # type: ignore[arg-type]


def test_judge_services_left_by_the_sweep_are_stopped(tmp_path):
    """Only a `judge serve` whose config lies in this sweep."""
    from runner.events import EventLog

    sweep_dir, home = tmp_path / "sweep", tmp_path / "home"
    home.mkdir()
    job = sweep_dir / "seed=1"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("seed: 1\n")
    EventLog(job / "events.sqlite").set_meta(judge_home=str(home))
    sleeper = "import time; time.sleep(60)"
    ours = subprocess.Popen(
        [sys.executable, "-c", sleeper, "judge", "serve", "--config", str(job / "judge.yaml")]
    )
    other = subprocess.Popen(
        [sys.executable, "-c", sleeper, "judge", "serve", "--config", str(tmp_path / "x.yaml")]
    )
    try:
        for proc in (ours, other):
            (home / f"service-{proc.pid}.json").write_text(json.dumps({"pid": proc.pid}))
        assert sweep.stop_sweep_judges(sweep_dir) == [ours.pid]
        assert ours.wait(10) == -15
        assert other.poll() is None
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
