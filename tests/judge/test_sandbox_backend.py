"""The sandbox interface (judge.sandbox.base): the implementation is picked by name
(``judge.sandbox.backend``), a new one is a new module under ``judge.sandbox`` and nothing else,
and the choice leaves the settings hash of every docker run as it was."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

import judge.sandbox
from judge import compose_judge_config, settings_hash
from judge.config import SandboxConfig
from judge.sandbox import (
    Container,
    DockerContainer,
    DockerSandbox,
    InfrastructureFault,
    Sandbox,
    SandboxContainer,
    open_sandbox,
    remove_stale_sandboxes,
    sandbox_class,
)
from judge.sandbox import base as sandbox_base

# A second implementation, as its author would write it: one module, registered by name.
PLUGIN = """
from judge.sandbox.base import Sandbox, sandbox_backend


@sandbox_backend("{name}")
class Fake(Sandbox):
    removed: list = []

    def container(self, role, tree):
        raise NotImplementedError

    def sidecar(self, role, of, files, workdir, what):
        raise NotImplementedError

    def close(self):
        pass

    @classmethod
    def prepare(cls, cfg):
        pass

    @classmethod
    def remove_stale(cls, owner, device):
        cls.removed.append((owner, device))
        return 3
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A folder searched for ``judge.sandbox.<name>`` modules; what registers there is
    forgotten afterwards."""
    monkeypatch.setattr(judge.sandbox, "__path__", [*judge.sandbox.__path__, str(tmp_path)])
    fresh = dataclasses.replace(
        sandbox_base.SANDBOXES, entries=dict(sandbox_base.SANDBOXES.entries), _found=None
    )  # the package is read again (the new folder), and what registers there is forgotten
    monkeypatch.setattr(sandbox_base, "SANDBOXES", fresh)
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("judge.sandbox.fake")]:
        del sys.modules[name]


def test_the_default_backend_is_docker_and_its_classes_keep_their_names(monkeypatch):
    assert SandboxConfig().backend == "docker"
    assert sandbox_class("docker") is DockerSandbox is Sandbox
    assert SandboxContainer is DockerContainer and issubclass(DockerContainer, Container)
    assert issubclass(DockerSandbox, sandbox_base.Sandbox)
    monkeypatch.setattr("judge.sandbox.docker.docker_client", lambda: None)
    box = open_sandbox(SandboxConfig(cpuset="0"), "cpu", owner="o", tag="t")
    assert type(box) is DockerSandbox and box.cpuset == "0"


def test_an_unreachable_engine_is_the_judges_fault(monkeypatch):
    def unreachable():
        raise RuntimeError("no engine here")

    monkeypatch.setattr("judge.sandbox.docker.docker_client", unreachable)
    with pytest.raises(InfrastructureFault, match="no engine here"):
        open_sandbox(SandboxConfig(), "cpu", owner="o", tag="t")


def test_an_unknown_backend_names_the_known_ones(plugin_dir):
    with pytest.raises(ValueError, match="no sandbox backend named 'kubernetes'; known: docker"):
        open_sandbox(SandboxConfig(backend="kubernetes"), "cpu", owner="o", tag="t")


def test_a_new_backend_is_one_new_module(plugin_dir: Path):
    (plugin_dir / "fakebox.py").write_text(PLUGIN.format(name="fakebox"))
    sandbox = open_sandbox(SandboxConfig(backend="fakebox", cpuset="2"), "cpu", "o", "t")
    assert type(sandbox).__name__ == "Fake" and sandbox.name == "fakebox"
    # The shared parts come with the interface: the argv filled in, the environment.
    assert sandbox.serve_argv(["{python}", "{build}/e"])[1] == "/build/e"
    assert sandbox.container_env()["SWARMLAB_BUILD"] == "/build"
    assert remove_stale_sandboxes("o", "cpu", backend="fakebox") == 3
    assert type(sandbox).removed == [("o", "cpu")]


def test_a_broken_backend_module_says_what_it_lacks(plugin_dir: Path):
    (plugin_dir / "fakebroken.py").write_text(
        "import swarmlab_no_such_module\n\n"
        "from judge.sandbox.base import sandbox_backend\n\n\n"
        "@sandbox_backend('fakebroken')\nclass Broken: ...\n"
    )
    with pytest.raises(ModuleNotFoundError, match="swarmlab_no_such_module"):
        sandbox_class("fakebroken")


def test_the_backend_setting_changes_the_hash_only_when_not_docker():
    base = settings_hash(compose_judge_config([]))
    assert settings_hash(compose_judge_config(["judge.sandbox.backend=docker"])) == base
    assert settings_hash(compose_judge_config(["judge.sandbox.backend=modal"])) != base
