"""Token usage of one model call as the vendor reported it in its response: what the model
proxy (``runner.model_proxy``) saw on the wire, read independently of the CLI's own record.

A CLI's session record is the seat's account of its calls; the response bodies are the
vendor's. The two agree when every call the seat made was its CLI's (the real-seat tests check
that they do); a seat that also called the model some other way (its token works from any
process in its container) shows up as tokens on the wire that no record holds.

Understood, plain JSON or server-sent events, in any of the four protocols the seats speak:

* Anthropic Messages: ``message_start`` carries the input side (uncached input, cache write
  and read) and an early output count; ``message_delta`` carries the final counts, which win.
  Unstreamed: the ``message``'s ``usage``.
* OpenAI Responses: ``response.completed`` (or ``.incomplete``/``.failed``) carries the
  response with its ``usage``; unstreamed: the ``response`` object.
* OpenAI Chat Completions: the chunk (or completion) with a non-null ``usage``, the last one.
* Gemini ``generateContent``/``streamGenerateContent``: every chunk carries a running
  ``usageMetadata``; the last one is the call's.

Counts are normalised as :mod:`analysis.tokens` does (``input`` excludes cached tokens,
``output`` includes reasoning).
"""

from __future__ import annotations

import json
from typing import Any

from agents.usage import TokenUsage
from agents.usage import api_usage as _api_usage
from agents.usage import as_dict as _dict
from agents.usage import gemini_usage as _gemini_usage

__all__ = ["stream_error", "wire_usage"]


def _objects(body: bytes, content_type: str) -> list[Any]:
    text = body.decode("utf-8", "replace")
    stripped = text.lstrip()
    if "event-stream" in content_type or stripped.startswith(("data:", "event:", ":")):
        out = []
        for line in text.splitlines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if not payload or payload == "[DONE]":
                continue
            try:
                out.append(json.loads(payload))
            except (ValueError, RecursionError):  # RecursionError: nested beyond reason
                continue
        return out
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return []
    return document if isinstance(document, list) else [document]  # Gemini: a JSON array


def _responses_usage(usage: Any) -> bool:
    return (
        isinstance(usage, dict)
        and "input_tokens" in usage
        and "output_tokens" in usage
        and "prompt_tokens" not in usage
        and "cache_read_input_tokens" not in usage
        and "cache_creation_input_tokens" not in usage
    )


def stream_error(body: bytes, content_type: str = "") -> str | None:
    """The error a vendor sent inside a response that began as 200 (Anthropic's ``error``
    event, e.g. ``overloaded_error``; OpenAI's ``error`` or ``response.failed``; an ``error``
    object in a Gemini or Chat Completions chunk), or None."""
    for obj in _objects(body, content_type):
        if not isinstance(obj, dict):
            continue
        kind = obj.get("type")
        error = obj.get("error")
        if kind == "response.failed":
            error = _dict(obj.get("response")).get("error") or "response.failed"
        elif kind == "error" and error is None:  # OpenAI Responses: code and message inline
            error = str(obj.get("code") or "error")
        elif not isinstance(error, dict):
            continue
        if isinstance(error, dict):
            return str(error.get("type") or error.get("status") or error.get("code") or "error")
        return str(error)[:200]
    return None


def wire_usage(body: bytes, content_type: str = "") -> TokenUsage | None:
    """The usage one response reported (``requests=1``, ``model`` as the response names it),
    or None when it reported none (an error, a model listing, a token count)."""
    anthropic: dict[str, Any] | None = None
    found: dict[str, Any] | None = None
    gemini: dict[str, Any] | None = None
    model = ""
    for obj in _objects(body, content_type):
        if not isinstance(obj, dict):
            continue
        kind = obj.get("type")
        if "usageMetadata" in obj:
            gemini = _dict(obj["usageMetadata"])
            model = str(obj.get("modelVersion") or model)
        elif kind == "message_start":
            message = _dict(obj.get("message"))
            anthropic = dict(_dict(message.get("usage")))
            model = str(message.get("model") or model)
        elif kind == "message_delta" and anthropic is not None:
            anthropic.update({k: v for k, v in _dict(obj.get("usage")).items() if v is not None})
        elif kind == "message" and isinstance(obj.get("usage"), dict):
            anthropic, model = dict(obj["usage"]), str(obj.get("model") or model)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = _dict(obj.get("response"))
            if isinstance(response.get("usage"), dict):
                found = {"input_tokens_details": {}, **response["usage"]}
                model = str(response.get("model") or model)
        elif (
            obj.get("object") == "response" and isinstance(obj.get("usage"), dict)
        ) or _responses_usage(obj.get("usage")):
            found = {"input_tokens_details": {}, **obj["usage"]}
            model = str(obj.get("model") or model)
        elif str(obj.get("object", "")).startswith("chat.completion") and isinstance(
            obj.get("usage"), dict
        ):
            found, model = obj["usage"], str(obj.get("model") or model)
    if gemini is not None:
        usage = _gemini_usage(
            {
                "input": gemini.get("promptTokenCount"),
                "cached": gemini.get("cachedContentTokenCount"),
                "output": gemini.get("candidatesTokenCount"),
                "thoughts": gemini.get("thoughtsTokenCount"),
                "tool": gemini.get("toolUsePromptTokenCount"),
            }
        )
    elif anthropic is not None:
        usage = _api_usage(anthropic)
    elif found is not None:
        usage = _api_usage(found)
    else:
        return None
    usage.model = model or usage.model
    return usage
