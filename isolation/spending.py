"""Token and cost budgets of a run's seats, counted where the seats cannot dodge them: at the
model proxy (:mod:`isolation.model_proxy`), from the usage the vendor's own responses reported
(what the proxy reads for each :class:`~isolation.model_proxy.ModelCall`), never from the
CLI's records.

A :class:`SpendingLedger` knows each seat token's (arm, seat), the limits (``output_tokens``,
``input_tokens``, ``cost_usd``; each counted per arm, a pool its seats share, or per seat) and
the price table the cost is estimated from. The proxy adds every answered call's usage
(:meth:`SpendingLedger.add`) and, before forwarding a seat's request, asks
:meth:`SpendingLedger.spent` whether one of that seat's budgets is exhausted (its arm's pool
counts for a per-arm budget); if so the seat gets its vendor's quota error instead.

Counting: ``output_tokens`` is every generated token (reasoning included); ``input_tokens``
every token the model read (uncached, cache reads and cache writes); ``cost_usd`` the table's
USD per million tokens (an estimate: list prices, not an invoice). Usage is known when a
response ends, so calls in flight when a limit is crossed finish and their tokens count: a
budget can be overshot by those calls (the totals say by how much).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The budgets the proxy enforces (``budget.evaluations`` is the submission gateway's).
TOKEN_BUDGETS = ("output_tokens", "input_tokens", "cost_usd")
PER_ARM, PER_SEAT = "per_arm", "per_seat"
SCOPES = (PER_ARM, PER_SEAT)
#: The price of a model the table does not name.
DEFAULT_PRICE = "default"


class Usage(Protocol):
    """The tokens one response reported (a ``ModelCall``'s usage: None where not reported)."""

    model: str
    input: int | None
    cache_read: int | None
    cache_write: int | None
    output: int | None


@dataclass(frozen=True)
class Price:
    """USD per million tokens of one model; a cache price of None is the input price."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float:
        """The estimated USD cost of ``usage``."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        return (
            _n(usage.input) * self.input
            + _n(usage.cache_read) * read
            + _n(usage.cache_write) * write
            + _n(usage.output) * self.output
        ) / 1e6


def price_for(prices: Mapping[str, Price], model: str) -> Price | None:
    """The price of ``model``: its own entry, else the longest entry it starts with (a dated
    release of a named model), else :data:`DEFAULT_PRICE`'s; None without any."""
    if model in prices:
        return prices[model]
    named = [k for k in prices if k != DEFAULT_PRICE and model.startswith(k)]
    if named:
        return prices[max(named, key=len)]
    return prices.get(DEFAULT_PRICE)


@dataclass(frozen=True)
class Limit:
    """One budget: its name (:data:`TOKEN_BUDGETS`), limit and scope (:data:`SCOPES`)."""

    budget: str
    limit: float
    scope: str = PER_ARM

    def __post_init__(self) -> None:
        if self.budget not in TOKEN_BUDGETS:
            raise ValueError(f"budget {self.budget!r}: one of {', '.join(TOKEN_BUDGETS)}")
        if self.scope not in SCOPES:
            raise ValueError(f"budget scope {self.scope!r}: one of {', '.join(SCOPES)}")


@dataclass
class Spend:
    """What an arm or a seat spent so far."""

    output_tokens: int = 0
    input_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    def value(self, budget: str) -> float:
        return float(getattr(self, budget))

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "calls": self.calls,
        }


