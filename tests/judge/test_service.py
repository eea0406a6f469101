"""The judge service as a run sees it (issue 9 item 9), without the Docker engine: the settings
hash, a run that finds the device held by other settings, a service that keeps dying."""

from __future__ import annotations

import types

import pytest

from judge import (
    QUICK_DEATHS,
    JudgeQueue,
    JudgeRefused,
    JudgeService,
    JudgeServiceFailed,
    compose_judge_config,
    load_judge_config,
    save_judge_config,
    settings_hash,
)
from judge.service import DeviceLock, device_holder
from runner.experiment import REFUSED


def _saved(tmp_path, *overrides: str):
    cfg = compose_judge_config([f"judge.private_dir={tmp_path / 'judge'}", *overrides])
    return cfg, save_judge_config(cfg.task, cfg.judge, tmp_path / "run" / "judge.yaml")


def _link(tmp_path, *overrides: str) -> JudgeService:
    _, config = _saved(tmp_path, *overrides)
    home = types.SimpleNamespace(root=tmp_path)  # the lock files are all a link needs here
    return JudgeService(home, "cpu", config, tmp_path / "run" / "judge-service.log")  # type: ignore[arg-type]


def test_the_hash_covers_what_changes_a_verdict_and_nothing_else(tmp_path):
    cfg, config = _saved(tmp_path)
    base = settings_hash(cfg)
    assert base == settings_hash(load_judge_config(config))  # the runner's = the service's
    assert len(base) == 16
    for override in ("judge.near_tie_policy=pass", "judge.prefill_cap_factor=2.0"):
        assert settings_hash(compose_judge_config([override])) != base, override
    # Where the folder is, the queue's order, preflight and which CPU times it change no verdict.
    same = compose_judge_config(
        [
            f"judge.private_dir={tmp_path / 'judge'}",
            "judge.queue_policy=fair",
            "judge.preflight=skip",
            "judge.device=cpu-0",
            "judge.sandbox.cpuset=0",
            "judge.prefill_cap_factor=1.5",  # the default, written out
        ]
    )
    assert settings_hash(same) == base


def test_a_run_finding_the_device_held_by_other_settings_waits_and_says_so_once(tmp_path, capsys):
    link = _link(tmp_path)
    other = "f" * 16
    with DeviceLock(link.home, "cpu", other, "/elsewhere/judge-service.log"):  # type: ignore[arg-type]
        assert device_holder(link.home, "cpu")["settings_hash"] == other  # type: ignore[arg-type]
        link.ensure_running()
        link.ensure_running()
        assert link.process is None  # never judged by it, never a second worker
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and other in err[0] and link.settings in err[0]
    assert other in link.log_file.read_text()  # the run's own service log says so too


def test_a_run_sharing_a_service_of_its_own_settings_starts_none(tmp_path, capsys):
    link = _link(tmp_path)
    with DeviceLock(link.home, "cpu", link.settings, "/elsewhere/judge-service.log"):  # type: ignore[arg-type]
        link.ensure_running()
        assert link.process is None
    assert capsys.readouterr().err == ""
    assert "/elsewhere/judge-service.log" in link.log_file.read_text()


def test_no_service_is_started_while_another_settings_job_has_the_turn(tmp_path):
    link = _link(tmp_path)
    queue = JudgeQueue(tmp_path / "queue.sqlite", settings_hash="e" * 16)
    queue.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)  # this process: alive
    link.queue = JudgeQueue(tmp_path / "queue.sqlite", settings_hash=link.settings)
    link.ensure_running()
    assert link.process is None


def test_a_service_that_keeps_dying_stops_the_run_with_one_clear_line(
    tmp_path, monkeypatch, capsys
):
    # A service that cannot start: here it finds no Docker engine (exit 2) every time.
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    link = _link(tmp_path)
    with pytest.raises(JudgeServiceFailed) as failed:
        link.start()
        for _ in range(50):  # the runner's loop; bounded here
            link.ensure_running()
            if link.process is not None:
                link.process.wait(timeout=60)
    message = str(failed.value)
    assert f"died {QUICK_DEATHS} times in a row" in message
    assert str(link.log_file) in message and "exit code 2" in message
    assert "docker" in message.lower()  # the log's last line: why it died
    assert isinstance(failed.value, REFUSED)  # the runner says it in one line, exits 2
    restarts = [line for line in capsys.readouterr().err.splitlines() if "exited" in line]
    assert len(restarts) == QUICK_DEATHS - 1  # each death said, not restarted in silence


def test_settings_the_service_would_refuse_refuse_the_run(tmp_path):
    _, config = _saved(tmp_path)
    config.write_text(config.read_text().replace("near_tie_policy: wrong", "near_tie_policy: p"))
    with pytest.raises(JudgeRefused, match="near_tie_policy"):
        JudgeService(types.SimpleNamespace(root=tmp_path), "cpu", config, tmp_path / "log")  # type: ignore[arg-type]
