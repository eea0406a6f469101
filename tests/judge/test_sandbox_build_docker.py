"""The build folder, assets and device of the judge's sandbox (real engine, except the
container-options checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from isolation.taskenv import TaskRuntime
from judge.config import SandboxConfig
from judge.sandbox import BUILD_HINT, Sandbox
from tests.support.unique import SESSION

ENGINE_C = r"""
#include <stdio.h>
int main(void) { printf("built %d\n", 6 * 7); return 0; }
"""

PROBE = r"""
import json, os
out = {"env": {k: os.environ.get(k) for k in ("SWARMLAB_BUILD", "SWARMLAB_ASSETS")}}
out["weights"] = open("/assets/weights/w.bin", "rb").read().decode()
try:
    open("/assets/weights/w.bin", "wb").write(b"x")
    out["asset_write"] = "ok"
except OSError as exc:
    out["asset_write"] = exc.errno
print(json.dumps(out))
"""


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "engine.c").write_text(ENGINE_C)
    for p in [tree, *tree.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return tree


@pytest.mark.docker
def test_build_compiles_with_cc_into_build_and_serve_runs_it(tmp_path):
    tree = _tree(tmp_path)
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"build-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        code, output = sandbox.build(
            box, ["cc", "-O2", "-o", "{build}/engine", "src/engine.c"], 120
        )
        assert code == 0, output
        code, output = box.run(sandbox.serve_argv(["{build}/engine"]), 30)
        assert (code, output.strip()) == (0, "built 42")
        # A build that writes into the tree fails, and says where to write instead.
        code, output = sandbox.build(box, ["cc", "-o", "engine", "src/engine.c"], 120)
        assert code != 0 and BUILD_HINT in output
        # Nothing survives into the next evaluation's container.
        fresh = sandbox.container("baseline", tree)
        code, _ = fresh.run(["/build/engine"], 30)
        assert code != 0
    finally:
        sandbox.close()


@pytest.mark.docker
def test_assets_are_mounted_read_only(tmp_path):
    tree = _tree(tmp_path)
    weights = tmp_path / "assets" / "weights"
    weights.mkdir(parents=True)
    (weights / "w.bin").write_bytes(b"WEIGHTS")
    runtime = TaskRuntime(assets={"weights": str(weights)})
    sandbox = Sandbox(
        SandboxConfig(), "cpu", owner="test", tag=f"assets-{SESSION}", runtime=runtime
    )
    try:
        box = sandbox.container("candidate", tree)
        code, output = box.run([sandbox.python, "-I", "-c", PROBE], 60)
    finally:
        sandbox.close()
    assert code == 0, output
    import json

    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["env"] == {"SWARMLAB_BUILD": "/build", "SWARMLAB_ASSETS": "/assets"}
    assert seen["weights"] == "WEIGHTS"
    assert seen["asset_write"] != "ok"
    assert (weights / "w.bin").read_bytes() == b"WEIGHTS"


def test_device_goes_to_evaluation_containers(tmp_path, monkeypatch):
    monkeypatch.setattr("judge.sandbox.docker.docker_client", lambda: None)
    gpu = Sandbox(SandboxConfig(), "cuda:1", owner="test", tag=f"gpu-{SESSION}")
    [request] = gpu.container_options("candidate", tmp_path)["device_requests"]
    assert request["DeviceIDs"] == ["1"] and request["Capabilities"] == [["gpu"]]
    cpu = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"cpu-{SESSION}")
    options = cpu.container_options("candidate", tmp_path)
    assert options["device_requests"] is None
    assert "exec" in options["tmpfs"]["/build"].split(",")
    assert options["volumes"][str(tmp_path)] == {"bind": "/work/candidate", "mode": "ro"}
