"""The task's fingerprint covers its toolchain's outputs, its image and its assets."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from omegaconf import OmegaConf

from isolation import taskenv
from judge import compose_judge_config, private
from tasks.schema import PROJECT_ROOT


def _cfg(tmp_path, **task):
    folder = tmp_path / "task"
    shutil.copytree(PROJECT_ROOT / "tasks" / "decode_cpu", folder)
    cfg = compose_judge_config([f"task={folder}", f"judge.private_dir={tmp_path / 'judge'}"])
    for key, value in task.items():
        OmegaConf.update(cfg, f"task.{key}", value, merge=False)
    return cfg


def test_a_changed_toolchain_output_changes_the_fingerprint(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, toolchain=[["cc", "--version"]])
    said = {"text": "cc 12.2"}
    monkeypatch.setattr(
        private, "toolchain_outputs", lambda commands, *a: [said["text"]] if commands else []
    )
    before = private.task_fingerprint(cfg)
    assert private.task_fingerprint(cfg) == before
    said["text"] = "cc 13.1"  # the compiler was upgraded
    assert private.task_fingerprint(cfg) != before
    assert private.home_path(cfg) != private.home_path(_cfg(tmp_path / "b"))


def test_assets_are_hashed_once_and_a_changed_asset_changes_the_fingerprint(tmp_path):
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"w" * 1000)
    cfg = _cfg(tmp_path, assets={"weights": str(weights)})
    before = private.task_fingerprint(cfg)
    cache = tmp_path / "judge" / private.ASSET_HASH_CACHE
    entry = json.loads(cache.read_text())[str(weights.resolve())]
    assert entry["sha256"] == hashlib.sha256(b"w" * 1000).hexdigest()
    # Same path, size and mtime: the cached hash is used, the file is not read again.
    cache.write_text(json.dumps({str(weights.resolve()): {**entry, "sha256": "cached"}}))
    assert taskenv.asset_digests({"weights": str(weights)}, cache) == {"weights": "cached"}
    cache.unlink()
    assert private.task_fingerprint(cfg) == before
    weights.write_bytes(b"v" * 1000)
    assert private.task_fingerprint(cfg) != before


def test_a_missing_asset_is_one_line_naming_the_fix(tmp_path):
    cfg = _cfg(tmp_path, assets={"weights": "no/such.bin"})
    with pytest.raises(taskenv.TaskEnvironmentError) as caught:
        private.task_fingerprint(cfg)
    message = str(caught.value)
    assert "\n" not in message and "no/such.bin" in message and "task.yaml" in message


@pytest.mark.docker
def test_toolchain_runs_in_the_sandbox_image():
    [out] = taskenv.toolchain_outputs([["cc", "--version"]], "swarmlab-base:1", True)
    assert "exit 0" in out and "Free Software Foundation" in out


def test_an_image_retagged_since_setup_is_an_infrastructure_fault(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from judge.sandbox import InfrastructureFault

    cfg = _cfg(tmp_path)
    now = taskenv.TaskRuntime(image="swarmlab-task-x:1", image_id="sha256:new")
    monkeypatch.setattr(private, "task_runtime", lambda *a: now)
    home = SimpleNamespace(manifest={"image_id": "sha256:old"})
    with pytest.raises(InfrastructureFault, match="not sha256:old as at set-up"):
        private.sandbox_runtime(cfg.task, home)
    home.manifest["image_id"] = "sha256:new"
    assert private.sandbox_runtime(cfg.task, home) is now


@pytest.mark.docker
def test_python_m_judge_exits_2_on_a_missing_asset_and_makes_no_judge_folder(tmp_path):
    import subprocess
    import sys

    import yaml

    folder = tmp_path / "task"
    shutil.copytree(PROJECT_ROOT / "tasks" / "decode_cpu", folder)
    spec = yaml.safe_load((folder / "task.yaml").read_text())
    spec["assets"] = {"weights": "weights/model.bin"}
    (folder / "task.yaml").write_text(yaml.safe_dump(spec))
    private = tmp_path / "judge"
    done = subprocess.run(
        [sys.executable, "-m", "judge", "setup", f"task={folder}", f"judge.private_dir={private}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "asset weights" in line and "weights/model.bin" in line and "task.yaml" in line
    assert not private.exists() or not any(private.iterdir())
