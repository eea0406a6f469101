"""Google Gemini (Gemini CLI): ``x-goog-api-key``, ``/v1beta/models/M:streamGenerateContent``.

Usage: every chunk of ``generateContent``/``streamGenerateContent`` carries a running
``usageMetadata``; the last one is the call's. An error inside a stream is an ``error`` object
in a chunk (its ``status``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.apis.base import NAME, VendorApi, with_model
from agents.apis.registry import vendor_api
from agents.usage import TokenUsage, as_dict, gemini_usage


@vendor_api("gemini")
class Gemini(VendorApi):
    auth_header = "x-goog-api-key"
    routes = (
        (
            "POST",
            re.compile(
                rf"/v1(beta|alpha)?/models/{NAME}:(streamGenerateContent|generateContent|countTokens)"
            ),
        ),
        ("GET", re.compile(rf"/v1(beta|alpha)?/models(/{NAME})?")),
    )
    billing_headers = frozenset({"x-goog-user-project"})
    # Tool kinds (a tool is an object keyed by its kind).
    server_tools = ("googleSearch", "googleSearchRetrieval", "urlContext", "codeExecution")

    def rate_limit_error(self, message: str) -> bytes:
        # ai.google.dev/gemini-api/docs/troubleshooting: 429 RESOURCE_EXHAUSTED (rate limit).
        error = {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}
        return json.dumps({"error": error}).encode()

    def tools_in(self, request: dict[str, Any]) -> list[str]:
        tools = request.get("tools") if isinstance(request.get("tools"), list) else []
        return [k for t in tools if isinstance(t, dict) for k in t if k in self.server_tools]

    def quota_error(self, message: str) -> tuple[int, dict[str, Any]]:
        # 429 RESOURCE_EXHAUSTED, the Google API error shape {"error": {"code", "message",
        # "status"}}: "You've exceeded the rate limit" or the quota
        # (https://ai.google.dev/gemini-api/docs/troubleshooting#error-codes).
        return 429, {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}}

    def usage_of(self, objects: list[Any]) -> TokenUsage | None:
        counts: dict[str, Any] | None = None
        model = ""
        for obj in objects:
            if isinstance(obj, dict) and "usageMetadata" in obj:
                counts = as_dict(obj["usageMetadata"])
                model = str(obj.get("modelVersion") or model)
        if counts is None:
            return None
        usage = gemini_usage(
            {
                "input": counts.get("promptTokenCount"),
                "cached": counts.get("cachedContentTokenCount"),
                "output": counts.get("candidatesTokenCount"),
                "thoughts": counts.get("thoughtsTokenCount"),
                "tool": counts.get("toolUsePromptTokenCount"),
            }
        )
        return with_model(usage, model)
