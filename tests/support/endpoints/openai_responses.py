"""The OpenAI Responses API, as the Codex CLI uses it, playing a script.

``POST /v1/responses`` streams what the real API streams: ``response.created``,
``response.in_progress``, then per output item ``response.output_item.added``, its deltas
(``response.reasoning_summary_text.delta``, ``response.function_call_arguments.delta``,
``response.output_text.delta`` with the content-part events around it) and
``response.output_item.done``, and last ``response.completed`` whose ``usage`` carries
``input_tokens`` (cached included) with ``input_tokens_details.cached_tokens`` and
``output_tokens`` (reasoning included) with ``output_tokens_details.reasoning_tokens``. A
non-streamed request gets the completed response as one JSON object.

A tool call uses the shell tool the request offers, whatever this Codex version calls it:
``shell_command`` / ``exec_command`` (a string), ``shell`` (an argv), or the built-in
``local_shell``. ``GET /v1/models`` lists the models seen. The script's step is chosen by how
many tool calls the request's ``input`` holds after its last keep-going message.
"""

from __future__ import annotations

import json
import time
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

# Preferred first. Each maps a command line to the tool's arguments.
SHELL_FUNCTIONS = ("shell_command", "exec_command", "shell", "container.exec", "local_shell")


def _error(status: int, kind: str, message: str, code: str | None = None) -> Response:
    return Response(
        status, {"error": {"message": message, "type": kind, "param": None, "code": code}}
    )


def responses_usage(usage: dict[str, int]) -> dict[str, Any]:
    """Usage in the Responses API's fields (input includes cached, output includes reasoning)."""
    if usage.get("cache_write"):
        raise ValueError("the Responses API reports no cache writes")
    uncached, cached = usage.get("input", 0), usage.get("cache_read", 0)
    output, reasoning = usage.get("output", 0), usage.get("reasoning", 0)
    if reasoning > output:
        raise ValueError("reasoning is part of output: it cannot exceed it")
    return {
        "input_tokens": uncached + cached,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": uncached + cached + output,
    }


def _tool_arguments(tool: dict[str, Any], command: str) -> dict[str, Any]:
    props = (tool.get("parameters") or {}).get("properties") or {}
    if "cmd" in props:
        return {"cmd": command}
    kind = (props.get("command") or {}).get("type")
    if kind == "array":
        return {"command": ["bash", "-lc", command]}
    return {"command": command}


def _history(items: Any) -> list[str | None]:
    """The conversation as :meth:`ScriptedEndpoint.turns` reads it: a tool call (one per
    scripted shell step) as None, a user message as its text."""
    if not isinstance(items, list):
        return []
    calls = ("function_call", "local_shell_call", "custom_tool_call")
    history: list[str | None] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") in calls:
            history.append(None)
        elif item.get("role") == "user" and item.get("type", "message") == "message":
            history.append(content_text(item.get("content")))
    return history


class OpenAIEndpoint(ScriptedEndpoint):
    """What OpenAI's APIs share: a bearer key, their error body, ``GET /v1/models``, and one
    ``POST`` route per API (``post_route``); the rest is each API's :meth:`respond`."""

    vendor = "openai"
    post_route = ""
    default_model = "gpt-x"
    # Codex tries a websocket first; the Responses endpoint speaks HTTP streaming only.
    refuse_websocket = False

    def authorized(self, headers: dict[str, str]) -> bool:
        return not self.api_key or headers.get("authorization") == f"Bearer {self.api_key}"

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Response:
        route = urlsplit(path).path.rstrip("/")
        authorized = self.authorized(headers)
        entry = RequestLog(method, path, 200, authorized=authorized)
        if isinstance(body, dict):
            entry.model = body.get("model")
        if self.refuse_websocket and headers.get("upgrade", "").lower() == "websocket":
            entry.known, entry.status = False, 426
            entry.detail = "websocket upgrade refused: HTTP streaming only"
            self.log(entry)
            return _error(426, "invalid_request_error", entry.detail)
        if (method, route) not in {("POST", self.post_route), ("GET", "/v1/models")}:
            entry.known, entry.status = False, 404
            self.log(entry)
            return _error(404, "invalid_request_error", f"{method} {route}: not served here")
        if not authorized:
            entry.status = 401
            self.log(entry)
            return _error(
                401, "invalid_request_error", "Incorrect API key provided", "invalid_api_key"
            )
        if method == "GET":
            self.log(entry)
            models = sorted({r.model for r in self.replies} or {self.default_model})
            data = [
                {"id": m, "object": "model", "created": 1735689600, "owned_by": "swarmlab"}
                for m in models
            ]
            return Response(200, {"object": "list", "data": data})
        return self.respond(body, entry)

    def respond(self, body: Any, entry: RequestLog) -> Response:
        raise NotImplementedError

    def failure_body(self, status: int) -> Any:
        if status == 429:
            kind, code = "requests", "rate_limit_exceeded"
        else:
            kind, code = "server_error", None
        return _error(status, kind, f"injected failure ({status})", code).body


