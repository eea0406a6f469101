"""Agent containers get the task's part as the judge's sandbox does: /build (writable,
executable), the assets read-only, the task's image, and never the judge's device."""

from __future__ import annotations

import os

import pytest

from isolation.backends import (
    RUN_LABEL,
    AgentSpec,
    docker_options,
    get_backend,
    wait_until_stopped,
    with_task,
)
from isolation.images import base_tag
from isolation.taskenv import TaskRuntime
from isolation.workspace import Seat, prepare_arm, template_repo

ENGINE_C = '#include <stdio.h>\nint main(void) { printf("agent built %d\\n", 6 * 7); }\n'
SCRIPT = (
    'cc -o "$SWARMLAB_BUILD/e" src/e.c && "$SWARMLAB_BUILD/e"'
    ' && echo "assets at $SWARMLAB_ASSETS" && cat /assets/weights/w.bin && echo'
    " && (echo x > /assets/weights/w.bin 2>/dev/null && echo WROTE || echo asset-refused)"
)


def _spec(tmp_path, command: list[str]) -> AgentSpec:
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src" / "e.c").write_text(ENGINE_C)
    source, start = template_repo(template, tmp_path / "template.git")
    uid = 1000 if os.geteuid() == 0 else None
    arm = prepare_arm(tmp_path / "run", "solo", source, start, [Seat("w1", "worker")], uid, uid)
    return AgentSpec(
        arm="solo",
        agent="w1",
        workspace=arm.agents["w1"],
        arm_workspace=arm,
        command=command,
        cpuset="0",
        memory="512m",
        labels={RUN_LABEL: f"taskenv-{os.getpid()}"},
        user="1000:1000" if os.geteuid() == 0 else None,
    )


def test_agent_options_have_the_build_folder_and_no_device(tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"W")
    runtime = TaskRuntime(image="swarmlab-task-x:abc", assets={"weights": str(weights)})
    spec = with_task(_spec(tmp_path, ["true"]), runtime)
    assert spec.image == "swarmlab-task-x:abc"
    options = docker_options(spec)
    assert "device_requests" not in options  # judge.device is the evaluation containers' alone
    assert "exec" in options["tmpfs"]["/build"].split(",")
    assert options["volumes"][str(weights)] == {"bind": "/assets/weights", "mode": "ro"}
    assert options["environment"]["SWARMLAB_BUILD"] == "/build"
    # A seat whose CLI brings an image of its own keeps it.
    kept = with_task(AgentSpec(**{**spec.__dict__, "image": "vendor-cli:1", "assets": {}}), runtime)
    assert kept.image == "vendor-cli:1" and kept.assets == {"weights": str(weights)}
    assert with_task(_spec(tmp_path / "c", ["true"]), TaskRuntime()).image == base_tag()


@pytest.mark.docker
def test_agent_builds_into_build_and_reads_assets_read_only(tmp_path):
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "w.bin").write_bytes(b"WEIGHTS")
    spec = with_task(
        _spec(tmp_path, ["/bin/sh", "-c", SCRIPT]),
        TaskRuntime(assets={"weights": str(assets)}),
    )
    backend = get_backend("docker")
    handle = backend.start(spec)
    try:
        code = wait_until_stopped(handle, 120)
        logs = handle.logs_tail(50)
    finally:
        handle.stop(timeout=1)
        backend.cleanup(spec.run)
    assert code == 0, logs
    assert "agent built 42" in logs and "assets at /assets" in logs and "WEIGHTS" in logs
    assert "asset-refused" in logs and "WROTE" not in logs
    assert (assets / "w.bin").read_bytes() == b"WEIGHTS"
