"""A task's image/Dockerfile is built locally and offline FROM the base image, reused while the
folder is unchanged, and used by the judge's sandbox (real engine)."""

from __future__ import annotations

import pytest

from isolation import docker_client, taskenv
from isolation.taskenv import TaskEnvironmentError, task_image, task_runtime
from judge.config import SandboxConfig
from judge.sandbox import Sandbox
from tests.support.unique import SESSION

pytestmark = pytest.mark.docker

DOCKERFILE = "ARG BASE\nFROM ${BASE}\nCOPY version.txt /opt/task/version.txt\n"


def _task(tmp_path, dockerfile: str, name: str = "imgtest"):
    root = tmp_path / name
    (root / "image").mkdir(parents=True)
    (root / "image" / "Dockerfile").write_text(dockerfile)
    (root / "image" / "version.txt").write_text("tool 1\n")
    return root, {"name": name, "image": None, "assets": {}}


def test_dockerfile_is_built_once_per_content_and_used_by_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.setattr(taskenv, "_IMAGES", {})
    client = docker_client()
    root, task = _task(tmp_path, DOCKERFILE)
    tags = []
    try:
        tag, image_id = task_image(task, root, client)
        tags.append(tag)
        assert tag.startswith("swarmlab-task-imgtest:")
        taskenv._IMAGES.clear()  # another process: the tag is found, nothing is rebuilt
        assert task_image(task, root, client) == (tag, image_id)
        sandbox = Sandbox(
            SandboxConfig(),
            "cpu",
            owner="test",
            tag=f"img-{SESSION}",
            runtime=task_runtime(task, root),
        )
        try:
            box = sandbox.container("candidate", root)
            code, output = box.run(["cat", "/opt/task/version.txt"], 30)
        finally:
            sandbox.close()
        assert (code, output.strip()) == (0, "tool 1")
        (root / "image" / "version.txt").write_text("tool 2\n")  # a changed folder: a new tag
        new_tag, new_id = task_image(task, root, client)
        tags.append(new_tag)
        assert new_tag != tag and new_id != image_id
    finally:
        for t in tags:
            client.images.remove(t, force=True)


def test_an_image_that_fails_to_build_is_one_line_with_the_log_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(taskenv, "_IMAGES", {})
    root, task = _task(tmp_path, DOCKERFILE + "COPY missing.txt /x\n", name="imgbad")
    with pytest.raises(TaskEnvironmentError) as caught:
        task_image(task, root, docker_client())
    message = str(caught.value)
    assert "\n" not in message and str(root / "image" / "Dockerfile") in message
    assert "missing.txt" in message and "fix the Dockerfile" in message


def test_a_named_image_must_exist_locally(tmp_path, monkeypatch):
    monkeypatch.setattr(taskenv, "_IMAGES", {})
    task = {"name": "x", "image": "swarmlab-no-such-image:0", "assets": {}}
    with pytest.raises(TaskEnvironmentError, match="not in the local Docker engine"):
        task_image(task, tmp_path, docker_client())
