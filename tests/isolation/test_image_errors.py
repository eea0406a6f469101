"""A missing engine or image is one line and exit 2, never a registry error (issue 30).

The unit tests need no engine: the docker client is pointed at a socket that does not exist,
or the engine is a stub. The ``docker`` ones make a throwaway base image under a tag of their
own (``SWARMLAB_BASE_IMAGE``) and remove only that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

from isolation import DockerUnavailable, ImageMissing, images

REPO = Path(__file__).resolve().parents[2]


def _no_engine_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    env.pop("CI", None)
    return env


def test_docker_unavailable_is_one_line_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(DockerUnavailable) as caught:
        images.docker_client()
    text = str(caught.value)
    assert "\n" not in text
    assert "make setup" in text and "scripts/docker-engine.sh ensure" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "judge", "setup", "task=decode_cpu"],
        ["-m", "judge", "preflight", "task=decode_cpu"],
        ["-m", "isolation.images"],
        ["-m", "runner", "arm=solo", "budget.evaluations=1"],
    ],
    ids=["judge-setup", "judge-preflight", "images", "runner"],
)
def test_every_command_without_an_engine_says_one_line_and_exits_2(argv, tmp_path):
    run_dir = tmp_path / "run"
    extra = [f"hydra.run.dir={run_dir}"] if "runner" in argv else []
    extra += [f"judge.private_dir={tmp_path / 'judge'}"] if "judge" in argv else []
    out = subprocess.run(
        [sys.executable, *argv, *extra],
        cwd=REPO,
        env=_no_engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "make setup" in lines[0] and "docker-engine.sh ensure" in lines[0]
    if "runner" in argv:
        assert "isolation=local" in lines[0]
    assert "registry" not in out.stderr
    assert not run_dir.exists() and not (tmp_path / "judge").exists()  # nothing half made


def test_base_tag_follows_the_environment(monkeypatch):
    monkeypatch.setenv(images.BASE_IMAGE_ENV, "swarmlab-base-test:abc")
    assert images.base_tag() == "swarmlab-base-test:abc"
    monkeypatch.delenv(images.BASE_IMAGE_ENV)
    assert images.base_tag() == images.DEFAULT_BASE_TAG


class _Stub:
    """A docker client whose engine holds no image at all and refuses to pull."""

    def __init__(self):
        self.created: list[str] = []
        self.images = self
        self.containers = self

    def get(self, tag):
        raise docker.errors.ImageNotFound(f"No such image: {tag}")

    def pull(self, *args, **kwargs):  # pragma: no cover - the point is that it is never called
        raise AssertionError("pulled from a registry")

    def create(self, image, command=None, **options):
        if image not in self.created:
            raise docker.errors.ImageNotFound(f"No such image: {image}")
        return _StubContainer()


class _StubContainer:
    started = False

    def start(self):
        self.started = True


def test_a_missing_image_swarmlab_cannot_make_is_one_line(monkeypatch):
    monkeypatch.setenv(images.BASE_IMAGE_ENV, "swarmlab-base-test:unit")
    with pytest.raises(ImageMissing) as caught:
        images.run_container(_Stub(), "someone/else:2", ["true"], detach=True)
    text = str(caught.value)
    assert "\n" not in text and "nothing is pulled" in text
    assert "docker build -t someone/else:2" in text and "swarmlab-base-test:unit" in text
    with pytest.raises(ImageMissing, match=r"python -m judge setup task="):
        images.ensure_image(_Stub(), "swarmlab-task-toy:0123")


def test_a_missing_base_image_is_made_then_started(monkeypatch):
    monkeypatch.setenv(images.BASE_IMAGE_ENV, "swarmlab-base-test:unit")
    stub = _Stub()
    made = []

    def fake_ensure(client, tag=None, progress=None):
        made.append(tag)
        stub.created.append(tag)
        return "sha256:made"

    monkeypatch.setattr(images, "ensure_base_image", fake_ensure)
    container = images.run_container(stub, "swarmlab-base-test:unit", ["true"], detach=True)
    assert container.started and made == ["swarmlab-base-test:unit"]


@pytest.mark.docker
def test_ensure_image_makes_a_missing_base_image_with_one_line(docker_client, capfd, monkeypatch):
    tag = f"swarmlab-base-test:{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv(images.BASE_IMAGE_ENV, tag)
    try:
        image_id = images.ensure_image(docker_client, tag)
        assert docker_client.images.get(tag).id == image_id
        err = capfd.readouterr().err.strip().splitlines()
        assert err == [f"making the base image {tag} (offline, from an empty root; once)"]
        assert images.ensure_image(docker_client, tag) == image_id  # made once
        assert capfd.readouterr().err == ""
        usr = {"/usr": {"bind": "/usr", "mode": "ro"}}  # the base image borrows the host's /usr
        container = images.run_container(docker_client, tag, ["/bin/true"], volumes=usr)
        try:
            assert container.wait(timeout=60)["StatusCode"] == 0
        finally:
            container.remove(force=True)
        with pytest.raises(ImageMissing, match="nothing is pulled"):
            images.run_container(docker_client, f"{tag}-absent", ["/bin/true"])
    finally:
        docker_client.images.remove(tag, force=True)


# A sweep over the settings images come from: the judge's, the agents', the isolation's, the
# task (issue 30). Before, each job checked its own images, so a sweep made its folder and every
# job failed on its own; now the sweep asks the engine and each job's images up front.
SWEEPS = {
    "isolation": ["isolation.memory=1g,2g"],
    "judge": ["judge.sandbox.memory=2g,3g"],
    "task": ["task=decode_cpu,decode_c"],
    "agent": ["agent=scripted,scripted"],
}


@pytest.mark.parametrize("swept", SWEEPS.values(), ids=SWEEPS.keys())
def test_a_sweep_over_image_settings_without_an_engine_is_one_line_and_no_folder(swept, tmp_path):
    sweep = tmp_path / "sweep"
    out = subprocess.run(
        [sys.executable, "-m", "runner", "-m", "arm=solo", "seed=1,2", *swept,
         f"hydra.sweep.dir={sweep}", f"judge.private_dir={tmp_path / 'judge'}"],
        cwd=REPO, env=_no_engine_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert "make setup" in line and "docker-engine.sh ensure" in line, line
    assert sorted(tmp_path.iterdir()) == []  # no sweep folder, no job folder, no judge folder


def test_a_sweeps_jobs_are_its_overrides_product():
    from omegaconf import OmegaConf

    from runner.settings import sweep_jobs

    config = OmegaConf.create(
        {"hydra": {"overrides": {"task": ["arm=solo", "seed=1,2", "task=decode_cpu,decode_c"]}}}
    )
    assert sweep_jobs(config) == [
        ["arm=solo", "seed=1", "task=decode_cpu"],
        ["arm=solo", "seed=1", "task=decode_c"],
        ["arm=solo", "seed=2", "task=decode_cpu"],
        ["arm=solo", "seed=2", "task=decode_c"],
    ]


@pytest.mark.docker
def test_a_sweep_over_the_judges_image_refuses_a_missing_one_up_front(tmp_path, docker_client):
    """One job's judge image is one swarmlab cannot make: the sweep is one line naming it and
    exit 2 before its folder or any job exists (the other job's image is there)."""
    missing = f"swarmlab-no-such-image:{uuid.uuid4().hex[:12]}"
    sweep = tmp_path / "sweep"
    out = subprocess.run(
        [sys.executable, "-m", "runner", "-m", "arm=solo", "seed=1",
         f"judge.sandbox.image={images.base_tag()},{missing}",
         f"hydra.sweep.dir={sweep}", f"judge.private_dir={tmp_path / 'judge'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert missing in line and "nothing is pulled" in line, line
    assert sorted(tmp_path.iterdir()) == []
