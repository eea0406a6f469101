"""mini-swe-agent's seat without containers: its install check, the headless command, the fresh
restart with the prompt and the keep-going message, retries read from its output, and the
Chat Completions endpoint it is tested against (plain, streamed, text-based)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from agents.clients import DEFAULT_CACHE, STAMP, ClientMissing, get_client
from agents.clis.mini_swe import FINISH_MARKER, MINI_SWE, MiniSweClient
from isolation.backends import AgentSpec
from isolation.workspace import Seat, prepare_arm, template_repo
from runner.config import register_configs
from runner.seats import client_meta, real_seat, seat_problem
from runner.supervisor import count_retries, has_records
from tasks.schema import PROJECT_ROOT
from tests.support.endpoints import ENDPOINTS, session_script

KEY = "sk-test-not-a-real-key"
ENV = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://10.9.0.1:9/v1"}


def _fake_install(root: Path, home: str | None = None) -> Path:
    """An 'installed' virtual environment: the stamp, an executable interpreter, pyvenv.cfg."""
    folder = MINI_SWE.install_dir(root)
    python = folder / MINI_SWE.relative_binary
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    base = home or str(Path(getattr(sys, "_base_executable", sys.executable)).parent)
    (folder / "venv" / "pyvenv.cfg").write_text(f"home = {base}\nversion = 3.11.7\n")
    (folder / STAMP).write_text(MINI_SWE.spec)
    return folder


@pytest.fixture
def fake_clients(tmp_path, monkeypatch):
    root = tmp_path / "clients"
    _fake_install(root)
    monkeypatch.setenv("SWARMLAB_CLIENTS_DIR", str(root))
    return root


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="runner", overrides=list(overrides))


def test_it_is_a_registered_client_installed_with_pip(tmp_path, monkeypatch):
    client = get_client("mini_swe")
    assert isinstance(client, MiniSweClient) and client.spec == "mini-swe-agent==2.4.6"
    monkeypatch.setenv("SWARMLAB_CLIENTS_DIR", str(tmp_path))
    with pytest.raises(ClientMissing, match=r"python -m agents\.clients install mini_swe.*pip"):
        client.mounts()
    # A virtual environment made with another interpreter would not run in the container.
    _fake_install(tmp_path, home="/opt/elsewhere/bin")
    with pytest.raises(ClientMissing, match=r"made with the Python in /opt/elsewhere/bin"):
        client.binary()


def test_command_is_headless_and_carries_no_secret(fake_clients):
    argv = MINI_SWE.command("do it", model="gpt-x", environ=ENV)
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3] == MINI_SWE.container_binary
    assert argv[3] == "/opt/swarmlab/clients/mini_swe/venv/bin/python"
    assert argv[4:9] == ["-y", "--exit-immediately", "-l", "0", "-m"]
    assert argv[9] == "openai/gpt-x" and argv[-2:] == ["-t", "do it"]
    config = argv[argv.index("-c", 4) + 1]  # the default config by path, not from the clone
    assert config.startswith(MINI_SWE.container_dir + "/venv/lib/python3.")
    assert config.endswith("/site-packages/minisweagent/config/mini.yaml")
    installed = MINI_SWE.install_dir(DEFAULT_CACHE)
    if (installed / STAMP).is_file():  # the real install, when there, has that file
        assert (installed / config[len(MINI_SWE.container_dir) + 1 :]).is_file()
    assert MINI_SWE.command("p", model="openai/x/y")[9] == "openai/x/y"
    assert MINI_SWE.command("p")[9] == "openai/gpt-5.5"
    assert KEY not in " ".join(argv) and "10.9.0.1" not in " ".join(argv)
    env = MINI_SWE.env(ENV)
    assert env["OPENAI_API_KEY"] == KEY and env["OPENAI_BASE_URL"] == "http://10.9.0.1:9/v1"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["MSWEA_CONFIGURED"] == "true"
    assert MINI_SWE.mounts() == {
        str(MINI_SWE.install_dir(fake_clients)): "/opt/swarmlab/clients/mini_swe"
    }


def test_each_start_writes_its_own_trajectory_into_the_records(tmp_path):
    """The launch line, run with echo in place of the interpreter: the trajectory path."""
    argv = MINI_SWE.command("the task", model="gpt-x")
    argv[3] = "/bin/echo"
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    paths = []
    for _ in range(2):
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
        words = out.split()
        assert words[:3] == ["-m", "minisweagent.run.mini", "-o"] and words[-1] == "task"
        paths.append(Path(words[3]))
    records = MINI_SWE.record_dir(tmp_path)
    assert all(p.parent == records and p.name.endswith(".traj.json") for p in paths)
    assert paths[0] != paths[1]


def test_a_seat_restarts_fresh_with_the_prompt_and_the_keep_going_message(fake_clients, tmp_path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, tmp_path / "template.git")
    uid = 1000 if os.geteuid() == 0 else None
    arm = prepare_arm(tmp_path / "run", "solo", source, start, [Seat("w1", "worker")], uid, uid)
    spec = AgentSpec(
        arm="solo", agent="w1", workspace=arm.agents["w1"], arm_workspace=arm, command=[],
        env={"SWARMLAB_AGENT": "w1"}, network="swarmlab-model",
    )  # fmt: skip
    cfg = _cfg("arm=solo", "agent=mini_swe", "agent.model=gpt-x")
    assert seat_problem(cfg, environ=ENV) is None
    seat = real_seat(cfg, spec, arm, time.time() + 60, ENV)
    task = seat.command[-1]
    assert "You are w1" in task and "experiment is not over" not in task
    again = seat.resume_command[-1]
    assert (
        again.startswith(task.rstrip()) and "You stopped, but the experiment is not over" in again
    )
    assert seat.resume_command[:-1] == seat.command[:-1]
    assert seat.resume_mechanism == MINI_SWE.resume_mechanism
    assert "fresh start" in seat.resume_mechanism and "no session resume" in seat.resume_mechanism
    assert seat.records.endswith("notes/.config/mini-swe-agent/trajectories")
    assert seat.records_format == "mini_swe" and seat.env["OPENAI_API_KEY"] == KEY
    meta = client_meta(cfg)
    assert meta["key_env"] == "OPENAI_API_KEY" and meta["record_format"] == "mini_swe"
    # The supervisor resumes once a trajectory (.json) is there.
    assert not has_records(seat)
    Path(seat.records).mkdir(parents=True)
    (Path(seat.records) / "20260101T000000.0Z.traj.json").write_text("{}")
    assert has_records(seat)


def test_its_announced_retries_are_counted():
    output = "\n".join(
        [
            "mini-swe-agent (step 1, $0.00):",
            "Retrying <unknown> in 4.0 seconds as it raised RateLimitError: litellm.RateLimitError:"
            " OpenAIException - rate limited.",
            "Retrying <unknown> in 8.0 seconds as it raised RateLimitError: again.",
            "Retrying <unknown> in 4.0 seconds as it raised APIConnectionError: refused.",
        ]
    )
    assert count_retries(output, "mini_swe") == {
        "count": 3,
        "statuses": {"RateLimitError": 2, "APIConnectionError": 1},
        "waited_s": 16.0,
    }
    assert count_retries("nothing here", "mini_swe")["count"] == 0


def _post(url: str, body: dict, key: str = "k") -> tuple[int, str]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"properties": {"command": {"type": "string"}}}},
}


def test_endpoint_speaks_chat_completions_as_mini_swe_agent_expects():
    with ENDPOINTS["openai_chat"](session_script("openai_chat"), api_key="k") as endpoint:
        url = endpoint.url + "/v1/chat/completions"
        user = {"role": "user", "content": "the task"}
        done = {"role": "assistant", "content": "x"}
        status, text = _post(url, {"model": "gpt-x", "messages": [user], "tools": [BASH]})
        assert status == 200
        first = json.loads(text)
        # The final step: its text, and the command that ends a mini-swe-agent session.
        _, text = _post(url, {"model": "gpt-x", "messages": [user, done, done], "tools": [BASH]})
        last = json.loads(text)["choices"][0]
        # No tools offered: the command in a mswea_bash_command block.
        _, text = _post(url, {"model": "gpt-x", "messages": [user, done]})
        plain = json.loads(text)["choices"][0]["message"]
        assert _post(url, {"model": "gpt-x", "messages": [user]}, key="bad")[0] == 401
        assert _post(endpoint.url + "/v1/completions", {})[0] == 404
    choice = first["choices"][0]
    assert first["object"] == "chat.completion" and choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"])["command"].startswith("printf 'SPEED = 2")
    assert first["usage"] == {
        "prompt_tokens": 1693,
        "completion_tokens": 131,
        "total_tokens": 1824,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 71,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    (finish,) = last["message"]["tool_calls"]
    assert json.loads(finish["function"]["arguments"]) == {"command": f"echo {FINISH_MARKER}"}
    assert last["message"]["content"].startswith("Committed the change")
    assert "```mswea_bash_command\nsubmit -m 'scripted session'\n```" in plain["content"]
    assert [(r.step, r.kind) for r in endpoint.replies] == [(0, "shell"), (2, "text"), (1, "shell")]
    assert endpoint.first_user == ["the task"] * 3 and endpoint.unknown_paths() == [
        "POST /v1/completions"
    ]
    assert endpoint.usage_by_model() == {
        "gpt-x": {
            "input": 1693 + 197 + 313,
            "cache_read": 0 + 1920 + 1536,
            "cache_write": 0,
            "output": 131 + 43 + 79,
            "reasoning": 71 + 17 + 29,
        }
    }


def test_endpoint_streams_chunks_with_usage_and_done():
    with ENDPOINTS["openai_chat"](session_script("openai_chat"), api_key="k") as endpoint:
        body = {
            "model": "gpt-x",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "the task"}]}],
            "tools": [BASH],
        }
        status, text = _post(endpoint.url + "/v1/chat/completions", body)
    assert status == 200
    data = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    args = "".join(
        t["function"].get("arguments", "") for d in deltas for t in d.get("tool_calls", [])
    )
    assert content == "I will make the change and commit it."
    assert json.loads(args)["command"].startswith("printf 'SPEED = 2")
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 1693
    assert endpoint.replies[0].stream and endpoint.first_user == ["the task"]
