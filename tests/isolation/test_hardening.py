"""One hardening profile (isolation.hardening) for the judge's containers and the agents': the
options each side passes Docker are exactly what they were when each wrote its own (issue 25).

The expected dicts are the values the two copies wrote before the profile was shared, spelled
out here, never computed by the code under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from isolation.backends import (
    AGENT_LABEL,
    ARM_LABEL,
    RUN_LABEL,
    AgentSpec,
    _container_name,
    docker_env,
    docker_mounts,
    docker_options,
)
from isolation.hardening import hardened_options
from isolation.taskenv import TaskRuntime
from isolation.workspace import Seat, prepare_arm, template_repo
from judge.config import SandboxConfig
from judge.sandbox import DockerSandbox

JUDGE_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "HOME": "/tmp",
    "SWARMLAB_BUILD": "/build",
    "SWARMLAB_ASSETS": "/assets",
}


@pytest.fixture
def judge_sandbox(monkeypatch):
    """A Docker sandbox that never reaches the engine (options only)."""
    monkeypatch.setattr("judge.sandbox.docker.docker_client", lambda: None)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        monkeypatch.delenv(name, raising=False)

    def make(cfg: SandboxConfig, device: str = "cpu", runtime=None) -> DockerSandbox:
        return DockerSandbox(cfg, device, owner="own", tag="tag", runtime=runtime)

    return make


def test_the_judges_evaluation_container_options_are_unchanged(tmp_path, judge_sandbox):
    cfg = SandboxConfig(
        cpuset="1", memory="3g", pids_limit=99, scratch_mb=77, mount_host_python=False
    )
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"W")
    runtime = TaskRuntime(assets={"weights": str(weights)})
    options = judge_sandbox(cfg, runtime=runtime).container_options("candidate", tmp_path)
    assert options == {
        "name": "swarmlab-judge-tag-candidate",
        "detach": True,
        "network_mode": "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            "/tmp": "rw,nosuid,nodev,size=64m",
            "/build": "rw,nosuid,nodev,exec,size=77m,mode=1777",
        },
        "user": "65534:65534",
        "cpuset_cpus": "1",
        "mem_limit": "3g",
        "memswap_limit": "3g",
        "pids_limit": 99,
        "volumes": {
            str(weights): {"bind": "/assets/weights", "mode": "ro"},
            str(tmp_path): {"bind": "/work/candidate", "mode": "ro"},
        },
        "working_dir": "/work/candidate",
        "environment": JUDGE_ENV,
        "labels": {"org.swarmlab.judge.sandbox": "own", "org.swarmlab.judge.device": "cpu"},
        "device_requests": None,
    }


def test_the_load_generators_sidecar_options_are_unchanged(tmp_path, judge_sandbox):
    cfg = SandboxConfig(cpuset="0", mount_host_python=False)
    files = {"/host/load.py": "/opt/lg/load.py", "/host/h11": "/opt/lg/lib/h11"}
    options = judge_sandbox(cfg, device="cuda:0").sidecar_options(
        "r-loadgen", "abc", files, "/opt/lg"
    )
    assert options == {
        "name": "swarmlab-judge-tag-r-loadgen",
        "detach": True,
        "network_mode": "container:abc",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            "/tmp": "rw,nosuid,nodev,size=64m",
            "/build": "rw,nosuid,nodev,exec,size=512m,mode=1777",
        },
        "user": "65534:65534",
        "cpuset_cpus": "0",
        "mem_limit": "2g",
        "memswap_limit": "2g",
        "pids_limit": 256,
        "volumes": {
            "/host/load.py": {"bind": "/opt/lg/load.py", "mode": "ro"},
            "/host/h11": {"bind": "/opt/lg/lib/h11", "mode": "ro"},
        },
        "working_dir": "/opt/lg",
        "environment": {},
        "labels": {"org.swarmlab.judge.sandbox": "own", "org.swarmlab.judge.device": "cuda:0"},
        "device_requests": None,  # the judge's device is the evaluation containers' alone
    }


def _spec(tmp_path: Path, **fields) -> AgentSpec:
    template = tmp_path / "template"
    template.mkdir()
    (template / "f.txt").write_text("x")
    source, start = template_repo(template, tmp_path / "template.git")
    arm = prepare_arm(tmp_path / "run", "solo", source, start, [Seat("w1", "worker")], None, None)
    return AgentSpec(
        arm="solo",
        agent="w1",
        workspace=arm.agents["w1"],
        arm_workspace=arm,
        command=["true"],
        user="1000:1001",
        labels={RUN_LABEL: "r1"},
        **fields,
    )


@pytest.mark.parametrize(
    ("fields", "network", "tmp", "build", "memory", "pids"),
    [
        ({}, "none", "512m", "1g", "1g", 256),
        (
            dict(network="proxy-net", tmp_size="5m", build_size="6m", memory="7g", pids_limit=8),
            "proxy-net",
            "5m",
            "6m",
            "7g",
            8,
        ),
        (dict(network=""), "none", "512m", "1g", "1g", 256),
    ],
)
def test_the_agents_container_options_are_unchanged(
    tmp_path, fields, network, tmp, build, memory, pids
):
    spec = _spec(tmp_path, mount_host_python=False, cpuset="0", **fields)
    assert docker_options(spec) == {
        # The agent's own parts, from helpers this change left alone.
        "name": _container_name(spec),
        "working_dir": "/work/repo",
        "environment": docker_env(spec),
        "volumes": docker_mounts(spec),
        "labels": {RUN_LABEL: "r1", ARM_LABEL: "solo", AGENT_LABEL: "w1"},
        "init": True,
        "cpuset_cpus": "0",
        # The hardening, as backends.docker_options wrote it.
        "detach": True,
        "user": "1000:1001",
        "network_mode": network,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            "/tmp": f"rw,nosuid,nodev,size={tmp}",
            "/build": f"rw,nosuid,nodev,exec,size={build},mode=1777",
        },
        "mem_limit": memory,
        "memswap_limit": memory,
        "pids_limit": pids,
    }


def test_an_agent_without_a_cpuset_gets_none(tmp_path):
    assert "cpuset_cpus" not in docker_options(_spec(tmp_path))


def test_both_sides_pass_the_shared_profile_whole(tmp_path, judge_sandbox):
    """Every key of the profile reaches Docker from both sides with the profile's value, so a
    hardening added to the profile reaches both (the sidecar's network aside: it joins its
    server's)."""
    judge = judge_sandbox(SandboxConfig(memory="2g", pids_limit=256, scratch_mb=512))
    profile = hardened_options(
        user="65534:65534", memory="2g", pids_limit=256, tmp_size="64m", build_size="512m"
    )
    options = judge.container_options("candidate", tmp_path)
    assert {key: options[key] for key in profile} == profile
    spec = _spec(tmp_path)
    profile = hardened_options(
        user="1000:1001", memory="1g", pids_limit=256, tmp_size="512m", build_size="1g"
    )
    options = docker_options(spec)
    assert {key: options[key] for key in profile} == profile
