"""The server kind end to end on the real Docker engine: a tiny stdlib server task (the stub
in ``server_stub.py``), set up, and candidates judged through the sidecar load generator."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judge import compose_judge_config
from judge.config import SandboxConfig
from judge.kinds.server.sidecar import LoadGen, ServerProcess
from judge.private import setup
from judge.queue import JudgeQueue
from judge.sandbox import Sandbox
from judge.service import run_until_done
from judge.verdict import Verdict
from tasks.schema import PROJECT_ROOT
from tests.support.sandbox import kill_script, script_tree
from tests.support.unique import SESSION

pytestmark = pytest.mark.docker

STUB = Path(__file__).with_name("server_stub.py")

TASK_YAML = """\
name: {name}
kind: server
template: template
inputs: "inputs.py:make_prompts"
frozen: [frozen/**]
package_names: [stub]
serve: ["{{python}}", "-I", "-B", "stub/server.py", "--host", "{{host}}", "--port", "{{port}}",
        "--step-ms", "{step_ms}"]
vocab: 512
cases:
  - {{name: b1, batch: 1, prompt_len: [4, 12], new_tokens: 8}}
  - {{name: b4, batch: 4, prompt_len: [4, 12], new_tokens: 8}}
timing: {{batch: 4, new_tokens: 16, runs: 3, prompt_len: [4, 12]}}
b1: {{pairs: 9, max_pairs: 15, new_tokens: 16, prompt_len: [4, 12]}}
alternating: {{rounds: 0}}
spec: {{target_x_baseline: 2.0, b1_max_regression: 0.3}}
server: {{model: stub, ready_timeout_s: 20, concurrency: [1, 4]}}
"""

INPUTS = """\
import random


def make_prompts(seed, batch, prompt_len, vocab):
    lo, hi = prompt_len
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(batch)]
"""


def make_task(root: Path, name: str = "serve_stub", step_ms: float = 10.0) -> Path:
    """A server task folder whose baseline serves one request at a time."""
    (root / "template" / "stub").mkdir(parents=True, exist_ok=True)
    (root / "template" / "frozen").mkdir(exist_ok=True)
    (root / "template" / "frozen" / "README").write_text("frozen\n")
    text = STUB.read_text().replace("SERIAL = False", "SERIAL = True", 1)
    (root / "template" / "stub" / "server.py").write_text(text)
    (root / "inputs.py").write_text(INPUTS)
    (root / "task.yaml").write_text(TASK_YAML.format(name=name, step_ms=step_ms))
    return root


def git_commit(repo: Path, message: str) -> str:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            message,
        ],
        check=True,
    )
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


# Run inside the candidate's container: what of the sidecar can it see or reach?
PROBE = """
import json, os, socket
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen.append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
        except OSError:
            pass
name = "server" + "_load"  # not spelled whole: this script's own cmdline would match
out = {"loadgen_visible": any(name in c for c in seen)}
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("192.0.2.1", 9))
    out["route_out"] = True
except OSError:
    out["route_out"] = False
out["loadgen_file"] = os.path.exists("/opt/swarmlab-loadgen/" + name + ".py")
print(json.dumps(out))
"""


# Run in the sidecar: where the load generator's h11 comes from.
WHICH_H11 = """
import importlib.util, os
spec = importlib.util.spec_from_file_location("l", "/opt/swarmlab-loadgen/server_load.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(os.path.dirname(module.h11.__file__))
"""


def test_the_sidecar_reaches_the_server_and_nothing_else_is_shared(tmp_path, base_image):
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copyfile(STUB, tree / "server.py")
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test-server", tag=f"sidecar-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        argv = [sandbox.python, "-I", "-B", "server.py", "--port", "8000", "--step-ms", "1"]
        server = ServerProcess(box, argv, {}, "stub")
        loadgen = LoadGen(sandbox, box, "candidate")
        ready = {"op": "ready", "host": "127.0.0.1", "port": 8000, "path": "/v1/models"}
        assert loadgen.call({**ready, "timeout_s": 20}, timeout=40)["ok"]
        reply = loadgen.call(
            {
                "op": "run",
                "host": "127.0.0.1",
                "port": 8000,
                "path": "/v1/completions",
                "model": "m",
                "requests": [{"prompt": [1, 2, 3], "max_tokens": 5}] * 3,
                "concurrency": 3,
                "timeout_s": 20,
            },
            timeout=40,
        )
        assert [len(r["ids"]) for r in reply["results"]] == [5, 5, 5]
        code, out = box.run([sandbox.python, "-I", "-c", PROBE], timeout=30)
        assert code == 0, out
        seen = json.loads(out.strip().splitlines()[-1])
        assert seen == {"loadgen_visible": False, "route_out": False, "loadgen_file": False}
        # Its HTTP parser is the h11 mounted beside it, whatever the interpreter has installed.
        code, out = loadgen.box.run([sandbox.python, "-I", "-B", "-c", WHICH_H11], timeout=30)
        assert (code, out.strip().splitlines()[-1]) == (0, "/opt/swarmlab-loadgen/lib/h11"), out
        # The sidecar is a container of the evaluation: closed with the others.
        assert loadgen.box in sandbox.containers
        assert server.running()
    finally:
        sandbox.close()


LOGGING_SERVER = """
import sys
while True:  # a server logging every request, and more
    sys.stdout.write("INFO: request served\\n" * 400)
    sys.stdout.flush()
"""


def test_a_closed_servers_log_does_not_block_its_container(tmp_path, base_image):
    """A server that logs without pause, once the judge has closed its end: its log used to
    block the Docker daemon's copy, and when the server died (killed here, as the container's
    removal kills it) every later exec in the container and the removal itself waited on that
    copy (an exec 15 s, then its timeout; the removal 22 s). Closed both ways, the container
    runs its next command. Without that, the command below waits out its whole timeout."""
    tree = script_tree(tmp_path, {"logging_server.py": LOGGING_SERVER})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test-server", tag=f"logging-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        server = ServerProcess(box, [sandbox.python, "-I", "logging_server.py"], {}, "logging")
        time.sleep(1)  # logging, drained
        server.close()
        time.sleep(1)  # nobody drains it now: the socket's buffers fill
        box.run([sandbox.python, "-I", "-c", kill_script("logging_server.py")], timeout=60)
        code, out = box.run([sandbox.python, "-I", "-c", "print('next')"], timeout=60)
        assert (code, out.strip()) == (0, "next"), "the container's next command never ran"
        assert not server.running()
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def stub_task(tmp_path_factory, judge_private_dir, base_image):
    root = make_task(tmp_path_factory.mktemp("serve_stub"))
    overrides = [f"task={root}", f"judge.private_dir={judge_private_dir}"]
    cfg = compose_judge_config(overrides)
    return overrides, cfg, setup(cfg)


def test_a_serial_baseline_passes_and_concurrency_pays(stub_task, tmp_path):
    _, cfg, home = stub_task
    repo = tmp_path / "cand"
    shutil.copytree(cfg.task.root + "/template", repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    base = git_commit(repo, "baseline")
    server = repo / "stub" / "server.py"
    server.write_text(server.read_text().replace("SERIAL = True", "SERIAL = False", 1))
    fast = git_commit(repo, "serve requests concurrently")
    frozen = repo / "frozen" / "README"
    frozen.write_text("edited\n")
    edited = git_commit(repo, "frozen zone edit")
    queue = JudgeQueue(home.queue_path)
    jobs = [
        queue.enqueue(arm="a", agent="w", repo=str(repo), commit=c) for c in (base, fast, edited)
    ]
    same, faster, rejected = run_until_done(cfg, home, jobs)
    assert (same.verdict, faster.verdict) == (Verdict.PASS, Verdict.PASS), (
        same.detail,
        faster.detail,
    )
    assert (rejected.verdict, rejected.reason) == (Verdict.REJECT, "frozen_zone")
    assert faster.metric["name"] == "out_tok_s"
    assert faster.metrics["score"] == faster.metrics["out_tok_s"]
    # Sleeps, not CPU, bound the stub: four overlapping streams are several times one.
    assert faster.metrics["x_baseline"] > same.metrics["x_baseline"]
    for level in ("1", "4"):
        numbers = faster.metrics["server"][level]
        assert {"tok_s", "ttft_ms", "itl_ms", "requests_s", "x"} <= set(numbers)
    assert faster.metrics["ttft_ms"] < faster.metrics["baseline_ttft_ms"]


def test_generated_mutants_get_their_verdicts(stub_task):
    overrides, _, home = stub_task
    result = subprocess.run(
        [sys.executable, "-m", "judge", "preflight", *overrides],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    record = json.loads((home.root / "preflight.json").read_text())
    names = {row["mutant"] for row in record["rows"]}
    assert {"gen_swap", "gen_truncate", "gen_cache", "gen_fake_usage", "gen_hang"} <= names
    # The HTTP families of issue 24: slow loris, a 1xx flood, a status leak, odd chunking.
    http = {"gen_slow_headers", "gen_slow_body", "gen_1xx_flood", "gen_status_leak"}
    assert http | {"gen_odd_chunks"} <= names


def test_a_baseline_server_that_exits_is_one_line_at_setup(tmp_path, base_image):
    root = make_task(tmp_path / "broken", name="serve_broken")
    (root / "template" / "stub" / "server.py").write_text("raise SystemExit('no model here')\n")
    result = subprocess.run(
        [sys.executable, "-m", "judge", "setup", f"task={root}",
         f"judge.private_dir={tmp_path / 'judge'}"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    # Set-up's progress lines, then one line saying what is wrong.
    last = result.stderr.strip().splitlines()[-1]
    assert "baseline server exited" in last and "no model here" in last, result.stderr
    assert not list((tmp_path / "judge").glob("*/hidden/sets-*/references.npz"))
