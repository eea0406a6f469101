"""The Gemini CLI seat without an engine or the CLI: the Gemini API endpoint on its own (event
shape, usage fields, side calls, unknown paths, the key), the client's command, environment,
read-only settings and its Node.js check. The real CLI runs in
``test_real_clients_docker.py`` and ``test_real_seats_docker.py``."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from agents.clients import PROJECT_ROOT, STAMP, ClientMissing, get_client
from tests.support.endpoints import ENDPOINTS, session_script
from tests.support.endpoints.gemini import gemini_usage

SHELL_TOOL = {
    "functionDeclarations": [
        {
            "name": "run_shell_command",
            "parametersJsonSchema": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
                "required": ["command"],
            },
        },
        {"name": "read_file", "parametersJsonSchema": {"type": "object"}},
    ]
}


def _post(url: str, body: dict, key: str | None = "k") -> tuple[dict[str, str], str]:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["x-goog-api-key"] = key
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return dict(reply.headers), reply.read().decode()


def _events(text: str) -> list[dict]:
    assert "event:" not in text  # the Gemini API names no events
    return [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.strip()]


def test_endpoint_streams_gemini_events_with_usage_on_the_last():
    with ENDPOINTS["gemini"](session_script("gemini"), api_key="k") as endpoint:
        base = endpoint.url + "/v1beta/models/gemini-x"
        body = {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [SHELL_TOOL],
            "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
        }
        headers, text = _post(base + ":streamGenerateContent?alt=sse", body)
        with pytest.raises(urllib.error.HTTPError) as unauthorized:
            _post(base + ":streamGenerateContent?alt=sse", body, key="wrong")
        _, counted = _post(base + ":countTokens", {"contents": body["contents"]})
        with pytest.raises(urllib.error.HTTPError) as missing:
            _post(endpoint.url + "/v1beta/models/gemini-x:embedContent", {})
    assert headers["Content-Type"] == "text/event-stream"
    events = _events(text)
    parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
    assert parts[0]["thought"] is True
    (call,) = [p["functionCall"] for p in parts if "functionCall" in p]
    assert call["name"] == "run_shell_command"
    assert call["args"]["command"].startswith("printf 'SPEED = 2")
    assert "".join(p["text"] for p in parts[1:] if "text" in p) == (
        "I will make the change and commit it."
    )
    # Only the last event is complete: a reader that sums the events counts the prompt again.
    assert [e["candidates"][0].get("finishReason") for e in events][-1] == "STOP"
    assert all("candidatesTokenCount" not in e["usageMetadata"] for e in events[:-1])
    assert events[-1]["usageMetadata"] == gemini_usage(session_script("gemini")[0].usage)
    assert events[-1]["usageMetadata"]["promptTokenCount"] == 1533
    assert events[-1]["usageMetadata"]["candidatesTokenCount"] == 97 - 41
    assert events[-1]["usageMetadata"]["thoughtsTokenCount"] == 41
    assert len({e["responseId"] for e in events}) == 1
    assert unauthorized.value.code == 401
    assert json.loads(unauthorized.value.read())["error"]["status"] == "UNAUTHENTICATED"
    assert json.loads(counted)["totalTokens"] > 0
    assert missing.value.code == 404
    assert endpoint.unknown_paths() == ["POST /v1beta/models/gemini-x:embedContent"]
    assert endpoint.usage_by_model() == {
        "gemini-x": {
            "input": 1533,
            "cache_read": 0,
            "cache_write": 0,
            "output": 97,
            "reasoning": 41,
        }
    }


def test_endpoint_step_follows_the_function_calls_in_contents_and_answers_side_calls():
    with ENDPOINTS["gemini"](session_script("gemini"), api_key="") as endpoint:
        url = endpoint.url + "/v1beta/models/gemini-y:generateContent"
        history = [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command"}}]},
        ]
        _, second = _post(url, {"contents": history, "tools": [SHELL_TOOL]}, key=None)
        schema = {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "next_speaker": {"type": "string", "enum": ["user", "model"]},
            },
            "required": ["reasoning", "next_speaker"],
        }
        side = {"contents": history, "generationConfig": {"responseJsonSchema": schema}}
        _, answer = _post(url, side, key=None)
    (call,) = [
        p for p in json.loads(second)["candidates"][0]["content"]["parts"] if "functionCall" in p
    ]
    assert call["functionCall"]["args"]["command"] == "submit -m 'scripted session'"
    assert json.loads(second)["usageMetadata"]["cachedContentTokenCount"] == 1664
    text = json.loads(answer)["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(text) == {"reasoning": "scripted", "next_speaker": "user"}
    assert [(r.step, r.kind) for r in endpoint.replies] == [(1, "shell"), (-1, "side")]


def test_gemini_usage_refuses_what_the_api_cannot_say():
    with pytest.raises(ValueError, match="cache writes"):
        gemini_usage({"input": 1, "cache_write": 2})
    with pytest.raises(ValueError, match="reasoning"):
        gemini_usage({"output": 1, "reasoning": 2})


def test_command_resume_and_env_of_the_gemini_client():
    client = get_client("gemini")
    host_env = {"GEMINI_API_KEY": "AIza-secret", "GOOGLE_GEMINI_BASE_URL": "http://10.0.0.1:9/"}
    argv = client.command("- a prompt\nover lines", environ=host_env)
    assert argv[:2] == [
        "/usr/bin/node",
        "/opt/swarmlab/clients/gemini/node_modules/@google/gemini-cli/bundle/gemini.js",
    ]
    assert "--prompt=- a prompt\nover lines" in argv  # one argument, even with a leading dash
    assert argv[argv.index("--approval-mode") + 1] == "yolo" and "--skip-trust" in argv
    assert argv[argv.index("--model") + 1] == client.default_model
    assert "AIza-secret" not in " ".join(argv)
    resume = client.resume_command("keep going", "gemini-3.1-pro-preview", host_env)
    assert resume[-2:] == ["--resume", "latest"] and "--prompt=keep going" in resume
    assert resume[resume.index("--model") + 1] == "gemini-3.1-pro-preview"
    env = client.env(host_env)
    assert env["GEMINI_API_KEY"] == "AIza-secret"
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://10.0.0.1:9"
    assert env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"] == client.settings_mount + "/settings.json"
    assert client.env({"GEMINI_API_KEY": "k"})["GOOGLE_GEMINI_BASE_URL"] == (
        "https://generativelanguage.googleapis.com"
    )
    assert client.record_dir(Path("/n")) == Path("/n/.gemini/tmp")
    assert client.resume_mechanism == "gemini -p --resume latest"


def test_the_settings_keep_the_cli_off_every_network_but_the_model():
    client = get_client("gemini")
    settings = json.loads((PROJECT_ROOT / client.settings_dir / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert settings["telemetry"]["enabled"] is False
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["general"]["enableAutoUpdateNotification"] is False
    assert settings["ide"]["enabled"] is False


def _fake_install(root: Path, client) -> None:
    binary = client.install_dir(root) / client.relative_binary
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/usr/bin/env node\n")
    binary.chmod(0o755)
    (client.install_dir(root) / STAMP).write_text(client.spec)


def test_mounts_add_the_settings_and_a_missing_node_is_one_line(tmp_path):
    client = get_client("gemini")
    _fake_install(tmp_path, client)
    if os.access("/usr/bin/node", os.X_OK):
        mounts = client.mounts(tmp_path)
        assert mounts[str(PROJECT_ROOT / "agents/client_config/gemini")] == (
            "/opt/swarmlab/clients/gemini-settings"
        )
        assert mounts[str(client.install_dir(tmp_path))] == "/opt/swarmlab/clients/gemini"
    no_node = replace(client, interpreter=str(tmp_path / "node"))
    with pytest.raises(ClientMissing, match=r"Node\.js >= 20 at .*found none") as info:
        no_node.binary(tmp_path)
    assert "\n" not in str(info.value)


# -- agent=gemini in the runner (no engine) -------------------------------------------------


def _cfg(*overrides: str):
    from hydra import compose, initialize_config_dir

    from runner.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="runner", overrides=list(overrides))


def test_a_gemini_seat_gets_its_prompt_key_settings_and_resume(tmp_path, monkeypatch):
    import time

    from isolation.backends import AgentSpec
    from isolation.workspace import Seat, prepare_arm, template_repo
    from runner.seats import client_meta, real_seat, seat_problem

    client = get_client("gemini")
    if not os.access(client.interpreter, os.X_OK):
        pytest.skip(f"the Gemini CLI's seat needs Node.js at {client.interpreter}")
    _fake_install(tmp_path / "clients", client)
    monkeypatch.setenv("SWARMLAB_CLIENTS_DIR", str(tmp_path / "clients"))
    cfg = _cfg("arm=solo", "agent=gemini", "agent.model=gemini-x")
    assert cfg.agent.client == "gemini" and cfg.agent.kind == "gemini"
    missing = seat_problem(cfg, environ={})
    assert missing.startswith("agent=gemini needs GEMINI_API_KEY") and "\n" not in missing
    key = "AIza-not-a-real-key"
    environ = {"GEMINI_API_KEY": key, "GOOGLE_GEMINI_BASE_URL": "http://10.9.0.1:9"}
    assert seat_problem(cfg, environ=environ) is None
    meta = client_meta(cfg)
    assert meta["key_env"] == "GEMINI_API_KEY" and key not in json.dumps(meta)
    assert meta["resume"] == "gemini -p --resume latest" and meta["record_format"] == "gemini"

    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, tmp_path / "template.git")
    uid = 1000 if os.geteuid() == 0 else None
    solo = prepare_arm(tmp_path / "run", "solo", source, start, [Seat("w1", "worker")], uid, uid)
    spec = AgentSpec(
        arm="solo",
        agent="w1",
        workspace=solo.agents["w1"],
        arm_workspace=solo,
        command=[],
        env={"SWARMLAB_AGENT": "w1"},
        extra_mounts={"/tools": "/opt/swarmlab/bin"},
        network="swarmlab-model",
    )
    seat = real_seat(cfg, spec, solo, time.time() + 600, environ)
    (prompt,) = [a for a in seat.command if a.startswith("--prompt=")]
    assert "You are w1" in prompt and "working alone" in prompt
    assert seat.command[seat.command.index("--model") + 1] == "gemini-x"
    assert seat.env["GEMINI_API_KEY"] == key and seat.env["SWARMLAB_AGENT"] == "w1"
    assert key not in " ".join(seat.command + seat.resume_command)
    assert {"/opt/swarmlab/bin", "/opt/swarmlab/clients/gemini"} <= set(seat.extra_mounts.values())
    assert "/opt/swarmlab/clients/gemini-settings" in seat.extra_mounts.values()
    assert seat.resume_command[-2:] == ["--resume", "latest"]
    assert "the experiment is not over" in seat.resume_command[2]
    assert seat.resume_mechanism == "gemini -p --resume latest"
    assert seat.records == str(solo.agents["w1"].notes / ".gemini" / "tmp")
    assert seat.records_format == "gemini"
