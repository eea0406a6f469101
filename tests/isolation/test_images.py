"""The offline base image and the sandbox a container made from it gives (real engine)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from isolation import DockerUnavailable, ensure_base_image, host_python_mounts, images

REPO = Path(__file__).resolve().parents[2]

# The sandbox settings the judge and agents will run under.
SANDBOX = dict(
    network_mode="none",
    cap_drop=["ALL"],
    security_opt=["no-new-privileges"],
    read_only=True,
    tmpfs={"/tmp": "rw,size=64m"},
    user="65534:65534",
    pids_limit=64,
    mem_limit="512m",
    cpuset_cpus="0",
)

# Runs inside the container; argv[1:] are host paths that must not be visible. Never sends a
# packet: connect() on a UDP socket only picks a route.
PROBE = r"""
import errno, json, os, socket, sys
import numpy

def code(exc):
    return errno.errorcode.get(exc.errno, str(exc))

out = {"uid": os.getuid(), "gid": os.getgid(), "numpy_sum": int(numpy.arange(10).sum())}
out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 9))
    out["udp_connect"] = "connected"
except OSError as exc:
    out["udp_connect"] = code(exc)
finally:
    s.close()
out["writes"] = {}
for folder in ["/", "/etc", "/work", "/home/agent", "/scratch", "/usr", sys.prefix, "/tmp"]:
    path = os.path.join(folder, "probe-write")
    try:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)
        out["writes"][folder] = "ok"
    except OSError as exc:
        out["writes"][folder] = code(exc)
out["visible"] = {p: os.path.exists(p) for p in sys.argv[1:]}
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
out["cap_eff"] = int(status["CapEff"], 16)
out["no_new_privs"] = int(status["NoNewPrivs"])
out["cpus"] = sorted(os.sched_getaffinity(0))

def first(*paths):
    for path in paths:
        try:
            return open(path).read().strip()
        except OSError:
            pass

# cgroup v2 first, then v1
out["memory_max"] = first(
    "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)
out["pids_max"] = first("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")
print(json.dumps(out))
"""

HIDDEN = [
    str(Path(__file__).resolve()),  # this very file, and the repo it lies in
    str(REPO / "pyproject.toml"),
    "/var/run/docker.sock",  # the engine itself: the worst thing to leak into a sandbox
]


def test_rootfs_tar_is_reproducible():
    assert images.base_rootfs_tar() == images.base_rootfs_tar()


def test_host_python_mounts_are_read_only_and_not_nested():
    mounts = host_python_mounts()
    assert "/usr" in mounts
    for path, spec in mounts.items():
        assert spec == {"bind": path, "mode": "ro"}
        others = [p for p in mounts if p != path]
        assert not any(path.startswith(p.rstrip("/") + "/") for p in others), path
    for needed in (sys.prefix, sys.base_prefix):
        assert any(needed == p or needed.startswith(p + "/") for p in mounts), needed


def test_docker_client_names_the_fix_when_no_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(DockerUnavailable, match=r"scripts/docker-engine\.sh ensure"):
        images.docker_client()


@pytest.mark.docker
def test_base_image_is_idempotent(docker_client, base_image):
    created = docker_client.images.get(base_image).attrs["Created"]
    again = ensure_base_image(docker_client)
    assert again == base_image
    # Not imported again: an import makes a new image (a new creation time), same content or not.
    assert docker_client.images.get(base_image).attrs["Created"] == created
    assert images.CONTENT_LABEL in docker_client.images.get(base_image).labels


@pytest.fixture(scope="module")
def probe(docker_client, base_image) -> dict:
    for path in HIDDEN:
        assert os.path.exists(path), f"{path} should exist on the host for this test to mean much"
    container = docker_client.containers.create(
        base_image,
        command=[sys.executable, "-I", "-c", PROBE, *HIDDEN],
        volumes=host_python_mounts(),
        **SANDBOX,
    )
    try:
        container.start()
        exit_code = container.wait(timeout=120)["StatusCode"]
        stdout = container.logs(stdout=True, stderr=False).decode()
        stderr = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    assert exit_code == 0, f"probe exited {exit_code}:\n{stderr}"
    return json.loads(stdout)


@pytest.mark.docker
def test_host_python_runs_numpy_as_nobody(probe):
    assert probe["numpy_sum"] == 45
    assert (probe["uid"], probe["gid"]) == (65534, 65534)


@pytest.mark.docker
def test_no_network(probe):
    assert probe["interfaces"] == ["lo"]
    assert probe["udp_connect"] == "ENETUNREACH"


@pytest.mark.docker
def test_root_and_mounts_are_read_only_except_tmp(probe):
    writes = dict(probe["writes"])
    assert writes.pop("/tmp") == "ok"
    assert writes == dict.fromkeys(writes, "EROFS")


@pytest.mark.docker
def test_unmounted_host_paths_are_invisible(probe):
    assert probe["visible"] == dict.fromkeys(HIDDEN, False)


@pytest.mark.docker
def test_privileges_and_limits(probe):
    assert probe["cap_eff"] == 0
    assert probe["no_new_privs"] == 1
    assert probe["cpus"] == [0]
    assert probe["memory_max"] == str(512 * 1024 * 1024)
    assert probe["pids_max"] == "64"
