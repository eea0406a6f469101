"""The example task folders under tasks/examples: they compose, and what the judge would ask
Docker for is right. They target hardware these machines lack (a GPU, a vendor image, model
weights), so no server is started here; docs/tasks.md and the example's README say so."""

from __future__ import annotations

import subprocess
from pathlib import Path

from isolation.images import host_python_mounts
from isolation.taskenv import TaskRuntime, asset_paths
from judge.compose import compose_judge_config
from judge.kinds import get_kind
from judge.kinds.server.evaluator import SERVER_ENV, serve_argv
from judge.sandbox import Sandbox
from tasks.folder import load_task_callable
from tasks.schema import PROJECT_ROOT, task_root

VLLM = PROJECT_ROOT / "tasks" / "examples" / "vllm"
IMAGE = "vllm/vllm-openai:v0.11.0"
GPU_BOX = [
    "judge.device=cuda:0",
    "judge.sandbox.mount_host_python=false",
    "judge.sandbox.python=python3",
    "judge.sandbox.cpuset=0-7",
    "judge.sandbox.memory=64g",
    "judge.sandbox.pids_limit=4096",
    "judge.sandbox.scratch_mb=16384",
]


def _compose(tmp_path: Path, extra: list[str] = GPU_BOX):
    model = tmp_path / "Qwen2.5-0.5B-Instruct"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return compose_judge_config([f"task={VLLM}", f"task.assets.model={model}", *extra]), model


def test_vllm_example_composes_as_a_server_task(tmp_path):
    cfg, _ = _compose(tmp_path)
    task = cfg.task
    assert task.kind == "server" and task.image == IMAGE
    assert get_kind("server").metric(task).unit  # the kind knows how to score it
    assert task.server.model == "model" and task.server.endpoint == "completions"
    assert max(task.server.concurrency) == task.timing.batch
    assert task_root(task) == VLLM


def test_vllm_example_asks_docker_for_gpu_0_the_vendor_image_and_the_weights_read_only(
    tmp_path, monkeypatch
):
    cfg, model = _compose(tmp_path)
    monkeypatch.setattr("judge.sandbox.docker.docker_client", lambda: None)
    runtime = TaskRuntime(image=cfg.task.image, assets=asset_paths(cfg.task, task_root(cfg.task)))
    sandbox = Sandbox(cfg.judge.sandbox, cfg.judge.device, owner="t", tag="t", runtime=runtime)
    tree = tmp_path / "tree"
    tree.mkdir()
    options = sandbox.container_options("candidate", tree)
    assert sandbox.image == IMAGE
    [request] = options["device_requests"]
    assert request["DeviceIDs"] == ["0"] and request["Capabilities"] == [["gpu"]]
    volumes = options["volumes"]
    assert volumes[str(model)] == {"bind": "/assets/model", "mode": "ro"}
    # The vendor image keeps its own /usr and Python: none of the host's is mounted over it.
    assert not set(host_python_mounts()) & set(volumes)
    assert options["network_mode"] == "none" and options["read_only"] is True
    assert options["cpuset_cpus"] == "0-7" and options["mem_limit"] == "64g"
    assert options["tmpfs"]["/build"].endswith("size=16384m,mode=1777")
    # The exec the judge starts in that container: the candidate's serve.sh on the judge's address.
    argv = serve_argv(sandbox, list(cfg.task.serve))
    assert argv == [
        "bash",
        "serve.sh",
        SERVER_ENV["SWARMLAB_SERVER_HOST"],
        SERVER_ENV["SWARMLAB_SERVER_PORT"],
    ]


def test_without_a_device_no_gpu_is_requested(tmp_path, monkeypatch):
    cfg, _ = _compose(tmp_path, extra=["judge.sandbox.mount_host_python=false"])
    monkeypatch.setattr("judge.sandbox.docker.docker_client", lambda: None)
    sandbox = Sandbox(cfg.judge.sandbox, cfg.judge.device, owner="t", tag="t")
    assert sandbox.container_options("candidate", tmp_path)["device_requests"] is None


def test_vllm_example_prompts_and_serve_script(tmp_path):
    cfg, _ = _compose(tmp_path)
    make = load_task_callable(cfg.task.inputs, task_root(cfg.task))
    prompts = make(7, 16, (64, 512), int(cfg.task.vocab))
    assert len(prompts) == 16 and all(64 <= len(p) <= 512 for p in prompts)
    assert all(1_000 <= t < 100_000 for p in prompts for t in p)
    assert make(7, 16, (64, 512), int(cfg.task.vocab)) == prompts  # the seed decides
    # serve.sh is valid bash, and it passes the judge's address and the read-only weights on.
    script = VLLM / "template" / "serve.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert '"$SWARMLAB_ASSETS/model"' in text and '--port "$port"' in text
