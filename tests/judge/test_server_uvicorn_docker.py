"""The server kind on a task whose front is uvicorn + Starlette (vLLM's and SGLang's stack).

The task (``fixtures/serve_uvicorn``) is serve_cpu's engine behind ``front/server.py``: every
streamed body chunked, each event split over two chunks, connections kept alive after a stream.
The host test checks the front answers serve_cpu's own tokens through the judge's load
generator; the Docker test runs the preflight's mutants that speak HTTP differently or time
it (the five HTTP families of issue 24, a hang, a swap, a B=1 regression, the baseline; the
whole catalogue runs on the stub task in test_server_docker.py, and the rest do not depend on
the front), which must
pass. Before the load generator decoded
chunked bodies its baseline failed set-up (WRONG protocol on every event split in two); before
the mutants' proxy ended a relay with its upstream message, ``gen_b1_slow_2x`` passed as often
as not (a finished request counted as in flight while uvicorn held the connection).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from judge.kinds.server.load import handle
from tasks.schema import PROJECT_ROOT

FIXTURE = Path(__file__).with_name("fixtures") / "serve_uvicorn"
SERVE_CPU = PROJECT_ROOT / "tasks" / "serve_cpu"


def make_uvicorn_task(dest: Path) -> Path:
    """The task folder: serve_cpu's template and inputs, this fixture's task.yaml and front."""
    shutil.copytree(
        SERVE_CPU / "template", dest / "template", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(FIXTURE / "front", dest / "template" / "front",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copyfile(SERVE_CPU / "inputs.py", dest / "inputs.py")
    shutil.copyfile(FIXTURE / "task.yaml", dest / "task.yaml")
    for p in [dest, *dest.rglob("*")]:  # the sandbox runs as nobody
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tokens(port: int, prompts: list[list[int]]) -> list[list[int]]:
    reply = handle(
        {
            "op": "run",
            "host": "127.0.0.1",
            "port": port,
            "path": "/v1/completions",
            "model": "serve-cpu-int",
            "requests": [{"prompt": p, "max_tokens": 12} for p in prompts],
            "concurrency": len(prompts),
            "timeout_s": 120,
        }
    )
    assert all(r["ok"] for r in reply["results"]), reply["results"]
    return [r["ids"] for r in reply["results"]]


def test_the_uvicorn_front_serves_serve_cpus_tokens(tmp_path):
    """Both fronts over the same engine, as subprocesses: the same ids for the same prompts,
    one request and four at once (the host's interpreter, with uvicorn and starlette)."""
    tree = make_uvicorn_task(tmp_path / "task") / "template"
    prompts = [[5, 6, 7, 8], [100, 2, 3], [4095, 0, 11, 12, 13], [9]]
    got = {}
    for front in ("harness/server.py", "front/server.py"):
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", front, "--port", str(port)],
            cwd=tree,
            start_new_session=True,
        )
        try:
            ready = {"op": "ready", "host": "127.0.0.1", "port": port, "path": "/v1/models"}
            assert handle({**ready, "timeout_s": 60})["ok"], front
            got[front] = [_tokens(port, prompts[:1]), _tokens(port, prompts)]
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert got["front/server.py"] == got["harness/server.py"]


# What the front changes: how replies are framed and streamed, and how their timing is seen.
FRONT_MUTANTS = (
    "baseline", "gen_swap", "gen_hang", "gen_b1_slow_2x", "gen_slow_headers",
    "gen_slow_body", "gen_1xx_flood", "gen_status_leak", "gen_odd_chunks",
)  # fmt: skip


@pytest.mark.docker
@pytest.mark.slow
def test_preflight_passes_on_a_uvicorn_starlette_front(tmp_path, base_image):
    task = make_uvicorn_task(tmp_path / "serve_uvicorn")
    private = tmp_path / "judge"
    only = ",".join(FRONT_MUTANTS)
    result = subprocess.run(
        [sys.executable, "-m", "judge", "preflight", f"task={task}",
         f"judge.private_dir={private}", f"only=[{only}]"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=2400,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    [record] = [json.loads(p.read_text()) for p in private.glob("*/preflight-partial.json")]
    rows = {row["mutant"]: row for row in record["rows"]}
    assert sorted(rows) == sorted(FRONT_MUTANTS)
    assert record["ok"], record
