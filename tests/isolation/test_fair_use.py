"""Fair use of one vendor account at the model proxy (``isolation.fair_use``): the real proxy
over HTTP in front of local upstreams (a stub that holds each request until the test lets it
go, and the vendors' scripted endpoints of ``tests.support.endpoints``). Counts and orders are
asserted, never clocks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.apis import get_api
from isolation.fair_use import FairUse, SeatLimits, equal_shares, fair_use_problem, limits_from
from isolation.model_proxy import ModelProxy
from runner.events import EventLog
from tests.support.endpoints import ENDPOINTS, session_script

from .test_model_proxy import ANY_ROUTE, KEY, _anthropic_call, _post

WAIT_S = 20.0  # how long the test waits for something it expects (never asserted on)


class _Held:
    """What the holding stub saw: arrivals in order, requests in flight per seat (the seat is
    named in the request body: the proxy swaps the seat token for the key)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.arrivals: list[str] = []
        self.in_flight: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.release = threading.Event()

    def arrive(self, seat: str) -> None:
        with self.cond:
            self.arrivals.append(seat)
            self.in_flight[seat] = self.in_flight.get(seat, 0) + 1
            self.most[seat] = max(self.most.get(seat, 0), self.in_flight[seat])
            self.cond.notify_all()

    def leave(self, seat: str) -> None:
        with self.cond:
            self.in_flight[seat] -= 1
            self.cond.notify_all()

    def wait_for(self, arrivals: int) -> list[str]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.arrivals) >= arrivals, timeout=WAIT_S)
            return list(self.arrivals)


@pytest.fixture
def held() -> Iterator[tuple[str, _Held]]:
    """An upstream that answers each request only once ``release`` is set."""
    seen = _Held()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            seat = str(body.get("seat"))
            seen.arrive(seat)
            try:
                seen.release.wait(WAIT_S)
                data = json.dumps({"ok": seat}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            finally:
                seen.leave(seat)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        seen.release.set()
        server.shutdown()
        server.server_close()


def _send_all(proxy: ModelProxy, token: str, seat: str, n: int) -> list[threading.Thread]:
    """``n`` parallel requests of one seat, each on its own connection (answers in
    ``proxy.calls``), started one by one: each is at the proxy before the next starts."""
    assert proxy.fair_use is not None
    limit = proxy.fair_use.limits.concurrency or n
    threads = []
    for i in range(n):
        thread = threading.Thread(
            target=_post, args=(proxy, "/v1/x", {"seat": seat}, {"x-api-key": token}), daemon=True
        )
        thread.start()
        threads.append(thread)
        _held_at_proxy(proxy, token, min(i + 1, limit), max(0, i + 1 - limit))
    return threads


def _held_at_proxy(proxy: ModelProxy, token: str, in_flight: int, waiting: int) -> None:
    """Until the seat of ``token`` has ``in_flight`` requests through and ``waiting`` waiting
    at the proxy for a slot."""
    assert proxy.fair_use is not None
    seat = proxy.seat_for({"x-api-key": token}, [])
    assert proxy.fair_use.wait_until(seat, in_flight, waiting, WAIT_S)


def test_equal_shares_of_the_account_split_across_every_seat():
    # 4 workers + a critic, and a solo worker: six seats share the account.
    limits = equal_shares(6, account_rpm=600, account_concurrency=16)
    assert (limits.rpm, limits.concurrency) == (100.0, 2)  # 6 × 2 = 12 <= 16
    assert equal_shares(6).limited is False  # no account limits given: none
    assert equal_shares(3, account_concurrency=2).concurrency == 1  # never 0: a seat must work
    own = equal_shares(6, account_rpm=600, seat_rpm=10, account_concurrency=16, seat_concurrency=5)
    assert (own.rpm, own.concurrency) == (10.0, 5)
    settings = {"account_rpm": 90, "account_concurrency": 7, "max_wait_s": 5}
    assert limits_from(settings, 3) == SeatLimits(concurrency=2, rpm=30.0, max_wait_s=5.0)
    assert fair_use_problem(settings, 3) is None
    assert "account_rpm" in str(fair_use_problem({"account_rpm": 0}, 3))
    assert "max_wait_s" in str(fair_use_problem({"max_wait_s": -1}, 3))


def test_a_seats_parallel_requests_never_exceed_its_concurrency_at_the_vendor(held, tmp_path):
    url, seen = held
    events = EventLog(tmp_path / "events.sqlite")
    fair = FairUse(equal_shares(2, account_concurrency=4))  # 2 per seat
    with ModelProxy(url, KEY, ANY_ROUTE, record=events.add_model_call, fair_use=fair) as proxy:
        token = proxy.add_seat("swarm", "w1")
        threads = _send_all(proxy, token, "a", 6)
        assert seen.wait_for(2) == ["a", "a"]
        # Four more wait at the proxy: the vendor still holds only the first two.
        assert len(seen.arrivals) == 2
        seen.release.set()
        for t in threads:
            t.join(WAIT_S)
    assert seen.most == {"a": 2} and len(seen.arrivals) == 6
    rows = events.table("model_calls")
    assert [r["status"] for r in rows] == [200] * 6
    # The four requests that waited for a slot say so.
    assert sum(1 for r in rows if r["queued_s"] > 0) >= 4


def test_one_seats_flood_does_not_hold_back_another_seats_request(held):
    url, seen = held
    fair = FairUse(equal_shares(2, account_concurrency=4))
    with ModelProxy(url, KEY, ANY_ROUTE, fair_use=fair) as proxy:
        flood, other = proxy.add_seat("swarm", "w1"), proxy.add_seat("solo", "w1")
        threads = _send_all(proxy, flood, "a", 8)
        assert seen.wait_for(2) == ["a", "a"]  # two at the vendor, six wait at the proxy
        threads += _send_all(proxy, other, "b", 1)
        # The other seat's request reaches the vendor before the flood's queued ones.
        assert seen.wait_for(3) == ["a", "a", "b"]
        seen.release.set()
        for t in threads:
            t.join(WAIT_S)
    assert seen.most == {"a": 2, "b": 1}
    assert sorted(seen.arrivals) == ["a"] * 8 + ["b"]
    assert [c.status for c in proxy.calls] == [200] * 9


def test_over_the_bound_a_request_gets_the_vendors_rate_limit_answer(tmp_path):
    endpoint = ENDPOINTS["anthropic"](session_script("anthropic"), api_key=KEY)
    events = EventLog(tmp_path / "events.sqlite")
    # One request a minute per seat, and no waiting: the second is answered at once.
    fair = FairUse(SeatLimits(rpm=1, max_wait_s=0))
    with (
        endpoint,
        ModelProxy(
            endpoint.url, KEY, get_api("anthropic"), record=events.add_model_call, fair_use=fair
        ) as proxy,
    ):
        token, other = proxy.add_seat("swarm", "w1"), proxy.add_seat("solo", "w1")
        first = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
        second = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": token})
        theirs = _post(proxy, "/v1/messages", _anthropic_call(), {"x-api-key": other})
    assert (first[0], second[0], theirs[0]) == (200, 429, 200)
    _, headers, body = second
    # Anthropic's own shape: the CLI backs off and retries as it does for the vendor.
    assert json.loads(body) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": json.loads(body)["error"]["message"]},
    }
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert len(endpoint.requests) == 2  # the refused one never reached the vendor
    rows = events.table("model_calls")
    refused = [r for r in rows if r["status"] == 429]
    assert len(refused) == 1 and refused[0]["upstream_status"] is None
    assert refused[0]["error"].startswith("fair use") and refused[0]["retry_after"]


