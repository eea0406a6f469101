"""Token and cost budgets at the model proxy (``isolation.spending`` with
``isolation.model_proxy``): real proxy, real HTTP, in front of the local endpoints that speak
each vendor's protocol (``tests.support.endpoints``). A seat over its budget gets its vendor's
own quota error and nothing more reaches the vendor; per-arm budgets are a pool the arm's seats
share, per-seat budgets are each seat's own; the cost comes from the price table."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest

from agents.apis import get_api
from isolation.model_proxy import ModelProxy
from isolation.spending import (
    PER_ARM,
    PER_SEAT,
    Limit,
    Price,
    SpendingLedger,
    ledger_from,
    price_for,
)
from runner.events import EventLog
from tests.support.endpoints import ENDPOINTS, session_script

KEY = "sk-real-vendor-key-for-the-budget-test"

# vendor endpoint -> (API, base path, route, request body, auth header for a token)
VENDORS: dict[str, tuple[str, str, str, dict[str, Any], str]] = {
    "anthropic": (
        "anthropic",
        "",
        "/v1/messages",
        {"model": "claude-x", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
        "x-api-key",
    ),
    "openai": ("openai", "/v1", "/v1/responses", {"model": "gpt-x", "input": "hi"}, "bearer"),
    "openai_chat": (
        "openai",
        "/v1",
        "/v1/chat/completions",
        {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]},
        "bearer",
    ),
    "gemini": (
        "gemini",
        "",
        "/v1beta/models/gemini-x:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        "x-goog-api-key",
    ),
}


def _auth(kind: str, token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if kind == "bearer" else {kind: token}


def _post(proxy: ModelProxy, path: str, body: dict[str, Any], headers: dict[str, str]):
    """One call, returned once the proxy has finished it: a seat's body ends a moment before
    the proxy counts its usage (a CLI's next call comes after its tool ran)."""
    host, port = proxy.address
    before = proxy.call_count
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(
            "POST", path, json.dumps(body), {"content-type": "application/json", **headers}
        )
        response = conn.getresponse()
        answer = response.status, response.read()
    finally:
        conn.close()
    deadline = time.monotonic() + 30
    while proxy.call_count == before and time.monotonic() < deadline:
        time.sleep(0.01)
    return answer


def _first_output(vendor: str) -> int:
    """The output tokens the endpoint reports for the tests' one-message call (asked of a
    fresh endpoint directly)."""
    _, _, path, body, _ = VENDORS[vendor]
    with ENDPOINTS[vendor](session_script(vendor)) as endpoint:
        host, port = endpoint.address
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        assert conn.getresponse().read()
        conn.close()
    (reply,) = endpoint.replies
    return reply.usage["output"]


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_seat_over_its_output_budget_gets_the_vendors_quota_error(vendor, tmp_path):
    api_name, base, path, body, auth = VENDORS[vendor]
    out = _first_output(vendor)
    limit = out + 1  # the second call crosses it, the third is refused
    ledger = SpendingLedger([Limit("output_tokens", limit, PER_ARM)])
    told: list[tuple[str, str, str]] = []
    events = EventLog(tmp_path / "events.sqlite")
    endpoint = ENDPOINTS[vendor](session_script(vendor), api_key=KEY)
    with (
        endpoint,
        ModelProxy(
            endpoint.url + base,
            KEY,
            get_api(api_name),
            record=events.add_model_call,
            spending=ledger,
            on_budget=lambda *a: told.append(a),
        ) as proxy,
    ):
        token = proxy.add_seat("solo", "w1")
        headers = _auth(auth, token)
        first, second = (_post(proxy, path, body, headers) for _ in range(2))
        assert first[0] == second[0] == 200, (first, second)
        assert ledger.spent(token) == "output_tokens"
        status, raw = _post(proxy, path, body, headers)
    assert status == 429, raw
    error = json.loads(raw)
    if api_name == "openai":
        assert error["error"]["type"] == error["error"]["code"] == "insufficient_quota"
    elif api_name == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    else:
        assert error["error"]["status"] == "RESOURCE_EXHAUSTED" and error["error"]["code"] == 429
    assert "output_tokens budget is spent" in json.dumps(error)
    # Nothing past the limit reached the vendor; the refusal is a recorded call.
    assert len([r for r in endpoint.requests if r.step is not None]) == 2
    rows = sorted(events.table("model_calls"), key=lambda r: r["started_at"])
    assert [r["status"] for r in rows] == [200, 200, 429]
    refused = rows[-1]
    assert refused["upstream_status"] is None and refused["output"] is None
    assert refused["error"] == "refused: budget output_tokens spent"
    assert told == [("solo", "w1", "output_tokens")]
    # The overshoot is on record: the call that crossed the limit counted whole.
    totals = ledger.totals()
    assert totals["seats"]["solo/w1"]["output_tokens"] == 2 * out > limit
    assert ledger.seat_spent("solo", "w1")["spent"] == 2 * out


def _calls(proxy: ModelProxy, tokens: dict[str, str], order: list[str]) -> list[int]:
    _, _, path, body, _ = VENDORS["anthropic"]
    return [_post(proxy, path, body, {"x-api-key": tokens[name]})[0] for name in order]


@pytest.mark.parametrize("scope", [PER_ARM, PER_SEAT])
def test_per_arm_budgets_are_a_pool_per_seat_budgets_are_each_seats(scope):
    out = _first_output("anthropic")
    limit = out + out // 2  # two calls of one seat, or one each of two seats, cross it
    ledger = SpendingLedger([Limit("output_tokens", limit, scope)])
    endpoint = ENDPOINTS["anthropic"](session_script("anthropic"), api_key=KEY)
    with endpoint, ModelProxy(endpoint.url, KEY, get_api("anthropic"), spending=ledger) as proxy:
        tokens = {
            "w1": proxy.add_seat("swarm", "w1"),
            "w2": proxy.add_seat("swarm", "w2"),
            "solo": proxy.add_seat("solo", "w1"),
        }
        statuses = _calls(proxy, tokens, ["w1", "w2", "solo", "w2", "w1", "solo"])
        spent = {name: ledger.spent(token) for name, token in tokens.items()}
    if scope == PER_ARM:
        # w1 and w2 together crossed the swarm's pool: both refused after; solo has its own.
        assert statuses == [200, 200, 200, 429, 429, 200], statuses
        assert spent == {"w1": "output_tokens", "w2": "output_tokens", "solo": "output_tokens"}
    else:
        # Each seat had one call under its own limit, then a second that crossed it.
        assert statuses == [200, 200, 200, 200, 200, 200], statuses
        assert spent == {"w1": "output_tokens", "w2": "output_tokens", "solo": "output_tokens"}
        assert ledger.totals()["arms"]["swarm"]["output_tokens"] == 4 * out
    assert ledger.seat_spent("swarm", "w1")["scope"] == scope


def test_the_cost_is_estimated_from_the_price_table():
    prices = {
        "claude-x": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75},
        "default": {"input": 100.0, "output": 100.0},
    }
    ledger = ledger_from([Limit("cost_usd", 1.0, PER_SEAT)], prices)
    endpoint = ENDPOINTS["anthropic"](session_script("anthropic"), api_key=KEY)
    with endpoint, ModelProxy(endpoint.url, KEY, get_api("anthropic"), spending=ledger) as proxy:
        token = proxy.add_seat("solo", "w1")
        assert _calls(proxy, {"w1": token}, ["w1"]) == [200]
    (reply,) = endpoint.replies
    usage = reply.usage
    model_price = price_for(ledger.prices, reply.model)
    assert model_price is not None
    want = (
        usage["input"] * model_price.input
        + usage.get("cache_read", 0) * (model_price.cache_read or model_price.input)
        + usage.get("cache_write", 0) * (model_price.cache_write or model_price.input)
        + usage["output"] * model_price.output
    ) / 1e6
    got = ledger.totals()["seats"]["solo/w1"]["cost_usd"]
    assert got == pytest.approx(want, abs=1e-6) and got > 0
    assert ledger.spent(token) is None  # well under a dollar


