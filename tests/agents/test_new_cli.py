"""Adding an agent CLI on an API the proxy already knows takes the files the registry names
(``agents.clis.CLI_FILES``: one module, one YAML) and its tests, nothing else of swarmlab.

The test writes a dummy CLI ("toy") as those two files in a folder of its own, never in the
project: the module (a :class:`~agents.clis.base.Client` registering itself) is loaded from its
file, the YAML joins Hydra's search path. The toy program speaks OpenAI Chat Completions (the
local endpoint of ``tests.support.endpoints``), retries a 429 and says so on its output, and
writes a session record of its own format. It then runs as a seat of the runner's own pieces
(``runner.seats.real_seat``, the Docker backend, ``runner.supervisor.Supervisor``): its retries
become an ``api_retries`` event through the toy's parser and its tokens land in the ``tokens``
table through the toy's reader, equal to what the endpoint reported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.clis import CLI_FILES, files_for_cli, get_cli, unregister_cli
from agents.clis.base import PROJECT_ROOT, STAMP
from tests.support.endpoints import ENDPOINTS, USAGE_KEYS, session_script

NAME = "toy"

# The toy CLI's program: one model call (429s retried), its record under $HOME/.toy/sessions.
PROGRAM = r"""
import json, os, sys, time, urllib.error, urllib.request
prompt, model = sys.argv[1], sys.argv[2]
body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}]}).encode()
url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
headers = {"content-type": "application/json",
           "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
for attempt in range(10):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=30) as r:
            reply = json.loads(r.read())
        break
    except urllib.error.HTTPError as exc:
        if exc.code != 429:
            raise
        print(json.dumps({"toy_retry": exc.code}), flush=True)
        time.sleep(1)
folder = os.path.join(os.environ["HOME"], ".toy", "sessions")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "%d.jsonl" % time.time_ns()), "w") as out:
    out.write(json.dumps({"toy": 1, "id": reply["id"], "model": reply["model"],
                          "usage": reply["usage"]}) + "\n")
print(json.dumps({"toy_done": reply["id"]}), flush=True)
"""

MODULE = '''
"""The toy CLI: a Python program speaking OpenAI Chat Completions."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from agents.clis.base import Client
from agents.clis.registry import register_cli
from agents.usage import UsageByModel, api_usage, as_dict, json_records, read_text

PYTHON = getattr(sys, "_base_executable", "") or sys.executable


@dataclass(frozen=True)
class Toy(Client):
    def command(self, prompt, model=None, environ=None):
        return [PYTHON, self.container_binary, prompt, model or self.default_model]

    def resume_command(self, message, model=None, environ=None):
        return self.command(message, model, environ)

    @property
    def resumes_session(self):
        return False

    def count_retries(self, output):
        lines = [json.loads(l) for l in output.splitlines() if l.startswith("{")]
        statuses = {}
        for line in lines:
            if "toy_retry" in line:
                status = str(line["toy_retry"])
                statuses[status] = statuses.get(status, 0) + 1
        return {"count": sum(statuses.values()), "statuses": statuses}

    def claims_line(self, obj):
        return isinstance(obj, dict) and obj.get("toy") == 1

    def read_records(self, paths):
        result, seen = UsageByModel(), set()
        for path in paths:
            for obj in json_records(read_text(path)):
                if self.claims_line(obj) and obj["id"] not in seen:
                    seen.add(obj["id"])
                    result.add(obj.get("model"), api_usage(as_dict(obj.get("usage"))))
        return result