class ResponsesEndpoint(OpenAIEndpoint):
    post_route = "/v1/responses"
    default_model = "gpt-5-codex"
    refuse_websocket = True

    def respond(self, body: Any, entry: RequestLog) -> Response:
        if not isinstance(body, dict):
            entry.status = 400
            self.log(entry)
            return _error(400, "invalid_request_error", "a JSON body is required")
        return self._respond(body, entry)

    def _respond(self, body: dict[str, Any], entry: RequestLog) -> Response:
        if (failure := self.fail(entry)) is not None:
            return failure
        model = str(body.get("model") or self.default_model)
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        turn, history = self.turns(_history(body.get("input")))
        index, step = self.step_for(turn)
        kind = step.kind
        if not tools and step.kind == "shell":  # a side call: answered in words
            index, step, kind = -1, Step("text", "OK", self.script[-1].usage), "side"
        entry.step = index
        response_id, request_id = new_id("resp_"), new_id("req_", 16)
        items: list[dict[str, Any]] = []
        if step.usage.get("reasoning"):
            items.append(
                {
                    "id": new_id("rs_"),
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "**Following the script**"}],
                }
            )
        if step.kind == "shell":
            by_name = {t.get("name") or t.get("type"): t for t in tools}
            name = next((n for n in SHELL_FUNCTIONS if n in by_name), None)
            if name is None:
                entry.status, entry.detail = 400, f"no shell tool among {sorted(by_name)}"
                self.log(entry)
                return _error(400, "invalid_request_error", entry.detail)
            entry.detail = f"called {name} (offered: {', '.join(sorted(map(str, by_name)))})"
            if name == "local_shell":
                items.append(
                    {
                        "id": new_id("lsh_"),
                        "type": "local_shell_call",
                        "call_id": new_id("call_"),
                        "status": "completed",
                        "action": {"type": "exec", "command": ["bash", "-lc", step.text]},
                    }
                )
            else:
                args = _tool_arguments(by_name[name], step.text)
                items.append(
                    {
                        "id": new_id("fc_"),
                        "type": "function_call",
                        "status": "completed",
                        "arguments": json.dumps(args),
                        "call_id": new_id("call_"),
                        "name": name,
                    }
                )
        else:
            items.append(
                {
                    "id": new_id("msg_"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": step.text, "annotations": []}],
                }
            )
        stream = bool(body.get("stream"))
        self.add_reply(
            Reply(
                entry.path,
                model,
                index,
                kind,
                stream,
                dict(step.usage),
                response_id,
                request_id,
                history,
            )
        )
        self.log(entry)
        created = int(time.time())
        response = {
            "id": response_id,
            "object": "response",
            "created_at": created,
            "status": "completed",
            "model": model,
            "output": items,
            "parallel_tool_calls": False,
            "previous_response_id": None,
            "store": bool(body.get("store", False)),
            "usage": responses_usage(step.usage),
        }
        headers = {"x-request-id": request_id}
        if not stream:
            return Response(200, response, headers=headers)
        return Response(200, events=self._events(response), headers=headers)

    @staticmethod
    def _events(response: dict[str, Any]) -> list[tuple[str | None, Any]]:
        seq = iter(range(1_000_000))
        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str | None, Any]] = []

        def emit(kind: str, **data: Any) -> None:
            events.append((kind, {"type": kind, "sequence_number": next(seq), **data}))

        emit("response.created", response=pending)
        emit("response.in_progress", response=pending)
        for index, item in enumerate(response["output"]):
            where = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "reasoning":
                emit("response.output_item.added", output_index=index, item={**item, "summary": []})
                for s, part in enumerate(item["summary"]):
                    emit(
                        "response.reasoning_summary_part.added",
                        **where,
                        summary_index=s,
                        part={"type": "summary_text", "text": ""},
                    )
                    emit(
                        "response.reasoning_summary_text.delta",
                        **where,
                        summary_index=s,
                        delta=part["text"],
                    )
                    emit(
                        "response.reasoning_summary_text.done",
                        **where,
                        summary_index=s,
                        text=part["text"],
                    )
                    emit(
                        "response.reasoning_summary_part.done", **where, summary_index=s, part=part
                    )
            elif item["type"] == "function_call":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
                args = item["arguments"]
                half = len(args) // 2
                for piece in (args[:half], args[half:]):
                    emit("response.function_call_arguments.delta", **where, delta=piece)
                emit("response.function_call_arguments.done", **where, arguments=args)
            elif item["type"] == "message":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "content": [], "status": "in_progress"},
                )
                text = item["content"][0]["text"]
                part = {"type": "output_text", "text": "", "annotations": []}
                emit("response.content_part.added", **where, content_index=0, part=part)
                for piece in pieces(text):
                    emit("response.output_text.delta", **where, content_index=0, delta=piece)
                emit("response.output_text.done", **where, content_index=0, text=text)
                emit(
                    "response.content_part.done",
                    **where,
                    content_index=0,
                    part={**part, "text": text},
                )
            else:
                emit("response.output_item.added", output_index=index, item=item)
            emit("response.output_item.done", output_index=index, item=item)
        emit("response.completed", response=response)
        return events
