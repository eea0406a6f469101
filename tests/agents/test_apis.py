"""The vendor APIs (``agents.apis``): a name-keyed registry, one module each, and the model
proxy (``isolation.model_proxy``) dispatching through whichever API object it is given: a
vendor API registered from this test alone (no project file touched) is served by the proxy
against a local endpoint, its routes, auth header and usage parser in force."""

from __future__ import annotations

import ast
import http.client
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agents.apis import VendorApi, api_names, get_api, registry, vendor_api
from agents.clis import cli_names, get_cli
from agents.usage import TokenUsage, as_int
from isolation.model_proxy import ModelProxy

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-real-vendor-key-for-the-test"


def test_the_bundled_apis_are_registered_and_an_unknown_one_is_refused():
    assert api_names() == ["anthropic", "gemini", "openai"]
    assert {n: get_api(n).auth_header for n in api_names()} == {
        "anthropic": "x-api-key",
        "gemini": "x-goog-api-key",
        "openai": "authorization",
    }
    with pytest.raises(ValueError, match="no vendor API named 'nope'; known: anthropic"):
        get_api("nope")


def test_every_cli_speaks_a_registered_api():
    assert {name: get_cli(name).api for name in cli_names()} == {
        "claude_code": "anthropic",
        "codex": "openai",
        "gemini": "gemini",
        "mini_swe": "openai",
    }


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_proxy_names_no_vendor_and_isolation_imports_no_agent_code():
    source = (ROOT / "isolation/model_proxy.py").read_text().lower()
    for vendor in ("anthropic", "openai", "gemini", "claude", "codex", "google"):
        assert vendor not in source, vendor
    for path in (ROOT / "isolation").glob("*.py"):
        assert not {m for m in _imports(path) if m.split(".")[0] in ("agents", "analysis")}, path


class _Vendor(BaseHTTPRequestHandler):
    """A made-up vendor: ``POST /api/think`` answers with its own usage shape."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append(("POST", self.path, {k.lower(): v for k, v in self.headers.items()}))
        data = json.dumps({"answer": "42", "spent": {"in": 7, "out": 3}, "engine": "deep"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())


@pytest.fixture
def vendor():
    _Vendor.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Vendor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_vendor_api_registered_from_a_test_is_served_by_the_proxy(vendor, monkeypatch):
    monkeypatch.setattr(registry.APIS, "entries", dict(registry.APIS.entries))

    @vendor_api("deepthought")
    class DeepThought(VendorApi):
        auth_header = "x-deep-key"
        routes = (("POST", re.compile(r"/api/think")),)
        billing_headers = frozenset({"x-deep-account"})

        def tools_in(self, request: dict[str, Any]) -> list[str]:
            return ["oracle"] if request.get("oracle") else []

        def usage_of(self, objects: list[Any]) -> TokenUsage | None:
            for obj in objects:
                if isinstance(obj, dict) and isinstance(obj.get("spent"), dict):
                    spent = obj["spent"]
                    out = TokenUsage(input=as_int(spent.get("in")), output=as_int(spent.get("out")))
                    out.model, out.requests = str(obj.get("engine") or ""), 1
                    return out
            return None

    assert "deepthought" in api_names()
    with ModelProxy(vendor, KEY, get_api("deepthought")) as proxy:
        token = proxy.add_seat("solo", "w1")
        host, port = proxy.address

        def post(path: str, body: dict[str, Any]) -> int:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            try:
                headers = {"x-deep-key": token, "x-deep-account": "someone-else"}
                conn.request("POST", path, json.dumps(body), headers)
                response = conn.getresponse()
                response.read()
                return response.status
            finally:
                conn.close()

        assert post("/api/think", {"q": "life"}) == 200
        assert post("/api/admin", {}) == 403  # not its model route
        assert post("/api/think", {"oracle": True}) == 403  # its server-side tool
    (seen,) = _Vendor.seen
    assert seen[:2] == ("POST", "/api/think")
    assert seen[2]["x-deep-key"] == KEY and "x-deep-account" not in seen[2]
    # The proxy keeps calls in the order they finished: a refusal can be recorded before the
    # call served ahead of it has run its own record (CI saw it), so order them by start.
    calls = sorted(proxy.calls, key=lambda c: c.started_at)
    first = calls[0]
    assert (first.status, first.model, first.input, first.output) == (200, "deep", 7, 3)
    assert [c.status for c in calls] == [200, 403, 403]