TOY = register_cli(
    Toy(
        name="toy",
        package="toy-cli",
        version="0.1",
        binary_path="toy.py",
        key_env="OPENAI_API_KEY",
        base_url_env="OPENAI_BASE_URL",
        default_base_url="https://api.openai.com/v1",
        default_model="gpt-toy",
        records=".toy/sessions",
        api="openai",
    )
)
'''

YAML = """\
defaults:
  - /schema/agent@_here_
  - _self_
kind: toy
scripted: false
client: toy
model: null
command: []
image: swarmlab-base:1
network: proxy
resume: true
memory: 1g
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy's two files written under ``tmp_path/project`` (the project's layout), its module
    loaded from its file, its program installed in a clients cache of the test's own."""
    root = tmp_path / "project"
    sources = {files_for_cli(NAME)[0]: MODULE, files_for_cli(NAME)[1]: YAML}
    for relative, text in sources.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(textwrap.dedent(text).lstrip())
    spec = importlib.util.spec_from_file_location(
        "toy_cli_of_the_test", root / files_for_cli(NAME)[0]
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cli = get_cli(NAME)
    cache = tmp_path / "clients"
    program = cli.install_dir(cache) / cli.relative_binary
    program.parent.mkdir(parents=True)
    program.write_text(PROGRAM)
    program.chmod(0o755)
    cli.install_dir(cache).chmod(0o755)
    (cli.install_dir(cache) / STAMP).write_text(cli.spec)
    monkeypatch.setenv("SWARMLAB_CLIENTS_DIR", str(cache))
    yield root, cli
    unregister_cli(NAME)
    sys.modules.pop("toy_cli_of_the_test", None)


def _cfg(conf: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    from runner.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(
            config_name="runner",
            overrides=[f"hydra.searchpath=[file://{conf}]", *overrides],
        )


def test_a_new_cli_needs_its_module_and_yaml_only(toy):
    root, cli = toy
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    # What the test needed (besides itself) is exactly what the registry says a CLI needs.
    assert written == sorted(files_for_cli(NAME)) and len(written) == len(CLI_FILES) == 2
    assert not any((PROJECT_ROOT / f).exists() for f in files_for_cli(NAME))
    # The bundled CLIs follow the same layout, each on an API the registry knows.
    from agents.apis import get_api

    for name in ("claude_code", "codex", "gemini", "mini_swe"):
        assert all((PROJECT_ROOT / f).is_file() for f in files_for_cli(name)), name
        assert get_api(get_cli(name).api) is not None
    assert cli.record_format == NAME
    from analysis.tokens import formats

    assert NAME in formats()


@pytest.mark.docker
def test_the_new_cli_runs_as_a_seat_against_its_vendors_protocol(
    toy, tmp_path, base_image, docker_client
):
    from agents.clients import model_network
    from isolation.backends import RUN_LABEL, AgentSpec, get_backend
    from isolation.workspace import Seat, prepare_arm, template_repo
    from runner.events import EventLog
    from runner.seats import real_seat, seat_problem
    from runner.supervisor import Supervisor

    root, _ = toy
    net, gateway = model_network(docker_client, f"swarmlab-test-toy-{os.getpid()}")
    key = f"sk-swarmlab-test-{secrets.token_hex(16)}"
    endpoint = ENDPOINTS["openai_chat"](
        session_script("openai_chat"), host=gateway, port=0, api_key=key, failures=2
    )
    try:
        with endpoint:
            environ = {"OPENAI_API_KEY": key, "OPENAI_BASE_URL": endpoint.url + "/v1"}
            cfg = _cfg(root / "conf", "arm=solo", f"agent={NAME}", f"agent.network={net}")
            assert cfg.agent.client == NAME and seat_problem(cfg, environ) is None
            template = tmp_path / "template"
            (template / "engine").mkdir(parents=True)
            (template / "engine" / "model.py").write_text("SPEED = 1\n")
            source, start = template_repo(template, tmp_path / "template.git")
            uid = 1000 if os.geteuid() == 0 else None
            solo = prepare_arm(tmp_path / "run", "solo", source, start, [Seat("w1", "worker")],
                               uid, uid)  # fmt: skip
            run = f"test-toy-{os.getpid()}-{time.time_ns()}"
            spec = AgentSpec(
                arm="solo", agent="w1", workspace=solo.agents["w1"], arm_workspace=solo,
                command=[], network=net, cpuset="0", labels={RUN_LABEL: run},
            )  # fmt: skip
            seat = real_seat(cfg, spec, solo, time.time() + 600, environ)
            assert seat.records_format == NAME and seat.network == net
            events = EventLog(tmp_path / "run" / "events.sqlite")
            backend = get_backend("docker")
            sup = Supervisor(backend, events, [seat], tokens_every_s=0)
            sup.start_all()
            deadline = time.monotonic() + 120
            exited = []
            while time.monotonic() < deadline and not exited:
                sup.check()
                exited = events.table("lifecycle", "WHERE event='exited'")
                time.sleep(0.5)
            sup.stop_all("test over")
            backend.cleanup(run)
    finally:
        docker_client.networks.get(net).remove()
    assert exited, "the toy seat never exited"
    assert json.loads(exited[0]["detail"])["code"] == 0, exited[0]
    (retries,) = events.table("lifecycle", "WHERE event='api_retries'")
    assert json.loads(retries["detail"])["statuses"] == {"429": 2}
    rows = events.table("tokens")
    assert {r["source"] for r in rows} == {NAME}
    got = {r["model"]: {k: r[k] for k in USAGE_KEYS} for r in rows}
    assert got == endpoint.usage_by_model()
