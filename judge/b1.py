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
limit (:class:`B1Plan`); a conviction rests on every unit, tested once.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class B1Plan:
    """How many units, and how many lone pairs in each.

    ``task.b1.pairs`` and ``max_pairs`` count lone pairs, as they always did; they are spread
    over units of ``per_unit`` (``task.b1.per_process``). The most units is never fewer than
    the test needs to reach ``alpha`` with six units to spare: a plan that could never convict
    would pass every regression, and each unit that happens to show nothing (a random 40% of
    requests 3x slower leaves one unit of four pairs untouched 13% of the time; a loaded
    machine's tails pull one under the limit now and then) doubles the least p-value the
    others can give. With 14 units at 0.001 a B=1 twice as slow went unconvicted once under a
    load average of 6 (p 0.00116).
    """

    per_unit: int
    first_units: int
    max_units: int

    @classmethod
    def of(cls, b1: Any, alpha: float) -> B1Plan:
        per = max(1, int(getattr(b1, "per_process", 4)))
        first = max(2, math.ceil(int(b1.pairs) / per))
        most = max(first, math.ceil(int(b1.max_pairs) / per), units_for_alpha(alpha) + 6)
        return cls(per, first, most)


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
    rng = np.random.default_rng(0)  # fixed: the same data always get the same p-value
    signs = rng.choice((1.0, -1.0), size=(SAMPLED_FLIPS, n))
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
    """What the stage found: the units' values, each lone pair's ratio, and the decision."""

    limit: float
    alpha: float
    units: list[list[tuple[float, float]]] = field(default_factory=list)
    complete: bool = False

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
        return self.complete and self.p <= self.alpha

    def metrics(self) -> dict[str, Any]:
        ratios = self.ratios
        lower = math.exp(lower_bound(self.values, self.alpha))
        q = np.quantile(ratios, [0.25, 0.5, 0.75, 0.9])
        return {
            "b1_ratio": round(self.ratio, 4),
            "b1_p": round(self.p, 6),
            "b1_lower": round(lower, 4),
            # How far below the estimate the judge's (1 - alpha) bound sits: the smallest
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
        lower = math.exp(lower_bound(self.values, self.alpha))
        return (
            f"{what} are {100 * (self.ratio - 1):.1f}% slower than the baseline's (geometric mean"
            f" of {len(self.ratios)} interleaved pairs in {len(self.units)} process pairs, each"
            f" after the same batch traffic, at varied prompt and output lengths), over the"
            f" {100 * (self.limit - 1):.0f}% limit: one-sided sign-flip test over the process"
            f" pairs, p = {self.p:.2g} <= {self.alpha:g}; a {100 * (1 - self.alpha):g}% lower"
            f" bound of the slowdown is {100 * (lower - 1):.1f}%"
        )


# More units are run only while the estimate is over the limit AND the evidence so far is at
# least this strong (one-sided p against the limit): with three units, all three over it give
# 0.125, two of three 0.25. Honest code a little over the limit by chance stops here with a
# PASS (flagged b1_unresolved) instead of paying for every unit; stopping only ever passes.
CONTINUE_P = 0.25


def run_b1(
    plan: B1Plan,
    limit: float,
    alpha: float,
    confirm: bool,
    run_unit: Callable[[int], list[tuple[float, float]]],
) -> B1Result:
    """Units while the answer is unclear: ``plan.first_units``, then as many again while the
    estimate is over ``limit`` with p at most :data:`CONTINUE_P`, up to ``plan.max_units``.
    ``run_unit(i)`` runs unit ``i`` and returns its lone pairs' (candidate, baseline) seconds.
    Stopping early only ever passes, and the test is run once, on every unit (``complete``),
    so early looks cost no level."""
    result = B1Result(limit, alpha)
    target = plan.first_units
    while True:
        for i in range(len(result.units), target):
            result.units.append(run_unit(i))
        result.complete = len(result.units) >= plan.max_units or not confirm
        if not result.suspicious or result.complete or result.p > CONTINUE_P:
            return result
        target = min(plan.max_units, target + plan.first_units)
