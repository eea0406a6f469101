"""Fair use of one vendor account between the seats of a run, at the model proxy.

Every seat of a run (both arms) spends the same vendor account, whose rate limits are the
account's, not the seat's: one arm's flood would otherwise make the vendor refuse the other
arm's calls, and a refused call makes a CLI back off (time lost that the report would charge to
the wrong arm). So the proxy gives each seat its own limits:

- **concurrency**: at most this many of the seat's requests in flight at the vendor at once;
- **requests per minute**: a token bucket per seat, refilled at ``rpm / 60`` per second and as
  deep as one minute's share (the vendors' own limiters are token buckets of a minute's
  capacity, so the seats' buckets together never hold more than the account's).

By default each seat gets an equal share of the account's limits when they are given
(``isolation.fair_use.account_rpm``, ``account_concurrency``: :func:`equal_shares`), and no
limit when they are not. A request over its seat's limit **waits** for its slot (the wait is
the call's ``queued_s`` in ``model_calls``), because a refusal costs a CLI its back-off; only
when it would wait longer than ``max_wait_s`` does the proxy answer as the vendor does when
its rate limit is hit (429 with ``Retry-After``, the API object's own error shape), which the
CLIs already retry.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: How long a request may wait for its seat's slot before it is answered 429, by default.
MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class SeatLimits:
    """One seat's limits at the proxy (None: no such limit).

    Attributes:
        concurrency: requests of the seat in flight at the vendor at once.
        rpm: requests the seat may start per minute (a token bucket a minute deep).
        max_wait_s: the longest a request waits for its slot; beyond, it gets 429.
    """

    concurrency: int | None = None
    rpm: float | None = None
    max_wait_s: float = MAX_WAIT_S

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rpm is not None

    def to_dict(self) -> dict[str, float | int | None]:
        """What the run's meta records (``proxy.fair_use``)."""
        return {"concurrency": self.concurrency, "rpm": self.rpm, "max_wait_s": self.max_wait_s}


