"""The server kind's ``endpoint: chat`` without Docker: the chat request body, the chat chunk
parser (ids from ``logprobs.content`` as ``"token_id:N"``, from ``token_ids``, the text), a
broken chat stream's failure kinds (the completions ones), ``token_ids: text`` comparison,
the settings refused, and serve_cpu's frozen server answering chat with its completions'
tokens (a real subprocess over real sockets)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest
from omegaconf import OmegaConf

from judge.kinds.server.config import ServerConfig
from judge.kinds.server.evaluator import (
    check_correctness_settings,
    first_difference,
    padded,
    ref_rows,
)
from judge.kinds.server.load import chat_text, chunk_text, chunk_tokens, handle, request_body
from judge.sandbox import InfrastructureFault
from tasks.schema import PROJECT_ROOT

TEMPLATE = PROJECT_ROOT / "tasks" / "serve_cpu" / "template"
TASK = TEMPLATE.parent


def test_the_chat_body_is_one_user_message_of_the_prompt_ids():
    body = request_body("m", [5, 0, 4095], 8, False, "chat")
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "5 0 4095"}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    with_logprobs = request_body("m", [1], 2, True, "chat", "logprobs")
    assert (with_logprobs["logprobs"], with_logprobs["top_logprobs"]) == (True, 2)
    assert with_logprobs["return_tokens_as_token_ids"] is True
    # A server without ids (token_ids: text) is asked for none, and never for logprobs.
    text = request_body("m", [1, 2], 2, True, "chat", "text")
    assert not {"return_token_ids", "logprobs", "top_logprobs"} & set(text)
    # Completions' body is unchanged: the prompt as ids, logprobs as a count.
    assert request_body("m", [1, 2], 3, True) == {
        "model": "m",
        "prompt": [1, 2],
        "max_tokens": 3,
        "temperature": 0,
        "stream": True,
        "return_token_ids": True,
        "logprobs": 2,
        "return_tokens_as_token_ids": True,
    }
    assert chat_text("already text") == "already text"


def _chat_chunk(**choice) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, **choice}]}


def test_chat_chunks_give_ids_margins_and_text():
    content = [
        {"token": "token_id:7", "logprob": -0.5, "top_logprobs": [
            {"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:2", "logprob": -0.75}]},
        {"token": "token_id:9", "logprob": -0.1, "top_logprobs": [
            {"token": "token_id:9", "logprob": -0.1}]},
    ]  # fmt: skip
    chunk = _chat_chunk(
        delta={"content": "7 9"}, logprobs={"content": content}, finish_reason="length"
    )
    assert chunk_tokens(chunk, "logprobs", "chat") == ([7, 9], [0.25, float("inf")], True)
    # From token_ids, margins still come from logprobs.content where it is there.
    with_ids = _chat_chunk(
        delta={"content": "7 9"}, token_ids=[7, 9], logprobs={"content": content}
    )
    assert chunk_tokens(with_ids, "token_ids", "chat") == ([7, 9], [0.25, float("inf")], False)
    assert chunk_tokens(
        _chat_chunk(delta={"content": "3"}, token_ids=[3]), "token_ids", "chat"
    ) == (
        [3],
        [None],
        False,
    )
    assert chunk_text(chunk, "chat") == "7 9"
    assert chunk_text(_chat_chunk(delta={"role": "assistant"}), "chat") == ""
    # The role-only first chunk (no logprobs either) and the final usage chunk carry nothing.
    role = _chat_chunk(delta={"role": "assistant", "content": ""}, logprobs=None)
    assert chunk_tokens(role, "token_ids", "chat") == ([], [], False)
    assert chunk_tokens(role, "logprobs", "chat") == ([], [], False)
    usage = {"choices": [], "usage": {"completion_tokens": 999}}
    assert chunk_tokens(usage, "logprobs", "chat") == ([], [], False)


@pytest.mark.parametrize(
    ("chunk", "source"),
    [
        (_chat_chunk(delta={"content": "1"}), "logprobs"),  # no logprobs.content
        (_chat_chunk(logprobs={"content": [{"token": "7"}]}), "logprobs"),  # not token_id:N
        (_chat_chunk(logprobs={"content": ["token_id:7"]}), "logprobs"),
        (_chat_chunk(logprobs={"content": [{"token": "token_id:7", "top_logprobs": [
            {"token": "x", "logprob": "high"}]}]}), "logprobs"),
        (_chat_chunk(token_ids=["3"]), "token_ids"),
        ({"choices": [{"delta": {}}, {"delta": {}}]}, "token_ids"),
        ({"object": "chat.completion.chunk"}, "token_ids"),
    ],
)  # fmt: skip
def test_malformed_chat_chunks_are_refused(chunk, source):
    with pytest.raises(ValueError):
        chunk_tokens(chunk, source, "chat")


@pytest.mark.parametrize("chunk", [_chat_chunk(delta="text"), _chat_chunk(delta={"content": 7})])
def test_malformed_chat_text_is_refused(chunk):
    with pytest.raises(ValueError):
        chunk_text(chunk, "chat")


class _Chat(BaseHTTPRequestHandler):
    """A chat server that answers with one fixed stream per ``mode``."""

    protocol_version = "HTTP/1.1"
    mode = ""
    seen: ClassVar[list[dict]] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        type(self).seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        lines = [_chat_chunk(delta={"role": "assistant"})]
        for i, word in enumerate(("11", " 12", " 13")):
            entry = {"token": f"token_id:{word.strip()}", "logprob": -0.1, "top_logprobs": []}
            lines.append(
                _chat_chunk(
                    delta={"content": word},
                    token_ids=[int(word)],
                    logprobs={"content": [entry]},
                    finish_reason="length" if i == 2 else None,
                )
            )
        lines.append({"choices": [], "usage": {"completion_tokens": 999}})
        out = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in lines]
        if type(self).mode == "garbage":
            out[2] = b'data: {"choices": [{"token_ids": ["5"], "logprobs": {"content": 1}}]}\n\n'
        if type(self).mode != "truncated":
            out.append(b"data: [DONE]\n\n")
        self.wfile.write(b"".join(out))


@pytest.fixture
def chat_server(request) -> Iterator[tuple[int, type]]:
    handler = type("H", (_Chat,), {"mode": request.param, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def _chat_run(port: int, source: str, **extra) -> dict:
    return handle(
        {
            "op": "run",
            "host": "127.0.0.1",
            "port": port,
            "path": "/v1/chat/completions",
            "endpoint": "chat",
            "model": "m",
            "requests": [{"prompt": [1, 2, 3], "max_tokens": 3}],
            "concurrency": 1,
            "token_source": source,
            "timeout_s": 5,
            **extra,
        }
    )


@pytest.mark.parametrize("chat_server", ["good"], indirect=True)
@pytest.mark.parametrize(
    ("source", "ids", "tokens"),
    [
        ("token_ids", [11, 12, 13], 3),
        ("logprobs", [11, 12, 13], 3),
        ("text", [ord(c) for c in "11 12 13"], 3),  # chunks with text, never usage's 999
    ],
)
def test_a_chat_stream_is_read_by_every_token_source(chat_server, source, ids, tokens):
    port, handler = chat_server
    result = _chat_run(port, source)["results"][0]
    assert result["ok"], result
    assert (result["ids"], result["tokens"]) == (ids, tokens)
    assert handler.seen[0]["messages"] == [{"role": "user", "content": "1 2 3"}]


@pytest.mark.parametrize("chat_server", ["garbage", "truncated"], indirect=True)
def test_a_broken_chat_stream_is_a_protocol_failure(chat_server):
    port, _ = chat_server
    for source in ("token_ids", "logprobs"):
        result = _chat_run(port, source)["results"][0]
        assert (result["ok"], result["kind"]) == (False, "protocol"), result


def test_a_text_reference_is_padded_and_compared_exactly():
    texts = [[ord(c) for c in "1 2 3"], [ord(c) for c in "40 5"]]
    ref = padded(texts)
    assert ref.shape == (2, 5) and ref_rows(ref) == texts
    assert first_difference(texts, ref) is None
    other = [texts[0], [ord(c) for c in "40 6"]]
    assert first_difference(other, ref) == (1, 1, 3)
    assert first_difference([texts[0], texts[1] + [32]], ref) == (1, 1, 4)  # longer: differs
    ids = np.array([[1, 2], [3, 4]])
    assert ref_rows(ids) == [[1, 2], [3, 4]]  # ids are never padding


def test_chat_settings_are_checked():
    default = OmegaConf.structured(ServerConfig)
    assert default.chat_prompt == "ids"
    for good in ({"endpoint": "chat"}, {"endpoint": "chat", "token_ids": "text"}):
        check_correctness_settings(OmegaConf.merge(default, good))
    for bad in (
        {"endpoint": "chat", "correctness": "drift"},
        {"token_ids": "text", "correctness": "drift"},
        {"endpoint": "chat", "chat_prompt": "words"},
        {"endpoint": "embeddings"},
        {"token_ids": "usage"},
    ):
        with pytest.raises(InfrastructureFault):
            check_correctness_settings(OmegaConf.merge(default, bad))


@pytest.mark.parametrize(
    ("override", "said"),
    [
        (["task.server.endpoint=chat", "task.server.correctness=drift"], "drift needs endpoint"),
        (["task.server.endpoint=chat", "task.server.chat_prompt=words"], "chat_prompt is"),
    ],
)
def test_a_refused_chat_setting_is_one_line_at_setup(tmp_path, override, said):
    result = subprocess.run(
        [sys.executable, "-m", "judge", "setup", "task=serve_cpu",
         f"judge.private_dir={tmp_path / 'judge'}", *override],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert said in last and "fix task.yaml" in last, result.stderr


# -- serve_cpu's frozen server over chat (a real subprocess) ----------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def serve_cpu() -> Iterator[int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", "harness/server.py", "--port", str(port)],
        cwd=TEMPLATE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ready = {"op": "ready", "host": "127.0.0.1", "port": port, "path": "/v1/models"}
        assert handle({**ready, "timeout_s": 60})["ok"]
        yield port
    finally:
        proc.kill()
        proc.wait()


def _serve_cpu_run(port: int, endpoint: str, source: str, logprobs: bool = False) -> list[dict]:
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    prompts = [[1, 2, 3, 4], [4095, 0, 17], [99] * 9]
    reply = handle(
        {
            "op": "run",
            "host": "127.0.0.1",
            "port": port,
            "path": path,
            "endpoint": endpoint,
            "model": "serve-cpu-int",
            "requests": [{"prompt": p, "max_tokens": 6} for p in prompts],
            "concurrency": 3,
            "logprobs": logprobs,
            "token_source": source,
            "timeout_s": 60,
        }
    )
    assert all(r["ok"] for r in reply["results"]), reply
    return reply["results"]


def test_serve_cpu_answers_chat_with_its_completions_tokens(serve_cpu):
    want = [r["ids"] for r in _serve_cpu_run(serve_cpu, "completions", "token_ids", True)]
    margins = [r["margins"] for r in _serve_cpu_run(serve_cpu, "completions", "token_ids", True)]
    assert all(len(row) == 6 for row in want)
    for source in ("token_ids", "logprobs"):
        got = _serve_cpu_run(serve_cpu, "chat", source, logprobs=True)
        assert [r["ids"] for r in got] == want
        assert [r["margins"] for r in got] == margins  # the same top-2 margins, chat's shape
    text = _serve_cpu_run(serve_cpu, "chat", "text")
    assert ["".join(map(chr, r["ids"])) for r in text] == [" ".join(map(str, row)) for row in want]
    assert [r["tokens"] for r in text] == [6, 6, 6]


def test_serve_cpu_chat_refuses_what_is_not_ids_and_answers_whole(serve_cpu):
    import http.client

    def post(body: dict) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", serve_cpu, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body))
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    for content in ("hello", "1 4096", "", "-3"):
        status, body = post({"messages": [{"role": "user", "content": content}], "max_tokens": 2})
        assert status == 400 and "error" in body, content
    status, body = post(
        {"messages": [{"role": "user", "content": "1 2 3 4"}], "max_tokens": 6,
         "return_token_ids": True}
    )  # fmt: skip
    want = _serve_cpu_run(serve_cpu, "completions", "token_ids")[0]["ids"]
    assert status == 200 and body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["token_ids"] == want
    assert choice["message"]["content"] == " ".join(map(str, want))


TEXT_GENERATOR = """\
def make_prompts(seed, batch, prompt_len, vocab):
    return [f"prompt {seed % 97} number {i}" for i in range(batch)]
"""


@pytest.mark.parametrize("kind", ["server", "decode"])
def test_a_generator_may_yield_text_prompts_for_a_server_task_only(tmp_path, kind):
    from judge.private import TaskInputError, draw_set

    (tmp_path / "gen.py").write_text(TEXT_GENERATOR)
    task = OmegaConf.create(
        {"root": str(tmp_path), "inputs": "gen.py:make_prompts", "vocab": 16, "kind": kind}
    )
    if kind == "decode":
        with pytest.raises(TaskInputError, match="prompt 0 as text"):
            draw_set(task, 3, "x", 2, [1, 4], 5)
        return
    drawn = draw_set(task, 3, "x", 2, [1, 4], 5)
    assert all(isinstance(p, str) for p in drawn.prompts) and len(drawn.prompts) == 2
    # Sent as they are: the completions prompt is the text, the chat message's content too.
    assert request_body("m", drawn.prompts[0], 5, False)["prompt"] == drawn.prompts[0]
    chat = request_body("m", drawn.prompts[0], 5, False, "chat")
    assert chat["messages"][0]["content"] == drawn.prompts[0]
