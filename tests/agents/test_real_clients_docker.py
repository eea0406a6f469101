"""The vendors' real CLIs in the agent container, against local endpoints that speak their
real wire protocols (``tests/support/endpoints``) and play a short session: edit a file and commit,
``submit``, answer.

Each test starts one agent the way the runner does (``prepare_arm``, the docker backend, the
contract's mounts, a real gateway serving the outbox into a real judge queue), on an internal
Docker network whose only reachable address is the endpoint on the host's side of it. It checks
that the commit exists in the agent's clone, that the submission reached the judge's queue,
that the tokens ``analysis.tokens`` reads from the CLI's own session record equal what the
endpoint reported, and that the key was never written into the run's files.

The CLIs come from ``python -m agents.clients install`` (part of the setup CI runs); without
them these tests skip on a developer's machine and fail under ``CI``, like every docker test.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from agents.clients import ClientMissing, get_client, model_network
from analysis.tokens import read_usage
from isolation.backends import RUN_LABEL, AgentSpec, get_backend, wait_until_stopped
from isolation.gitutil import git
from isolation.workspace import Seat, prepare_arm, template_repo
from judge.queue import JudgeQueue
from runner.events import EventLog
from runner.gateway import Gateway
from tests.support.ci import require_client
from tests.support.endpoints import ENDPOINTS, USAGE_KEYS, session_script

AGENT_UID = 1000
VENDORS = {
    "claude_code": "anthropic",
    "codex": "openai",
    "gemini": "gemini",
    "mini_swe": "openai_chat",
}
# What each vendor's base URL ends with.
BASE_PATHS = {"anthropic": "", "openai": "/v1", "gemini": "", "openai_chat": "/v1"}
PROMPT = "Make SPEED 2 in engine/model.py, commit it, and submit the commit with `submit`."


@pytest.fixture(scope="module")
def network(docker_client):
    """An internal network of this test module's own: its gateway is the host's address."""
    name, gateway = model_network(docker_client, f"swarmlab-test-model-{os.getpid()}")
    yield name, gateway
    docker_client.networks.get(name).remove()


def _arm(tmp_path: Path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, tmp_path / "template.git")
    uid = AGENT_UID if os.geteuid() == 0 else None
    run_dir = tmp_path / "run"
    arm = prepare_arm(run_dir, "solo", source, start, [Seat("w1", "worker")], uid, uid)
    return run_dir, arm, start


def _files_holding(root: Path, secret: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


@pytest.mark.docker
@pytest.mark.parametrize("name", ["claude_code", "codex", "gemini", "mini_swe"])
def test_real_cli_plays_a_session_and_its_tokens_match(
    name, tmp_path, base_image, network, docker_client
):
    client = require_client(name)
    vendor = VENDORS[name]
    run_dir, arm, start = _arm(tmp_path)
    ws = arm.agents["w1"]
    events = EventLog(run_dir / "events.sqlite")
    queue = JudgeQueue(tmp_path / "judge-private" / "queue.sqlite")
    gateway = Gateway(events, queue, [arm])
    key = f"sk-swarmlab-test-{secrets.token_hex(16)}"
    net, host = network
    endpoint = ENDPOINTS[vendor](session_script(vendor), host=host, port=0, api_key=key)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            gateway.poll()
            stop.wait(0.05)

    served = threading.Thread(target=serve, daemon=True)
    backend = get_backend("docker")
    run = f"test-{name}-{os.getpid()}-{time.time_ns()}"
    with endpoint:
        host_env = {client.key_env: key, client.base_url_env: endpoint.url + BASE_PATHS[vendor]}
        seat = client.spec_fields(PROMPT, environ=host_env)  # image, command, env, mounts
        seat["env"]["SWARMLAB_AGENT"] = "w1"
        spec = AgentSpec(
            arm=arm.name,
            agent="w1",
            workspace=ws,
            arm_workspace=arm,
            cpuset="0",
            pids_limit=256,
            network=net,
            labels={RUN_LABEL: run},
            hidden_paths=[str(queue.path.parent)],
            **seat,
        )
        served.start()
        try:
            started = time.monotonic()
            handle = backend.start(spec)
            code = wait_until_stopped(handle, 120)
            seconds = time.monotonic() - started
            logs = handle.logs_tail(60)
        finally:
            backend.cleanup(run)
            stop.set()
            served.join(timeout=10)
        gateway.poll()
    record = endpoint.record()
    context = f"{name} exit {code} after {seconds:.1f}s\n{logs}\nendpoint: {record['requests']}"
    assert code == 0, context

    # The endpoint: only the vendor's real paths, with the key, each step of the script once.
    assert endpoint.unknown_paths() == [], context
    assert all(r.authorized for r in endpoint.requests), context
    assert [(r.step, r.kind) for r in endpoint.replies] == [
        (0, "shell"),
        (1, "shell"),
        (2, "text"),
    ], context

    # The commit, in the agent's clone.
    def agent_git(*args: str) -> str:  # the clone belongs to the agent's uid
        return git("-c", "safe.directory=*", *args, cwd=ws.repo).strip()

    head = agent_git("rev-parse", "HEAD")
    assert head != start
    assert agent_git("log", "-1", "--format=%s") == "scripted: speed 2"
    assert agent_git("show", "HEAD:engine/model.py") == "SPEED = 2"

    # The submission: answered in the agent's inbox, recorded, copied, queued with the judge.
    replies = sorted(ws.replies.glob("*.json"))
    assert len(replies) == 1, context
    assert f'"commit": "{head}"' in replies[0].read_text()
    rows = events.table("submissions")
    assert [(r["agent"], r["commit_sha"]) for r in rows] == [("w1", head)]
    assert git("cat-file", "-t", head, cwd=arm.submissions).strip() == "commit"
    job = queue.claim("test")
    assert job is not None and (job.arm, job.agent, job.commit) == ("solo", "w1", head)

    # The tokens read from the CLI's own session record equal what the endpoint reported.
    records = client.record_dir(ws.notes)
    assert records.is_dir(), f"no session records under {records}: {context}"
    read = read_usage(records, client.record_format)
    got = {model: {k: getattr(u, k) for k in USAGE_KEYS} for model, u in read.items()}
    assert got == endpoint.usage_by_model(), (got, [asdict(r) for r in endpoint.replies])
    assert sum(u.requests for u in read.values()) == 3

    # The agent's only network was internal (no route out), and the key travelled in the
    # container's environment only.
    assert docker_client.networks.get(net).attrs["Internal"] is True
    assert _files_holding(run_dir, key.encode()) == []


def test_a_missing_cli_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMLAB_CLIENTS_DIR", str(tmp_path))
    for name in VENDORS:
        client = get_client(name)
        with pytest.raises(ClientMissing, match=rf"python -m agents\.clients install {name}"):
            client.mounts()


def test_a_missing_key_is_one_line_before_any_container():
    from agents.clients import KeyMissing

    client = get_client("claude_code")
    with pytest.raises(KeyMissing, match=r"^agent=claude_code needs ANTHROPIC_API_KEY") as info:
        client.env({})
    assert "\n" not in str(info.value)


def test_command_carries_no_secret_and_env_carries_the_key_by_name():
    host_env = {"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://10.0.0.1:9/v1/"}
    codex = get_client("codex")
    argv = codex.command("do it", environ=host_env)
    assert "sk-x" not in " ".join(argv)
    assert 'base_url="http://10.0.0.1:9/v1"' in " ".join(argv)
    assert 'env_key="OPENAI_API_KEY"' in " ".join(argv)
    assert codex.env(host_env)["OPENAI_API_KEY"] == "sk-x"
    claude = get_client("claude_code")
    env = claude.env({"ANTHROPIC_API_KEY": "k"})
    assert env["ANTHROPIC_BASE_URL"] == "https://api.anthropic.com"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "k" not in claude.command("p")


def test_endpoint_speaks_anthropic_streaming_with_usage():
    """The Messages API endpoint on its own (no CLI): the event order and usage fields."""
    import json
    import urllib.request

    with ENDPOINTS["anthropic"](session_script("anthropic"), api_key="k") as endpoint:
        body = {
            "model": "claude-x",
            "stream": True,
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        }
        request = urllib.request.Request(
            endpoint.url + "/v1/messages?beta=true",
            data=json.dumps(body).encode(),
            headers={"x-api-key": "k", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.headers["request-id"].startswith("req_")
            text = reply.read().decode()
        bad = urllib.request.Request(endpoint.url + "/v1/nope", data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(bad, timeout=10)
    names = [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "input_json_delta" in text and '"stop_reason": "tool_use"' in text
    assert missing.value.code == 404 and endpoint.unknown_paths() == ["POST /v1/nope"]
    assert endpoint.usage_by_model() == {
        "claude-x": {
            "input": 1207,
            "cache_read": 0,
            "cache_write": 2311,
            "output": 83,
            "reasoning": 0,
        }
    }


def test_endpoint_speaks_openai_responses_with_usage():
    import json
    import urllib.request

    with ENDPOINTS["openai"](session_script("openai"), api_key="k") as endpoint:
        body = {
            "model": "gpt-x",
            "stream": False,
            "input": [{"type": "function_call", "name": "shell_command", "call_id": "c"}],
            "tools": [
                {
                    "type": "function",
                    "name": "shell_command",
                    "parameters": {"properties": {"command": {"type": "string"}}},
                }
            ],
        }
        request = urllib.request.Request(
            endpoint.url + "/v1/responses",
            data=json.dumps(body).encode(),
            headers={"authorization": "Bearer k", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            response = json.loads(reply.read())
    (call,) = [i for i in response["output"] if i["type"] == "function_call"]
    assert json.loads(call["arguments"]) == {"command": "submit -m 'scripted session'"}
    assert response["usage"] == {
        "input_tokens": 293 + 1792,
        "input_tokens_details": {"cached_tokens": 1792},
        "output_tokens": 89,
        "output_tokens_details": {"reasoning_tokens": 37},
        "total_tokens": 293 + 1792 + 89,
    }
    assert endpoint.usage_by_model() == {
        "gpt-x": {"input": 293, "cache_read": 1792, "cache_write": 0, "output": 89, "reasoning": 37}
    }