def equal_shares(
    seats: int,
    account_rpm: float | None = None,
    account_concurrency: int | None = None,
    seat_rpm: float | None = None,
    seat_concurrency: int | None = None,
    max_wait_s: float = MAX_WAIT_S,
) -> SeatLimits:
    """Each of ``seats`` seats' limits: a seat's own (``seat_*``) where given, else an equal
    share of the account's, else none.

    A share of concurrency is rounded down (the seats together never exceed the account) but
    is at least 1: a seat that may send nothing could not work at all, so with more seats than
    the account's concurrency the account may be exceeded, by at most one request per seat.

    Args:
        seats: every seat of the run, both arms counted.
        account_rpm: the account's requests per minute, or None.
        account_concurrency: the account's requests in flight at once, or None.
        seat_rpm: a seat's requests per minute (overrides the share).
        seat_concurrency: a seat's requests in flight (overrides the share).
        max_wait_s: the longest a request waits for its slot.

    Raises:
        ValueError: a limit that is not positive, or no seats to share among.
    """
    for name, value in (
        ("account_rpm", account_rpm),
        ("account_concurrency", account_concurrency),
        ("seat_rpm", seat_rpm),
        ("seat_concurrency", seat_concurrency),
    ):
        if value is not None and not value > 0:
            raise ValueError(f"fair_use.{name} must be > 0 (or null), not {value}")
    if max_wait_s < 0:
        raise ValueError(f"fair_use.max_wait_s must be >= 0, not {max_wait_s}")
    shared = account_rpm is not None or account_concurrency is not None
    if shared and seats < 1:
        raise ValueError("fair_use: an account's limits are shared among no seats")
    rpm = seat_rpm if seat_rpm is not None else (account_rpm / seats if account_rpm else None)
    concurrency = seat_concurrency
    if concurrency is None and account_concurrency is not None:
        concurrency = max(1, int(account_concurrency) // seats)
    return SeatLimits(
        concurrency=int(concurrency) if concurrency is not None else None,
        rpm=float(rpm) if rpm is not None else None,
        max_wait_s=float(max_wait_s),
    )


@dataclass
class Grant:
    """What a request got: its slot after ``waited_s`` (``ok``), or a refusal with the seconds
    after which to retry (``retry_after_s``)."""

    waited_s: float = 0.0
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.retry_after_s is None

    @property
    def retry_after(self) -> str:
        """The ``Retry-After`` header's value: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s or 0.0)))


@dataclass
class _Seat:
    """One seat's state: requests in flight, requests waiting for one of those slots, and its
    token bucket."""

    in_flight: int = 0
    waiting: int = 0
    tokens: float = 0.0
    refilled_at: float = 0.0


@dataclass
class FairUse:
    """Per-seat limits, shared by the proxy's request threads (thread-safe).

    Args:
        limits: every seat's limits (the same for all: equal shares).
        clock: monotonic seconds (a test may pass its own).
    """

    limits: SeatLimits
    clock: Callable[[], float] = time.monotonic
    _seats: dict[object, _Seat] = field(default_factory=dict, init=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)

    def _seat(self, key: object, now: float) -> _Seat:
        seat = self._seats.get(key)
        if seat is None:
            # A full bucket: a seat's first minute may use its whole share at once.
            seat = self._seats[key] = _Seat(tokens=self._depth, refilled_at=now)
        return seat

    @property
    def _depth(self) -> float:
        return max(1.0, self.limits.rpm or 0.0)

    def _refill(self, seat: _Seat, now: float) -> None:
        rate = (self.limits.rpm or 0.0) / 60.0
        seat.tokens = min(self._depth, seat.tokens + (now - seat.refilled_at) * rate)
        seat.refilled_at = now

    def acquire(self, key: object) -> Grant:
        """Wait (at most ``max_wait_s``) for a slot of seat ``key``: a request in flight under
        its concurrency and a token of its bucket. A granted slot must be given back with
        :meth:`release`; a refused one holds nothing."""
        limits = self.limits
        if not limits.limited:
            return Grant()
        start = self.clock()
        deadline = start + limits.max_wait_s
        with self._cond:
            seat = self._seat(key, start)
            if limits.concurrency is not None:
                seat.waiting += 1
                self._cond.notify_all()  # whoever watches the seat (wait_until)
                try:
                    while seat.in_flight >= limits.concurrency:
                        left = deadline - self.clock()
                        if left <= 0:
                            # A slot frees when one of the seat's calls ends: no telling when.
                            return Grant(self.clock() - start, retry_after_s=1.0)
                        self._cond.wait(left)
                finally:
                    seat.waiting -= 1
                    self._cond.notify_all()
            seat.in_flight += 1
            self._cond.notify_all()
            wait = 0.0
            if limits.rpm is not None:
                now = self.clock()
                self._refill(seat, now)
                wait = max(0.0, (1.0 - seat.tokens) * 60.0 / limits.rpm)
                if wait > 0 and now + wait > deadline:
                    seat.in_flight -= 1
                    self._cond.notify_all()
                    return Grant(now - start, retry_after_s=wait)
                # The token is taken now (the bucket may go below zero): requests waiting for
                # the rate keep their order, each a refill period after the one before.
                seat.tokens -= 1.0
        if wait > 0:
            time.sleep(wait)
        return Grant(self.clock() - start)

    def release(self, key: object) -> None:
        """Give back a slot :meth:`acquire` granted."""
        if self.limits.concurrency is None and self.limits.rpm is None:
            return
        with self._cond:
            seat = self._seats.get(key)
            if seat is not None and seat.in_flight > 0:
                seat.in_flight -= 1
            self._cond.notify_all()

    @contextmanager
    def slot(self, key: object) -> Iterator[Grant]:
        """:meth:`acquire` and, when granted, :meth:`release` on leaving."""
        grant = self.acquire(key)
        try:
            yield grant
        finally:
            if grant.ok:
                self.release(key)

    def in_flight(self, key: object) -> int:
        """Requests of seat ``key`` holding a slot now."""
        with self._cond:
            seat = self._seats.get(key)
            return seat.in_flight if seat is not None else 0

    def wait_until(self, key: object, in_flight: int, waiting: int, timeout: float) -> bool:
        """Block until seat ``key`` has ``in_flight`` requests holding a slot and ``waiting``
        waiting for one (or ``timeout`` seconds pass); True when it has them."""

        def reached() -> bool:
            seat = self._seats.get(key)
            return seat is not None and (seat.in_flight, seat.waiting) == (in_flight, waiting)

        with self._cond:
            return self._cond.wait_for(reached, timeout=timeout)


def limits_from(settings: Mapping[str, Any] | None, seats: int) -> SeatLimits:
    """Each seat's limits from the ``isolation.fair_use`` settings, for a run of ``seats``
    seats (both arms counted); no settings: no limits.

    Raises:
        ValueError: a limit that is not positive.
    """
    s = dict(settings or {})
    return equal_shares(
        seats,
        account_rpm=s.get("account_rpm"),
        account_concurrency=s.get("account_concurrency"),
        seat_rpm=s.get("seat_rpm"),
        seat_concurrency=s.get("seat_concurrency"),
        max_wait_s=float(s.get("max_wait_s", MAX_WAIT_S)),
    )


def fair_use_problem(settings: Mapping[str, Any] | None, seats: int) -> str | None:
    """Why the ``isolation.fair_use`` settings cannot be used, in one line, or None."""
    try:
        limits_from(settings, seats)
    except (TypeError, ValueError) as exc:
        return f"isolation.{exc}" if str(exc).startswith("fair_use") else f"isolation: {exc}"
    return None
