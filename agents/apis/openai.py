"""OpenAI: the Responses API (Codex) and Chat Completions (mini-swe-agent through LiteLLM),
``Authorization: Bearer``, under the base URL's path (``https://api.openai.com/v1``).

Usage: Responses' ``response.completed`` (or ``.incomplete``/``.failed``) carries the response
with its ``usage``; unstreamed, the ``response`` object. Chat Completions: the chunk (or
completion) with a non-null ``usage``, the last one. Errors inside a stream: a Responses
``error`` event (code and message inline) or ``response.failed``; an ``error`` object in a
chunk.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.apis.base import NAME, VendorApi, with_model
from agents.apis.registry import vendor_api
from agents.usage import TokenUsage, api_usage, as_dict


def _responses_usage(usage: Any) -> bool:
    return (
        isinstance(usage, dict)
        and "input_tokens" in usage
        and "output_tokens" in usage
        and "prompt_tokens" not in usage
        and "cache_read_input_tokens" not in usage
        and "cache_creation_input_tokens" not in usage
    )


@vendor_api("openai")
class OpenAI(VendorApi):
    auth_header = "authorization"
    routes = (
        # Codex compacts a long context remotely with /responses/compact.
        ("POST", re.compile(r"/(responses|responses/compact|chat/completions)")),
        ("GET", re.compile(rf"/models(/{NAME})?")),
    )
    billing_headers = frozenset({"openai-organization", "openai-project"})
    # Responses tool types; Chat Completions' web_search_options is a key of the request.
    server_tools = ("web_search", "file_search", "code_interpreter", "mcp")

    def rate_limit_error(self, message: str) -> bytes:
        # platform.openai.com/docs/guides/error-codes: 429 "Rate limit reached for requests".
        error = {"message": message, "type": "requests", "param": None}
        return json.dumps({"error": {**error, "code": "rate_limit_exceeded"}}).encode()

    def tools_in(self, request: dict[str, Any]) -> list[str]:
        tools = request.get("tools") if isinstance(request.get("tools"), list) else []
        found = [
            str(t.get("type"))
            for t in tools
            if isinstance(t, dict) and str(t.get("type") or "").startswith(self.server_tools)
        ]
        if "web_search_options" in request:
            found.append("web_search_options")
        return found

    def usage_of(self, objects: list[Any]) -> TokenUsage | None:
        found: dict[str, Any] | None = None
        model = ""
        for obj in objects:
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type")
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                response = as_dict(obj.get("response"))
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
        return None if found is None else with_model(api_usage(found), model)

    def quota_error(self, message: str) -> tuple[int, dict[str, Any]]:
        # 429 insufficient_quota, "You exceeded your current quota, please check your plan and
        # billing details" (https://platform.openai.com/docs/guides/error-codes/api-errors).
        return super().quota_error(message)

    def error_of(self, obj: dict[str, Any]) -> str | None:
        kind = obj.get("type")
        if kind == "response.failed":
            error = as_dict(obj.get("response")).get("error") or "response.failed"
            return super().error_of({"error": error}) or str(error)[:200]
        if kind == "error" and obj.get("error") is None:  # Responses: code and message inline
            return str(obj.get("code") or "error")
        return super().error_of(obj)
