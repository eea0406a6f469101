"""The OpenAI Chat Completions API, as mini-swe-agent uses it through LiteLLM, playing a script.

``POST /v1/chat/completions`` answers a ``chat.completion`` object whose message carries the
scripted command as a call of the ``bash`` tool the request offers (mini-swe-agent's default
config: one ``{"command": ...}`` argument), with the step's ``note`` as its content. A request
that offers no tools (mini-swe-agent's text-based config) gets the command in one
```` ```mswea_bash_command ```` block instead. The script's final text ends the session the way
mini-swe-agent ends one: a command (``finish``, default ``echo
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) whose output starts with its completion marker, the
text as the message's content; the reply is still recorded as the ``text`` step.

``usage`` has ``prompt_tokens`` (cached included) with ``prompt_tokens_details.cached_tokens``
and ``completion_tokens`` (reasoning included) with
``completion_tokens_details.reasoning_tokens``. With ``"stream": true`` the same reply comes as
``chat.completion.chunk`` events (role, content pieces, the tool call's name then its arguments
in two pieces, ``finish_reason``), a last chunk with empty ``choices`` and the ``usage`` when
``stream_options.include_usage`` asks for it, then ``data: [DONE]``. ``GET /v1/models`` lists
the models seen. The step is chosen by how many assistant messages the request's ``messages``
already hold; the first user message of each answered request is kept beside its reply
(``first_user[i]`` for ``replies[i]``: the task a session was started with).
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.endpoints.base import (
    Reply,
    RequestLog,
    Response,
    content_text,
    new_id,
    pieces,
)
from tests.support.endpoints.openai_responses import OpenAIEndpoint, _error

MINI_SWE_FINISH = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SHELL_TOOLS = ("bash", "shell", "run_shell_command")


def chat_usage(usage: dict[str, int]) -> dict[str, Any]:
    """Usage in Chat Completions fields (prompt includes cached, completion includes reasoning)."""
    if usage.get("cache_write"):
        raise ValueError("the Chat Completions API reports no cache writes")
    uncached, cached = usage.get("input", 0), usage.get("cache_read", 0)
    output, reasoning = usage.get("output", 0), usage.get("reasoning", 0)
    if reasoning > output:
        raise ValueError("reasoning is part of output: it cannot exceed it")
    return {
        "prompt_tokens": uncached + cached,
        "completion_tokens": output,
        "total_tokens": uncached + cached + output,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class ChatCompletionsEndpoint(OpenAIEndpoint):
    """Args (beyond :class:`ScriptedEndpoint`'s): ``finish``, the command that ends a session
    for the script's final text (None: answer the text alone, as a plain chat model would)."""

    vendor = "openai_chat"
    post_route = "/v1/chat/completions"

    def __init__(self, *args: Any, finish: str | None = MINI_SWE_FINISH, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finish = finish
        self.first_user: list[str] = []

    def respond(self, body: Any, entry: RequestLog) -> Response:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            entry.status = 400
            self.log(entry)
            return _error(400, "invalid_request_error", "a JSON body with messages is required")
        return self._respond(body, entry)

    def _respond(self, body: dict[str, Any], entry: RequestLog) -> Response:
        if (failure := self.fail(entry)) is not None:
            return failure
        model = str(body.get("model") or self.default_model)
        messages = [m for m in body["messages"] if isinstance(m, dict)]
        turn, history = self.turns(
            [
                None if m.get("role") == "assistant" else content_text(m.get("content"))
                for m in messages
            ]
        )
        first = next((m for m in messages if m.get("role") == "user"), {})
        index, step = self.step_for(turn)
        entry.step = index
        tools = {
            str((t.get("function") or {}).get("name") or ""): t
            for t in body.get("tools") or []
            if isinstance(t, dict)
        }
        tool = next((n for n in SHELL_TOOLS if n in tools), None)
        command = step.text if step.kind == "shell" else self.finish
        content = step.note if step.kind == "shell" else step.text
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        finish_reason = "stop"
        if command and tool:
            call = {
                "id": new_id("call_"),
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps({"command": command})},
            }
            message["tool_calls"] = [call]
            finish_reason = "tool_calls"
            entry.detail = f"called {tool} (offered: {', '.join(sorted(tools))})"
        elif command:
            block = f"```mswea_bash_command\n{command}\n```"
            message["content"] = f"{content}\n\n{block}" if content else block
            entry.detail = "command in a mswea_bash_command block (no tools offered)"
        stream = bool(body.get("stream"))
        completion_id, request_id = new_id("chatcmpl-"), new_id("req_", 16)
        reply = Reply(
            entry.path, model, index, step.kind, stream, dict(step.usage), completion_id,
            request_id, history,
        )  # fmt: skip
        with self._lock:  # first_user[i] belongs to replies[i]
            self.first_user.append(content_text(first.get("content")))
            self.add_reply(reply)
        self.log(entry)
        response = {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            ],
            "usage": chat_usage(step.usage),
            "system_fingerprint": "fp_swarmlab",
        }
        headers = {"x-request-id": request_id}
        if not stream:
            return Response(200, response, headers=headers)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Response(200, events=self._chunks(response, include_usage), headers=headers)

    @staticmethod
    def _chunks(response: dict[str, Any], include_usage: bool) -> list[tuple[str | None, Any]]:
        base = {k: response[k] for k in ("id", "created", "model", "system_fingerprint")}
        base["object"] = "chat.completion.chunk"
        choice = response["choices"][0]
        message = choice["message"]
        events: list[tuple[str | None, Any]] = []

        def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
            events.append(
                (None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )

        chunk({"role": "assistant", "content": ""})
        for piece in pieces(message["content"]) if message.get("content") else []:
            chunk({"content": piece})
        for i, call in enumerate(message.get("tool_calls") or []):
            args = call["function"]["arguments"]
            head = {"index": i, "id": call["id"], "type": "function"}
            chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"]}}]})
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
        chunk({}, choice["finish_reason"])
        if include_usage:
            events.append((None, {**base, "choices": [], "usage": response["usage"]}))
        events.append((None, "[DONE]"))
        return events
