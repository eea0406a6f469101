"""Single-sequence speed where traffic meets it: the B=1 stage's plan and its test, both kinds.

The spec bounds a lone request's time as the engine serves it, not the median request of a
process that never served a batch. So the stage runs *units*: in the decode kind a fresh
candidate process and a fresh baseline process, in the server kind the evaluation's two
servers. Each unit gives both sides the same traffic: a batch of every size the task uses (or
a concurrent burst), each right before a lone request of its own, among ``per_unit`` lone
requests (:func:`unit_traffic`); every lone request at a shape drawn across the ranges the
task uses (:func:`lone_shapes`), candidate and baseline back to back on the same prompt, who
goes first drawn by a coin.

The test (:func:`sign_flip_p`) sees the whole distribution: a unit's value is the mean of its
paired log-ratios (tails included: 40% of requests 3x slower moves it by ~0.44 while the median
stays put), and the units' signs are flipped as wholes. Why whole units: on a loaded machine a
process runs a few to ~10% faster or slower than an identical one for its whole life, so pairs
sharing two processes share that offset and are not independent. For unmodified code, the
candidate and baseline of a unit are exchangeable (same code, same history, order by coin), so
a unit's value is symmetric about zero whatever the offsets and the noise's tails, and flipping
whole units gives an exact one-sided level. More units are run while the estimate is over the
limit (:class:`B1Plan`); the test may convict at a few fixed looks, each at its share of the
level, on every unit run so far.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Up to this many units the sign-flip distribution is enumerated exactly; beyond, sampled.
EXACT_UNITS = 16
SAMPLED_FLIPS = 1 << 16


def units_for_alpha(alpha: float) -> int:
    """The fewest units whose most extreme sign pattern reaches level ``alpha`` (2^-n <= alpha)."""
    return max(1, math.ceil(math.log2(1.0 / alpha)))


# Conviction looks: at ``m``, ``2 m`` and ``3 m`` units, each tested at ``alpha / LOOKS`` (a
# union bound over fixed looks, so the level holds whatever made the run go on). A slowdown in a
# fraction of requests varies a lot from unit to unit: 40% of requests 3x slower (a geometric
# 1.55x) against a 1.3x limit was convicted in 16 units only about half the time, in ~30 units
# (mean) by this plan nearly always; a uniform 2x is convicted at the first look as before.
LOOKS = 3


@dataclass(frozen=True)
class B1Plan:
    """How many units, how many lone pairs in each, and where the test may convict.

    ``task.b1.pairs`` and ``max_pairs`` count lone pairs, spread over units of ``per_unit``
    (``task.b1.per_process``): ``pairs`` are run first, ``max_pairs`` by the first look. The
    first look is never before the test can reach its level with four units to spare
    (``units_for_alpha(alpha / LOOKS) + 4``, 16 at 0.001): a plan that could never convict
    would pass every regression, and each unit that happens to show nothing (a random 40% of
    requests 3x slower leaves one unit of four pairs untouched 13% of the time; a loaded
    machine's tails pull one under the limit now and then) doubles the least p-value the
    others can give. With 14 units at 0.001 a B=1 twice as slow went unconvicted once under a
    load average of 6 (p 0.00116). The later looks come at two and three times the first.
    """

    per_unit: int
    first_units: int
    looks: tuple[int, ...]

    @property
    def max_units(self) -> int:
        return self.looks[-1]

    @classmethod
    def of(cls, b1: Any, alpha: float) -> B1Plan:
        per = max(1, int(getattr(b1, "per_process", 4)))
        first = max(2, math.ceil(int(b1.pairs) / per))
        look = max(first, math.ceil(int(b1.max_pairs) / per), units_for_alpha(alpha / LOOKS) + 4)
        return cls(per, first, tuple(look * k for k in range(1, LOOKS + 1)))


def lone_shapes(task: Any) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """Where lone requests are drawn: the prompt-length ranges of the cases, the timing batch
    and ``b1`` (one picked per request: each is a range the task's generator already serves),
    and every output length from the least to the most of theirs."""
    groups = [*task.cases, task.timing, task.b1]
    ranges = sorted({(int(g.prompt_len[0]), int(g.prompt_len[1])) for g in groups})
    steps = [int(g.new_tokens) for g in groups]
    return ranges, (min(steps), max(steps))


def draw_lone(task: Any, rng: np.random.Generator) -> tuple[list[int], int]:
    """One lone request's (prompt_len range, new_tokens), drawn by :func:`lone_shapes`."""
    ranges, (lo, hi) = lone_shapes(task)
    prompt_len = ranges[int(rng.integers(len(ranges)))]
    return list(prompt_len), int(rng.integers(lo, hi + 1))


def unit_traffic(rng: np.random.Generator, per_unit: int, sizes: Sequence[int]) -> dict[int, int]:
    """Unit traffic: {lone request index: the batch size served right before it}. Every batch
    size the task uses (up to ``per_unit`` of them, the largest always) is served once in every
    unit, each right before a lone request of its own, at places drawn per unit; so each unit
    meets a lone request after each size (padding to any one size slows every unit, not a
    fraction of them the test cannot convict on) and, when a place is left over, one before
    any batch."""
    batched = sorted({s for s in sizes if s > 1})
    if not batched:
        return {}
    if len(batched) > per_unit:
        others = rng.permutation(batched[:-1])[: per_unit - 1]
        batched = [*others.tolist(), batched[-1]]
    places = rng.permutation(per_unit)[: len(batched)]
    order = rng.permutation(len(batched))
    return {int(places[k]): int(batched[int(order[k])]) for k in range(len(batched))}


def unit_value(pairs: Sequence[tuple[float, float]]) -> float:
    """A unit's value: the mean log of candidate time over baseline time, over its lone pairs."""
    return float(np.mean([math.log(c / b) for c, b in pairs]))


@functools.lru_cache(maxsize=2)
def _sampled_signs(n: int) -> np.ndarray:
    """The sampled sign patterns for ``n`` units, drawn from a fixed seed (the same data always
    get the same p-value) and kept: :func:`lower_bound` asks for the same ``n`` ~40 times."""
    rng = np.random.default_rng(0)
    return rng.choice((1.0, -1.0), size=(SAMPLED_FLIPS, n))


def sign_flip_p(values: Sequence[float], centre: float) -> float:
    """One-sided p-value of "the units' values are symmetric about ``centre`` or less" against
    "their mean is over ``centre``": the share of sign patterns (each unit's deviation from
    ``centre`` kept or flipped, as a whole) whose sum is at least the observed one. Exact up to
    :data:`EXACT_UNITS` units, else from :data:`SAMPLED_FLIPS` random patterns (counted with
    the observed one, so never below ``1 / (SAMPLED_FLIPS + 1)``)."""
    d = np.asarray(values, dtype=float) - centre
    observed = float(d.sum())
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    n = len(d)
    if n == 0:
        return 1.0
    if n <= EXACT_UNITS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return float(np.mean(signs @ d >= observed - tol))
    signs = _sampled_signs(n)
    hits = int(np.sum(signs @ d >= observed - tol))
    return (hits + 1) / (SAMPLED_FLIPS + 1)


def lower_bound(values: Sequence[float], alpha: float) -> float:
    """The greatest centre the test rejects at ``alpha`` (a ``1 - alpha`` lower confidence
    bound of the units' mean log-ratio); with too few units for that level, the least value
    (a weaker bound, never a stronger one)."""
    data = np.asarray(values, dtype=float)
    lo, hi = float(data.min()) - 1.0, float(data.max())
    if sign_flip_p(data, lo) > alpha:
        return float(data.min())
    for _ in range(40):  # p rises with the centre: bisect to ~1e-12 of the range
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sign_flip_p(data, mid) <= alpha else (lo, mid)
    return lo


@dataclass
class B1Result:
    """What the stage found: the units' values, each lone pair's ratio, and the decision.

    ``level`` is the test's level at each look (``alpha`` split over the looks); ``looked``
    says whether the last unit run completed a look (only then may the test convict)."""

    limit: float
    alpha: float
    level: float = 0.0
    units: list[list[tuple[float, float]]] = field(default_factory=list)
    looked: bool = False

    def __post_init__(self) -> None:
        self.level = self.level or self.alpha

    @property
    def values(self) -> list[float]:
        return [unit_value(u) for u in self.units]

    @property
    def ratios(self) -> list[float]:
        return [c / b for u in self.units for c, b in u]

    @property
    def ratio(self) -> float:
        """The geometric mean of the lone pairs' ratios, by unit: what the test is about."""
        return math.exp(float(np.mean(self.values)))

    @property
    def suspicious(self) -> bool:
        return self.ratio > self.limit

    @property
    def p(self) -> float:
        return sign_flip_p(self.values, math.log(self.limit))

    @property
    def proven(self) -> bool:
        return self.looked and self.p <= self.level

    def metrics(self) -> dict[str, Any]:
        ratios = self.ratios
        lower = math.exp(lower_bound(self.values, self.level))
        q = np.quantile(ratios, [0.25, 0.5, 0.75, 0.9])
        return {
            "b1_ratio": round(self.ratio, 4),
            "b1_p": round(self.p, 6),
            "b1_level": round(self.level, 6),
            "b1_lower": round(lower, 4),
            # How far below the estimate the judge's (1 - level) bound sits: the smallest
            # excess over the limit this evaluation could have convicted.
            "b1_resolution": round(self.ratio - lower, 4),
            "b1_ratio_median": round(float(q[1]), 4),
            "b1_ratio_q25": round(float(q[0]), 4),
            "b1_ratio_q75": round(float(q[2]), 4),
            "b1_ratio_q90": round(float(q[3]), 4),
            "b1_ratio_min": round(min(ratios), 4),
            "b1_ratio_max": round(max(ratios), 4),
            "b1_units": len(self.units),
            "b1_pairs": len(ratios),
        }

    def detail(self, what: str) -> str:
        """The WRONG's detail: judge-made numbers about the candidate's own times only."""
        lower = math.exp(lower_bound(self.values, self.level))
        split = "" if self.level == self.alpha else f" ({self.alpha:g} split over the looks)"
        return (
            f"{what} are {100 * (self.ratio - 1):.1f}% slower than the baseline's (geometric mean"
            f" of {len(self.ratios)} interleaved pairs in {len(self.units)} process pairs, each"
            f" after the same batch traffic, at varied prompt and output lengths), over the"
            f" {100 * (self.limit - 1):.0f}% limit: one-sided sign-flip test over the process"
            f" pairs, p = {self.p:.2g} <= {self.level:.2g}{split}; a"
            f" {100 * (1 - self.level):g}% lower bound of the slowdown is {100 * (lower - 1):.1f}%"
        )


def run_b1(
    plan: B1Plan,
    limit: float,
    alpha: float,
    confirm: bool,
    run_unit: Callable[[int], list[tuple[float, float]]],
) -> B1Result:
    """Units while the answer is unclear: ``plan.first_units``, then as many again while the
    estimate is over ``limit``, up to each of ``plan.looks`` in turn, where the test may convict
    at ``alpha / len(plan.looks)``. (An earlier rule also stopped once the one-sided p against
    the limit passed 0.25: a random 40% of requests 3x slower stopped after its first three
    units one time in three, a unit with no slow request in it being enough. Any estimate over
    the limit has p <= 0.5, so "p <= 0.5" is this rule.) Honest code over the limit by chance
    pays for more units and passes, flagged ``b1_unresolved``. Without ``confirm`` the first
    look is the only one, at ``alpha`` (it was once the first units alone: three units can
    never reach 0.001, so nothing was ever convicted). ``run_unit(i)`` runs unit ``i`` and
    returns its lone pairs' (candidate, baseline) seconds. Stopping early only ever passes."""
    looks = plan.looks if confirm else plan.looks[:1]
    result = B1Result(limit, alpha, level=alpha / len(looks))
    target = plan.first_units
    while True:
        for i in range(len(result.units), target):
            result.units.append(run_unit(i))
        n = len(result.units)
        result.looked = n in looks
        if result.proven or n >= looks[-1]:
            return result
        if not result.suspicious:
            return result
        target = min(next(look for look in looks if look > n), n + plan.first_units)
