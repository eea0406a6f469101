"""The Gemini API (``generativelanguage.googleapis.com``), as the Gemini CLI uses it through the
``@google/genai`` SDK, playing a script.

``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` streams what the real API streams:
server-sent events without event names, each a ``GenerateContentResponse`` with
``candidates[0].content`` (``role: model``, ``parts``), ``modelVersion`` and ``responseId``.
Text comes in pieces; a ``functionCall`` part (``name``, ``args``) comes whole, with a
``thoughtSignature`` as Gemini 3 models send it; the last event carries ``finishReason: STOP``.
Every event carries ``usageMetadata``: the early ones only ``promptTokenCount`` (cached
included), ``cachedContentTokenCount`` and ``totalTokenCount``, the last one the full count
with ``candidatesTokenCount`` (reasoning excluded) and ``thoughtsTokenCount`` — so a client
that adds up the events, rather than keeping the last, is caught. Reasoning, when the request
asks for thoughts (``thinkingConfig.includeThoughts``), is also sent as a ``thought: true``
part. ``:generateContent`` answers the same as one JSON object.

Also answered: ``:countTokens`` (an estimate, no usage recorded), ``GET /v1beta/models`` and
``GET /v1beta/models/{model}``. The key comes as ``x-goog-api-key`` (or ``?key=``, or a
bearer token). A tool call uses the shell function the request declares
(``run_shell_command``, its ``command`` argument). A request declaring no tools is a side call
(the CLI's next-speaker check, a session summary, a routing decision): it gets a reply in the
shape its ``responseJsonSchema`` asks for (or ``OK``), whose usage is recorded like any other.
The script's step is chosen by how many function calls the request's ``contents`` holds after
its last keep-going message.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

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

SHELL_FUNCTIONS = ("run_shell_command", "shell", "bash")
DEFAULT_MODEL = "gemini-2.5-pro"
# /{version}/models/{model}:{method}; the CLI uses v1beta, the SDK knows v1 and v1alpha too.
_MODEL_PATH = re.compile(r"^/(v1|v1beta|v1alpha)/models/([^/:]+):([A-Za-z]+)$")
_MODELS = re.compile(r"^/(v1|v1beta|v1alpha)/models(?:/([^/:]+))?$")
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
# A thought signature as Gemini 3 attaches to a function call (opaque bytes, base64).
_SIGNATURE = "c3dhcm1sYWItc2NyaXB0ZWQtc2lnbmF0dXJl"


def _error(status: int, message: str) -> Response:
    return Response(
        status,
        {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}},
    )


def gemini_usage(usage: dict[str, int]) -> dict[str, Any]:
    """Usage in the Gemini API's fields (the prompt includes cached tokens; candidates exclude
    thoughts, which are counted apart)."""
    if usage.get("cache_write"):
        raise ValueError("the Gemini API reports no cache writes")
    uncached, cached = usage.get("input", 0), usage.get("cache_read", 0)
    output, reasoning = usage.get("output", 0), usage.get("reasoning", 0)
    if reasoning > output:
        raise ValueError("reasoning is part of output: it cannot exceed it")
    prompt = uncached + cached
    out: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output - reasoning,
        "totalTokenCount": prompt + output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if cached:
        out["cachedContentTokenCount"] = cached
        out["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    if reasoning:
        out["thoughtsTokenCount"] = reasoning
    return out


def _early_usage(full: dict[str, Any]) -> dict[str, Any]:
    """What the API puts on the events before the last: the prompt only."""
    keep = ("promptTokenCount", "cachedContentTokenCount", "promptTokensDetails")
    early = {k: full[k] for k in keep if k in full}
    early["totalTokenCount"] = full["promptTokenCount"]
    return early


def _history(contents: Any) -> list[str | None]:
    """The conversation as :meth:`ScriptedEndpoint.turns` reads it: a function call (one per
    scripted shell step) as None, a user turn as its text."""
    if not isinstance(contents, list):
        return []
    history: list[str | None] = []
    for content in contents:
        if not isinstance(content, dict):
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") == "user":
            history.append(content_text(parts))
        history.extend(None for p in parts if isinstance(p.get("functionCall"), dict))
    return history


def _declarations(body: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            found += [d for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)]
    return found


def _shell_args(declaration: dict[str, Any], command: str) -> dict[str, Any]:
    schema = declaration.get("parametersJsonSchema") or declaration.get("parameters") or {}
    props = schema.get("properties") or {}
    args: dict[str, Any] = {"command": command}
    if "description" in props:
        args["description"] = "scripted step"
    return args


def _example(schema: Any, depth: int = 0) -> Any:
    """A small value of the shape a JSON schema describes (an enum's first choice, required
    properties only): the answer to a side call that asks for JSON."""
    if not isinstance(schema, dict) or depth > 6:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if isinstance(schema.get("type"), list):
        kind = str(next((t for t in schema["type"] if t != "null"), "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        wanted = schema.get("required") or list(props)
        return {k: _example(props.get(k), depth + 1) for k in wanted if k in props}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return "scripted"


class GeminiEndpoint(ScriptedEndpoint):
    vendor = "gemini"

    def authorized(
        self, headers: dict[str, str], query: dict[str, list[str]] | None = None
    ) -> bool:
        if not self.api_key:
            return True
        keys = {headers.get("x-goog-api-key"), *(query or {}).get("key", [])}
        return self.api_key in keys or headers.get("authorization") == f"Bearer {self.api_key}"

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Response:
        parts = urlsplit(path)
        route = parts.path.rstrip("/")
        query = parse_qs(parts.query)
        authorized = self.authorized(headers, query)
        entry = RequestLog(method, path, 200, authorized=authorized)
        call = _MODEL_PATH.match(route)
        listing = _MODELS.match(route)
        methods = ("streamGenerateContent", "generateContent", "countTokens")
        if call and method == "POST" and call.group(3) in methods:
            entry.model = call.group(2)
        elif not (listing and method == "GET"):
            entry.known, entry.status = False, 404
            self.log(entry)
            return _error(404, f"{method} {route}: not served here")
        if not authorized:
            entry.status = 401
            self.log(entry)
            return _error(401, "API key not valid. Please pass a valid API key.")
        if listing:
            self.log(entry)
            return self._models(listing.group(2))
        assert call is not None
        if not isinstance(body, dict):
            entry.status = 400
            self.log(entry)
            return _error(400, "a JSON body is required")
        if call.group(3) == "countTokens":
            self.log(entry)
            return Response(200, {"totalTokens": 1000 + len(json.dumps(body)) // 4})
        stream = call.group(3) == "streamGenerateContent"
        return self._generate(call.group(2), body, entry, stream)

    def _models(self, wanted: str | None) -> Response:
        def model(name: str) -> dict[str, Any]:
            return {
                "name": f"models/{name}",
                "version": "001",
                "displayName": name,
                "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
                "thinking": True,
            }

        if wanted:
            return Response(200, model(wanted))
        names = sorted({r.model for r in self.replies} or {DEFAULT_MODEL})
        return Response(200, {"models": [model(n) for n in names]})

    def failure_body(self, status: int) -> Any:
        return _error(status, f"injected failure ({status})").body

    def _generate(
        self, model: str, body: dict[str, Any], entry: RequestLog, stream: bool
    ) -> Response:
        if (failure := self.fail(entry)) is not None:
            return failure
        declarations = _declarations(body)
        config = body.get("generationConfig") or {}
        thinking = config.get("thinkingConfig") or {}
        if declarations:
            turn, history = self.turns(_history(body.get("contents")))
            index, step = self.step_for(turn)
            kind = step.kind
        else:  # a side call: answered in words (or the JSON it asks for)
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            answer = json.dumps(_example(schema)) if schema else "OK"
            history = len([m for m in _history(body.get("contents")) if m is None])
            index, step, kind = -1, Step("text", answer, self.script[-1].usage), "side"
        entry.step = index
        answer_parts: list[dict[str, Any]] = []
        if step.kind == "shell":
            by_name = {str(d.get("name")): d for d in declarations}
            name = next((n for n in SHELL_FUNCTIONS if n in by_name), None)
            if name is None:
                entry.status, entry.detail = 400, f"no shell function among {sorted(by_name)}"
                self.log(entry)
                return _error(400, entry.detail)
            entry.detail = f"called {name} ({len(declarations)} functions declared)"
            if step.note:
                answer_parts += [{"text": p} for p in pieces(step.note)]
            call = {"name": name, "args": _shell_args(by_name[name], step.text)}
            answer_parts.append({"functionCall": call, "thoughtSignature": _SIGNATURE})
        else:
            answer_parts += [{"text": p} for p in pieces(step.text)]
        thought: list[dict[str, Any]] = []
        if step.usage.get("reasoning") and thinking.get("includeThoughts"):
            thought = [{"text": "**Following the script**\n\nOne step at a time.", "thought": True}]
        response_id = new_id("", 11)
        request_id = new_id("req_", 16)
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
        usage = gemini_usage(step.usage)
        version = model

        def event(parts: list[dict[str, Any]], meta: dict[str, Any], last: bool) -> dict:
            candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
            if last:
                candidate["finishReason"] = "STOP"
            return {
                "candidates": [candidate],
                "usageMetadata": meta,
                "modelVersion": version,
                "responseId": response_id,
            }

        if not stream:
            return Response(200, event([*thought, *self._joined(answer_parts)], usage, True))
        chunks = [[p] for p in thought] + [[p] for p in answer_parts]
        early = _early_usage(usage)
        events: list[tuple[str | None, Any]] = [
            (None, event(parts, early, False)) for parts in chunks[:-1]
        ]
        events.append((None, event(chunks[-1], usage, True)))
        return Response(200, events=events)

    @staticmethod
    def _joined(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Text pieces joined into one part, as a non-streamed reply holds them."""
        out: list[dict[str, Any]] = []
        for part in parts:
            if out and "text" in part and set(out[-1]) == {"text"} and set(part) == {"text"}:
                out[-1] = {"text": out[-1]["text"] + part["text"]}
            else:
                out.append(dict(part))
        return out
