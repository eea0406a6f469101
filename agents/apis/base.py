"""What a vendor's API is to the model proxy and to the wire-usage reader: one object per API.

An API object names the header the vendor reads its key from, the model routes a seat may use
(generating, counting tokens, listing models: nothing else the key could do), the tools the
vendor would run itself (web search, fetch, code execution, remote MCP), the headers that
choose whom a call is billed to, and how to read a response: the tokens it reported and an
error sent inside a stream that began as 200. :class:`isolation.model_proxy.ModelProxy` takes
such an object as a parameter, so the proxy itself names no vendor.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from agents.usage import TokenUsage

__all__ = ["NAME", "Routes", "VendorApi", "response_objects", "with_model"]

# A model's or a resource's name in a route.
NAME = r"[A-Za-z0-9._\-@]+"
#: (method, path after the base URL's path) of an API's model routes.
Routes = tuple[tuple[str, re.Pattern[str]], ...]


def response_objects(body: bytes, content_type: str = "") -> list[Any]:
    """The JSON objects of a response body: each ``data:`` line of server-sent events, or the
    document (a JSON array, as Gemini streams without SSE, gives its items)."""
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
    return document if isinstance(document, list) else [document]


class VendorApi:
    """One vendor API's policy and wire format; subclasses fill in the class attributes and
    the two readers (:meth:`usage_of`, and :meth:`error_of` where the generic one is not
    enough).

    Attributes:
        name: the registry's name (``agents.apis.get_api``), what a CLI's ``api`` names.
        auth_header: the header the vendor reads the key from (``authorization`` gets
            ``Bearer KEY``; any other gets the key itself).
        routes: the model routes (method, path pattern after the base URL's path; ``*``: any
            method).
        billing_headers: headers choosing whom a call is billed to: never the seat's choice.
        query_kept: query parameters a CLI sends to a model route; any other is dropped.
    """

    name: ClassVar[str] = ""
    auth_header: ClassVar[str] = "authorization"
    routes: ClassVar[Routes] = ()
    billing_headers: ClassVar[frozenset[str]] = frozenset()
    query_kept: ClassVar[frozenset[str]] = frozenset(
        {"alt", "beta", "client_version", "pageSize", "pageToken"}
    )

    def auth_value(self, key: str) -> str:
        """The value of :attr:`auth_header` carrying ``key``."""
        return f"Bearer {key}" if self.auth_header == "authorization" else key

    def allows(self, method: str, rest: str) -> bool:
        """True when ``method rest`` (the path after the base URL's path) is a model route."""
        return any(m in ("*", method) and p.fullmatch(rest) for m, p in self.routes)

    def tools_in(self, request: dict[str, Any]) -> list[str]:
        """The server-side tools a parsed generate request declares (none by default)."""
        return []

    def server_side_tools(self, body: bytes) -> list[str]:
        """The tools in a request's body that the vendor would run itself; [] for a body that
        is not a JSON object or declares none."""
        try:
            request = json.loads(body) if body else None
        except (ValueError, RecursionError):
            return []
        return self.tools_in(request) if isinstance(request, dict) else []

    def usage_of(self, objects: list[Any]) -> TokenUsage | None:
        """The usage the response's objects report, or None (subclasses)."""
        return None

    def error_of(self, obj: dict[str, Any]) -> str | None:
        """The error one response object carries: an ``error`` object's type, status or code."""
        error = obj.get("error")
        if not isinstance(error, dict):
            return None
        return str(error.get("type") or error.get("status") or error.get("code") or "error")

    def wire_usage(self, body: bytes, content_type: str = "") -> TokenUsage | None:
        """The usage one response reported (``requests=1``, ``model`` as the response names
        it), or None when it reported none (an error, a model listing, a token count)."""
        return self.usage_of(response_objects(body, content_type))

    def rate_limit_error(self, message: str) -> bytes:
        """The body of the vendor's 429 when its rate limit is hit (the proxy's fair use
        answers with it, so a CLI backs off and retries as it would for the vendor)."""
        return json.dumps({"error": {"type": "rate_limit_error", "message": message}}).encode()

    def quota_error(self, message: str) -> tuple[int, dict[str, Any]]:
        """The vendor's own answer to a request over an exhausted quota: (HTTP status, JSON
        body), what the model proxy sends a seat whose token or cost budget is spent
        (``isolation.spending``). By default OpenAI's shape, which OpenAI-compatible servers
        copy."""
        return 429, {
            "error": {
                "message": message,
                "type": "insufficient_quota",
                "param": None,
                "code": "insufficient_quota",
            }
        }

    def stream_error(self, body: bytes, content_type: str = "") -> str | None:
        """The first error the vendor sent inside a response, or None."""
        for obj in response_objects(body, content_type):
            if isinstance(obj, dict) and (error := self.error_of(obj)) is not None:
                return error
        return None


def with_model(usage: TokenUsage, model: str) -> TokenUsage:
    """``usage`` named after the model the response gave (kept as it is without one)."""
    usage.model = model or usage.model
    return usage