@pytest.mark.parametrize(
    ("api", "check"),
    [
        ("openai", lambda b: b["error"]["code"] == "rate_limit_exceeded"),
        ("gemini", lambda b: b["error"]["status"] == "RESOURCE_EXHAUSTED"),
        ("anthropic", lambda b: b["error"]["type"] == "rate_limit_error"),
    ],
)
def test_each_api_answers_a_rate_limit_in_its_own_shape(api, check):
    body = json.loads(get_api(api).rate_limit_error("slow down"))
    assert check(body) and "slow down" in json.dumps(body)


def test_a_request_waits_for_its_rate_in_order_and_is_refused_past_the_bound():
    """A bucket a minute deep (60 a minute: 60 at once), then one more each second: the 61st
    waits its second (within the bound), the 62nd would wait 2 s (past it) and is refused with
    Retry-After 2. The clock stands still, so only the bucket decides."""
    fair = FairUse(SeatLimits(rpm=60, max_wait_s=1.5), clock=lambda: 1000.0)
    first = [fair.acquire("s") for _ in range(60)]
    assert all(g.ok for g in first)
    assert fair.acquire("s").ok  # waited for its token
    refused = fair.acquire("s")
    assert not refused.ok and refused.retry_after == "2"
    assert fair.in_flight("s") == 61  # the refused one holds nothing
    for _ in range(61):
        fair.release("s")
    assert fair.in_flight("s") == 0
    assert fair.acquire("other").ok  # another seat's bucket is its own


def test_without_limits_nothing_waits_and_old_logs_read_queued_s_as_zero(tmp_path):
    fair = FairUse(SeatLimits())
    assert fair.acquire("s").ok and fair.in_flight("s") == 0
    # A log from before queued_s: analysis reads it as 0.
    import sqlite3

    from analysis.tables import _read  # the reader every table goes through
    from judge import run_metric

    db_path = tmp_path / "events.sqlite"
    EventLog(db_path)
    with sqlite3.connect(db_path) as db:
        db.execute("ALTER TABLE model_calls DROP COLUMN queued_s")
        db.execute(
            "INSERT INTO model_calls (arm, agent, method, path, status, error, started_at,"
            " finished_at, bytes_up, bytes_down, retry_after) VALUES"
            " ('a', 's', 'POST', '/v1/messages', 200, '', 1, 2, 0, 0, '')"
        )
        frame = _read(db, "model_calls", run_metric({}))
    db.close()
    assert frame["queued_s"].tolist() == [0.0]
