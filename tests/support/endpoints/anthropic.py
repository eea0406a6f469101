"""The Anthropic Messages API, as Claude Code uses it, playing a script.

``POST /v1/messages`` (Claude Code adds ``?beta=true``): streamed as the real API streams it —
``message_start`` (usage: uncached input, cache write and read, one output token so far), per
content block ``content_block_start`` / ``content_block_delta`` (``text_delta``, or
``input_json_delta`` for a ``tool_use``) / ``content_block_stop``, a ``ping``, then
``message_delta`` (stop reason and the final usage) and ``message_stop`` — or as one JSON
message when ``stream`` is false. Every reply carries a ``request-id`` header, which Claude Code
writes into its transcript as ``requestId``.

Also answered: ``POST /v1/messages/count_tokens`` (an estimate, no usage recorded) and
``GET /v1/models``. A tool call uses the ``Bash`` tool the request offers (its
``command`` input). A request offering no tools is a side call (a title, a quota probe): it
gets a short text reply whose usage is recorded like any other.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from tests.support.endpoints.base import (
    Reply,
    RequestLog,
    Response,
    ScriptedEndpoint,
    Step,
    content_text,
    new_id,
    pieces,
)

SHELL_TOOLS = ("Bash", "bash")


def _error(status: int, kind: str, message: str) -> Response:
    return Response(status, {"type": "error", "error": {"type": kind, "message": message}})


def anthropic_usage(usage: dict[str, int]) -> dict[str, Any]:
    """Usage in the Messages API's fields (input excludes cache reads and writes)."""
    if usage.get("reasoning"):
        raise ValueError("the Messages API reports no separate reasoning count")
    write = usage.get("cache_write", 0)
    return {
        "input_tokens": usage.get("input", 0),
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": usage.get("cache_read", 0),
        "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
        "output_tokens": usage.get("output", 0),
        "service_tier": "standard",
    }


class AnthropicEndpoint(ScriptedEndpoint):
    vendor = "anthropic"

    def authorized(self, headers: dict[str, str]) -> bool:
        if not self.api_key:
            return True
        bearer = headers.get("authorization", "")
        return headers.get("x-api-key") == self.api_key or bearer == f"Bearer {self.api_key}"

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Response:
        route = urlsplit(path).path.rstrip("/")
        authorized = self.authorized(headers)
        entry = RequestLog(method, path, 200, authorized=authorized)
        if isinstance(body, dict):
            entry.model = body.get("model")
        known = {
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
        }
        if (method, route) not in known and not (
            method == "GET" and route.startswith("/v1/models/")
        ):
            entry.known, entry.status = False, 404
            self.log(entry)
            return _error(404, "not_found_error", f"{method} {route}: not served here")
        if not authorized:
            entry.status = 401
            self.log(entry)
            return _error(401, "authentication_error", "invalid x-api-key")
        if method == "GET":
            self.log(entry)
            return self._models(route)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            entry.status = 400
            self.log(entry)
            return _error(400, "invalid_request_error", "messages: a list is required")
        if route.endswith("/count_tokens"):
            self.log(entry)
            return Response(200, {"input_tokens": 1000 + len(json.dumps(body)) // 4})
        return self._messages(body, entry)

    def _models(self, route: str) -> Response:
        models = [
            {
                "type": "model",
                "id": model,
                "display_name": model,
                "created_at": "2025-01-01T00:00:00Z",
            }
            for model in sorted({r.model for r in self.replies} or {"claude-sonnet-4-5"})
        ]
        if route.startswith("/v1/models/"):
            wanted = route.rsplit("/", 1)[1]
            return Response(200, {**models[0], "id": wanted, "display_name": wanted})
        return Response(
            200,
            {
                "data": models,
                "has_more": False,
                "first_id": models[0]["id"],
                "last_id": models[-1]["id"],
            },
        )

    def failure_body(self, status: int) -> Any:
        kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
        return _error(status, kind, f"injected failure ({status})").body

    def _messages(self, body: dict[str, Any], entry: RequestLog) -> Response:
        if (failure := self.fail(entry)) is not None:
            return failure
        model = str(body.get("model") or "claude-sonnet-4-5")
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        messages = [m for m in body["messages"] if isinstance(m, dict)]
        turn, history = self.turns(
            [
                None if m.get("role") == "assistant" else content_text(m.get("content"))
                for m in messages
            ]
        )
        if tools:
            index, step = self.step_for(turn)
            kind = step.kind
        else:  # a side call: answered in words, counted like any other call
            index, step, kind = -1, Step("text", "OK", self.script[-1].usage), "side"
        entry.step = index
        blocks: list[dict[str, Any]] = []
        if step.kind == "shell":
            tool = next((t["name"] for t in tools if t.get("name") in SHELL_TOOLS), None)
            if tool is None:
                names = [t.get("name") for t in tools]
                entry.status, entry.detail = 400, f"no Bash tool among {names}"
                self.log(entry)
                return _error(400, "invalid_request_error", entry.detail)
            entry.detail = f"called {tool} ({len(tools)} tools offered)"
            if step.note:
                blocks.append({"type": "text", "text": step.note})
            blocks.append(
                {
                    "type": "tool_use",
                    "id": new_id("toolu_01", 11),
                    "name": tool,
                    "input": {"command": step.text, "description": "scripted step"},
                }
            )
            stop = "tool_use"
        else:
            blocks.append({"type": "text", "text": step.text})
            stop = "end_turn"
        usage = anthropic_usage(step.usage)
        message_id, request_id = new_id("msg_01", 11), new_id("req_011C", 11)
        stream = bool(body.get("stream"))
        self.add_reply(
            Reply(
                entry.path,
                model,
                index,
                kind,
                stream,
                dict(step.usage),
                message_id,
                request_id,
                history,
            )
        )
        self.log(entry)
        headers = {"request-id": request_id}
        if not stream:
            message = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
            return Response(200, message, headers=headers)
        return Response(
            200, events=self._events(message_id, model, blocks, stop, usage), headers=headers
        )

    @staticmethod
    def _events(
        message_id: str, model: str, blocks: list[dict[str, Any]], stop: str, usage: dict
    ) -> list[tuple[str | None, Any]]:
        start_usage = {**usage, "output_tokens": 1}
        events: list[tuple[str | None, Any]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
            else:
                start = {**block, "input": {}}
                data = json.dumps(block["input"])
                half = len(data) // 2
                deltas = [
                    {"type": "input_json_delta", "partial_json": ""},
                    {"type": "input_json_delta", "partial_json": data[:half]},
                    {"type": "input_json_delta", "partial_json": data[half:]},
                ]
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
            )
            for delta in deltas:
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        final_usage = {k: v for k, v in usage.items() if k != "service_tier"}
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": final_usage,
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return events