@dataclass
class SpendingLedger:
    """Thread-safe: the proxy's request threads add and ask, the runner reads.

    Args:
        limits: the budgets (none: nothing is ever spent).
        prices: model name -> :class:`Price` (``cost_usd`` only).
    """

    limits: list[Limit]
    prices: Mapping[str, Price] = field(default_factory=dict)
    _seats: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)
    _by_seat: dict[tuple[str, str], Spend] = field(default_factory=dict, repr=False)
    _by_arm: dict[str, Spend] = field(default_factory=dict, repr=False)
    # (arm, seat) -> when the proxy first refused it a request for a spent budget.
    _refused: dict[tuple[str, str], float] = field(default_factory=dict, repr=False)
    # (arm, seat) -> what the first exhausted budget was when first seen spent.
    _ended: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict, repr=False)
    unpriced: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_seat(self, token: str, arm: str, agent: str) -> None:
        """Count ``token``'s calls as (``arm``, ``agent``)'s (a resumed run's new token for a
        seat adds to what the seat spent before)."""
        with self._lock:
            self._seats[token] = (arm, agent)
            self._by_seat.setdefault((arm, agent), Spend())
            self._by_arm.setdefault(arm, Spend())

    def add(self, token: str, usage: Usage) -> None:
        """Count one answered call's usage for the seat of ``token`` (unknown tokens: none)."""
        with self._lock:
            seat = self._seats.get(token)
        if seat is not None:
            self.add_for(seat[0], seat[1], usage)

    def add_for(self, arm: str, agent: str, usage: Usage) -> None:
        """Count one call's usage for (``arm``, ``agent``) (a resumed run's recorded calls)."""
        if usage.output is None and usage.input is None:
            return
        price = price_for(self.prices, usage.model or "")
        cost = price.cost(usage) if price is not None else 0.0
        out = _n(usage.output)
        read = _n(usage.input) + _n(usage.cache_read) + _n(usage.cache_write)
        with self._lock:
            if price is None and any(b.budget == "cost_usd" for b in self.limits):
                self.unpriced.add(usage.model or "")
            for spend in (
                self._by_seat.setdefault((arm, agent), Spend()),
                self._by_arm.setdefault(arm, Spend()),
            ):
                spend.output_tokens += out
                spend.input_tokens += read
                spend.cost_usd += cost
                spend.calls += 1

    def _exhausted(self, arm: str, agent: str) -> dict[str, Any] | None:
        """The first budget spent for the seat (lock held), as the lifecycle event says it."""
        for limit in self.limits:
            if limit.scope == PER_SEAT:
                spend = self._by_seat.get((arm, agent)) or Spend()
            else:
                spend = self._by_arm.get(arm) or Spend()
            spent = spend.value(limit.budget)
            if spent >= limit.limit:
                cost = limit.budget == "cost_usd"
                return {
                    "budget": limit.budget,
                    "spent": round(spent, 6) if cost else int(spent),
                    "limit": limit.limit if cost else int(limit.limit),
                    "scope": limit.scope,
                }
        return None

    def seat_spent(self, arm: str, agent: str) -> dict[str, Any] | None:
        """Why (``arm``, ``agent``) may call the model no more (``budget``, ``spent``,
        ``limit``, ``scope``, ``at``: when first seen spent), or None."""
        with self._lock:
            if (arm, agent) in self._ended:
                return dict(self._ended[(arm, agent)])
            found = self._exhausted(arm, agent)
            if found is not None:
                self._ended[(arm, agent)] = found = {**found, "at": time.time()}
                return dict(found)
        return None

    def spent(self, token: str) -> str | None:
        """The name of the first budget exhausted for ``token``'s seat (its arm's pool counts
        for a per-arm budget), or None (also for an unknown token)."""
        with self._lock:
            seat = self._seats.get(token)
        if seat is None:
            return None
        found = self.seat_spent(*seat)
        return None if found is None else str(found["budget"])

    def note_refused(self, arm: str, agent: str, budget: str = "") -> None:
        """The proxy refused the seat a request for a spent budget: it has asked for more."""
        with self._lock:
            self._refused.setdefault((arm, agent), time.time())

    def refused(self, arm: str, agent: str) -> bool:
        """Whether the proxy refused the seat a request since its budget was spent."""
        with self._lock:
            return (arm, agent) in self._refused

    def totals(self) -> dict[str, Any]:
        """What the meta records: the spend per arm and per seat, the limits, unpriced
        models."""
        with self._lock:
            return {
                "limits": [vars(limit) for limit in self.limits],
                "arms": {arm: s.to_dict() for arm, s in sorted(self._by_arm.items())},
                "seats": {
                    f"{arm}/{agent}": spend.to_dict()
                    for (arm, agent), spend in sorted(self._by_seat.items())
                },
                "unpriced_models": sorted(self.unpriced),
            }


def ledger_from(
    limits: Iterable[Limit], prices: Mapping[str, Mapping[str, Any]] | None = None
) -> SpendingLedger:
    """A ledger from plain values (a config's ``budget.prices``: model -> input, output and
    optional cache_read/cache_write USD per million tokens)."""
    table = {
        str(model): Price(
            float(p["input"]),
            float(p["output"]),
            None if p.get("cache_read") is None else float(p["cache_read"]),
            None if p.get("cache_write") is None else float(p["cache_write"]),
        )
        for model, p in (prices or {}).items()
    }
    return SpendingLedger(list(limits), table)


def _n(value: int | None) -> int:
    return int(value or 0)


__all__ = [
    "DEFAULT_PRICE",
    "PER_ARM",
    "PER_SEAT",
    "SCOPES",
    "TOKEN_BUDGETS",
    "Limit",
    "Price",
    "Spend",
    "SpendingLedger",
    "ledger_from",
    "price_for",
]