def test_prices_match_a_dated_release_and_fall_back_to_the_default():
    table = {
        "gpt-5": Price(1.25, 10.0),
        "gpt-5-mini": Price(0.25, 2.0),
        "default": Price(9.0, 9.0),
    }
    assert price_for(table, "gpt-5-mini-2025-08-07") == table["gpt-5-mini"]  # longest prefix
    assert price_for(table, "gpt-5-2025-08-07") == table["gpt-5"]
    assert price_for(table, "some-other-model") == table["default"]
    assert price_for({"gpt-5": Price(1, 1)}, "claude") is None
    ledger = SpendingLedger([Limit("cost_usd", 0.5)], {"gpt-5": Price(1.0, 2.0)})
    ledger.add_seat("t", "solo", "w1")

    class _Usage:
        model, input, cache_read, cache_write, output = "unpriced-model", 10**6, 0, 0, 10**6

    ledger.add("t", _Usage())
    # An unpriced model costs nothing here: the settings require a default price for cost_usd.
    assert ledger.totals()["unpriced_models"] == ["unpriced-model"]
    assert (
        ledger.spent("t") is None and ledger.totals()["seats"]["solo/w1"]["input_tokens"] == 10**6
    )
    assert ledger.spent("unknown-token") is None


def test_limits_refuse_unknown_budgets_and_scopes():
    with pytest.raises(ValueError, match="budget 'evaluations'"):
        Limit("evaluations", 3)
    with pytest.raises(ValueError, match="scope"):
        Limit("output_tokens", 3, "per_team")
