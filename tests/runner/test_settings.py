"""Bad settings and a run folder already in use are refused before anything is created: a real
``python -m runner`` subprocess, one line on stderr, exit status 2, and no run folder, no
sweep folder and no judge folder afterwards (the judge, its containers and the agents'
containers come after the judge folder, so none was started either)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from runner.config import register_configs
from runner.events import EventLog
from runner.experiment import Run, RunRefused
from runner.settings import run_dir_problem, settings_problems
from tasks.schema import PROJECT_ROOT


def _runner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="runner", overrides=list(overrides))


BAD = [
    ("judge.queue_policy=fiffo", "judge.queue_policy='fiffo'"),
    ("isolation.memory=1x", "isolation.memory='1x'"),
    ("budget.minutes=-1", "budget.minutes=-1"),
    ("budget.minutes=0", "budget.minutes=0"),
    ("budget.minutes=nan", "budget.minutes=nan"),
    ("budget.drain_minutes=-1", "budget.drain_minutes=-1"),
    ("rejudge.runs=-1", "rejudge.runs=-1"),
    ("judge.near_tie_policy=paass", "judge.near_tie_policy='paass'"),
    ("judge.prefill_cap_factor=0", "judge.prefill_cap_factor=0"),
    ("judge.sandbox.memory=2gb_", "judge.sandbox.memory='2gb_'"),
    ("isolation.backend=dockr", "isolation.backend='dockr'"),
    ("isolation.cpuset=all", "isolation.cpuset='all'"),
    ("budget.max_submissions_per_agent=0", "budget.max_submissions_per_agent=0"),
    ("isolation.disk_quota_mb=10", "isolation.disk_quota_mb=10"),
    ("arms.swarm.visibility=secret", "arms.swarm.visibility='secret'"),
    # The swarm's critic in a private arm: nothing of another seat's to review.
    ("arms.swarm.visibility=private", "arms.swarm.seats.critic: a critic has nothing to review"),
]


@pytest.mark.parametrize("override,named", BAD, ids=[b[0] for b in BAD])
def test_a_bad_setting_is_one_line_before_any_folder(tmp_path, override, named):
    run_dir, judge_dir = tmp_path / "run", tmp_path / "judge"
    result = _runner(
        "arm=swarm", override, f"hydra.run.dir={run_dir}", f"judge.private_dir={judge_dir}"
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("runner: bad settings: ") and named in lines[0], lines[0]
    assert result.stdout == ""
    assert not run_dir.exists() and not judge_dir.exists()
    assert sorted(tmp_path.iterdir()) == []


def test_every_problem_is_listed_in_the_one_line(tmp_path):
    result = _runner(
        "arm=solo", "judge.queue_policy=fiffo", "isolation.memory=1x", "budget.minutes=-1",
        f"hydra.run.dir={tmp_path / 'run'}", f"judge.private_dir={tmp_path / 'judge'}",
    )  # fmt: skip
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    for named in ("judge.queue_policy", "isolation.memory", "budget.minutes"):
        assert named in line, line
    assert sorted(tmp_path.iterdir()) == []


def test_a_sweep_with_a_bad_setting_makes_no_sweep_folder(tmp_path):
    sweep = tmp_path / "sweep"
    result = _runner(
        "-m", "arm=solo", "seed=1,2", "judge.near_tie_policy=paass",
        f"hydra.sweep.dir={sweep}", f"judge.private_dir={tmp_path / 'judge'}",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "judge.near_tie_policy='paass'" in line
    assert sorted(tmp_path.iterdir()) == []


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _a_run(run_dir: Path) -> None:
    """A run's folder as ``python -m runner`` leaves it when killed: its Hydra files (the
    config ``resume=`` reads) and its event log, marked running."""
    cfg = _compose("arm=solo", "seed=3")
    hydra = run_dir / ".hydra"
    hydra.mkdir(parents=True)
    OmegaConf.save(cfg, hydra / "config.yaml")
    (hydra / "overrides.yaml").write_text("- arm=solo\n- seed=3\n")
    (hydra / "hydra.yaml").write_text("hydra:\n  mode: RUN\n")
    EventLog(run_dir / "events.sqlite").set_meta(status="running", seed=3, experiment="single")


def test_an_existing_run_folder_is_refused_and_left_byte_identical(tmp_path):
    run_dir = tmp_path / "run"
    _a_run(run_dir)
    before = _tree(run_dir)
    assert ".hydra/config.yaml" in before and "events.sqlite" in before
    result = _runner(
        "experiment=swarm_vs_solo", "seed=7", f"hydra.run.dir={run_dir}",
        f"judge.private_dir={tmp_path / 'judge'}",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"resume={run_dir}" in line, line
    assert _tree(run_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no judge folder either
    assert OmegaConf.load(run_dir / ".hydra" / "config.yaml").seed == 3


def test_a_folder_with_other_files_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    assert "not empty" in (run_dir_problem(tmp_path) or "")
    assert run_dir_problem(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert run_dir_problem(tmp_path / "empty") is None
    assert "is a file" in (run_dir_problem(tmp_path / "notes.txt") or "")


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["arm=solo"],
        ["experiment=swarm_vs_solo"],
        ["agent=claude_code"],
        ["agent=codex"],
        ["agent=gemini"],
        ["agent=mini_swe"],
        ["isolation=local"],
        ["judge.queue_policy=fair", "isolation.cpuset='0-1,3'", "isolation.memory=512m"],
    ],
)
def test_the_shipped_settings_have_no_problem(overrides):
    assert settings_problems(_compose(*overrides)) == []


def test_a_continuation_needs_a_run_to_start_from(tmp_path):
    [problem] = settings_problems(_compose("arm=continuation"))
    assert "from_run=DIR" in problem
    [problem] = settings_problems(_compose("arm=continuation", f"from_run={tmp_path}"))
    assert "is not a run directory" in problem
    EventLog(tmp_path / "events.sqlite").set_meta(status="finished")
    assert settings_problems(_compose("arm=continuation", f"from_run={tmp_path}")) == []


def test_a_swept_bad_value_is_refused_in_its_job_before_any_work(tmp_path):
    """A sweep job composes its own value (seed=1,2 budget.minutes=-1,5): ``Run.start`` checks
    the settings first, before the judge, the template or any arm."""
    run = Run(_compose("arm=solo", "budget.minutes=-1"), tmp_path)
    with pytest.raises(RunRefused, match=r"budget\.minutes=-1"):
        run.start()
    assert {p.name.split("-")[0] for p in tmp_path.iterdir()} == {"events.sqlite"}
    assert run.events.meta() == {}


def test_a_plan_needs_runs_to_plan_from_and_prints_before_the_run(tmp_path, capsys):
    """plan=DIR: refused with one line when DIR holds no run; else the planner's recommendation
    (a simulation from the recorded demo run) is printed before anything starts."""
    [problem] = settings_problems(_compose("experiment=swarm_vs_solo", f"plan={tmp_path}"))
    assert "neither a finished run nor a sweep" in problem
    demo = PROJECT_ROOT / "tests" / "analysis" / "fixtures" / "plan_demo"
    cfg = _compose("experiment=swarm_vs_solo", f"plan={demo}", "budget.minutes=10")
    assert settings_problems(cfg) == []
    from runner.experiment import print_plan

    assert print_plan(cfg) == 0
    printed = capsys.readouterr().err
    assert printed.startswith("plan (simulation")
    assert "judge capacity = 600 s ÷" in printed
    assert "this run (swarm 4, solo 1 seats, fair)" in printed
    assert "agents per arm:" in printed and "seeds per arm:" in printed
