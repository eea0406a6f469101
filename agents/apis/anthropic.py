"""Anthropic Messages (Claude Code): ``x-api-key``, ``/v1/messages``, typed server tools.

Usage: ``message_start`` carries the input side (uncached input, cache write and read) and an
early output count; ``message_delta`` carries the final counts, which win. Unstreamed: the
``message``'s ``usage``. An error inside a stream is an ``error`` event (``overloaded_error``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.apis.base import NAME, VendorApi, with_model
from agents.apis.registry import vendor_api
from agents.usage import TokenUsage, api_usage, as_dict


@vendor_api("anthropic")
class Anthropic(VendorApi):
    auth_header = "x-api-key"
    routes = (
        ("POST", re.compile(r"/v1/messages(/count_tokens)?")),
        ("GET", re.compile(rf"/v1/models(/{NAME})?")),
    )
    # Typed server tools (versioned names: web_search_20250305) and remote MCP servers.
    server_tools = ("web_search", "web_fetch", "code_execution", "mcp")

    def rate_limit_error(self, message: str) -> bytes:
        # docs.anthropic.com/en/api/errors: 429 rate_limit_error, in the error envelope.
        error = {"type": "rate_limit_error", "message": message}
        return json.dumps({"type": "error", "error": error}).encode()

    def tools_in(self, request: dict[str, Any]) -> list[str]:
        tools = request.get("tools") if isinstance(request.get("tools"), list) else []
        found = [
            str(t.get("type"))
            for t in tools
            if isinstance(t, dict) and str(t.get("type") or "").startswith(self.server_tools)
        ]
        if request.get("mcp_servers"):
            found.append("mcp_servers")
        return found

    def quota_error(self, message: str) -> tuple[int, dict[str, Any]]:
        # Anthropic's error shape is {"type": "error", "error": {"type", "message"}}; 429 is
        # rate_limit_error, "Your account has hit a rate limit", which is also how a
        # workspace's spend limit is answered (https://docs.anthropic.com/en/api/errors).
        return 429, {"type": "error", "error": {"type": "rate_limit_error", "message": message}}

    def usage_of(self, objects: list[Any]) -> TokenUsage | None:
        usage: dict[str, Any] | None = None
        model = ""
        for obj in objects:
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type")
            if kind == "message_start":
                message = as_dict(obj.get("message"))
                usage = dict(as_dict(message.get("usage")))
                model = str(message.get("model") or model)
            elif kind == "message_delta" and usage is not None:
                usage.update({k: v for k, v in as_dict(obj.get("usage")).items() if v is not None})
            elif kind == "message" and isinstance(obj.get("usage"), dict):
                usage, model = dict(obj["usage"]), str(obj.get("model") or model)
        return None if usage is None else with_model(api_usage(usage), model)
