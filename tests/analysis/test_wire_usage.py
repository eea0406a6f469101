"""``analysis.wire_usage``: the usage read from a response body equals what the endpoint that
sent it reported, for each vendor's protocol, streamed and not (real HTTP to the local
endpoints of ``tests.support.endpoints``)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from analysis.wire_usage import stream_error, wire_usage
from tests.support.endpoints import ENDPOINTS, USAGE_KEYS, session_script

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages",
        {"model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "openai": ("/v1/responses", {"model": "gpt-x", "input": "hi"}),
    "openai_chat": (
        "/v1/chat/completions",
        {"model": "gpt-chat-x", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "gemini": (
        "/v1beta/models/gemini-x:{method}",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}


def _call(endpoint, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    host, port = endpoint.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, response.getheader("content-type") or "", response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("vendor", sorted(CALLS))
def test_the_usage_on_the_wire_is_what_the_endpoint_reported(vendor, stream):
    path, body = CALLS[vendor]
    if vendor == "gemini":
        path = path.format(method="streamGenerateContent?alt=sse" if stream else "generateContent")
    else:
        body = {**body, "stream": stream}
        if vendor == "openai_chat" and stream:
            body["stream_options"] = {"include_usage": True}
    with ENDPOINTS[vendor](session_script(vendor)) as endpoint:
        status, content_type, raw = _call(endpoint, path, body)
    assert status == 200, raw
    (reply,) = endpoint.replies
    usage = wire_usage(raw, content_type)
    assert usage is not None, raw[:500]
    got = {k: getattr(usage, k) for k in USAGE_KEYS}
    assert got == {k: reply.usage.get(k, 0) for k in USAGE_KEYS}
    assert usage.model == reply.model and usage.requests == 1


def test_bodies_without_usage_give_none():
    assert (
        wire_usage(b'{"type":"error","error":{"type":"rate_limit_error"}}', "application/json")
        is None
    )
    assert wire_usage(b'{"data":[{"id":"m"}]}', "application/json") is None
    assert wire_usage(b"data: [DONE]\n\n", "text/event-stream") is None
    assert wire_usage(b"not json", "") is None


def test_the_last_anthropic_delta_wins_over_the_early_output_count():
    stream = "".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n"
        for e in [
            {"type": "message_start", "message": {"model": "m", "usage": {
                "input_tokens": 10, "cache_read_input_tokens": 7,
                "cache_creation_input_tokens": 3, "output_tokens": 1}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
            {"type": "message_delta", "usage": {"output_tokens": 42}},
            {"type": "message_stop"},
        ]
    ).encode()  # fmt: skip
    usage = wire_usage(stream, "text/event-stream")
    assert usage is not None
    assert (usage.input, usage.cache_read, usage.cache_write, usage.output) == (10, 7, 3, 42)


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error"}}\n\n',
         "overloaded_error"),
        (b'data: {"type":"error","code":"server_error","message":"boom"}\n\n', "server_error"),
        (b'data: {"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded"}}}'
         b"\n\n", "rate_limit_exceeded"),
        (b'[{"candidates":[]},{"error":{"code":503,"status":"UNAVAILABLE"}}]', "UNAVAILABLE"),
        (b'data: {"type":"message_start","message":{"usage":{}}}\n\n', None),
        (b'data: {"object":"chat.completion.chunk","choices":[]}\n\ndata: [DONE]\n\n', None),
    ],
)  # fmt: skip
def test_an_error_sent_inside_a_stream_is_found(body, want):
    assert stream_error(body, "text/event-stream" if body.startswith(b"data") else "") == want


def test_a_usage_in_a_responses_shaped_object_of_another_type_is_read():
    body = json.dumps(
        {"object": "response.compaction", "model": "gpt-x",
         "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 100},
                   "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 20}}}
    ).encode()  # fmt: skip
    usage = wire_usage(body, "application/json")
    assert usage is not None
    assert (usage.input, usage.cache_read, usage.output, usage.reasoning) == (800, 100, 50, 20)
