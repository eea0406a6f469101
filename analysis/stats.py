"""Statistics across seeds: spread per arm, exact tests, shift intervals, and an honest verdict.

The seed ran each group once and said so (section 9: "Part of the 10% gap is luck"). A sweep
gives a few seeds per arm; with so few, the first question is whether *any* test could tell
the arms apart, and the answer is often no (3 vs 3 seeds: the smallest possible exact p is
0.1). :func:`compare_arms` asks that question first and says "cannot_tell" rather than
pretending.

Everything here is distribution-free and exact by enumeration where the sizes allow; only numpy
is used. Inputs may be tok/s or ratios over the baseline, as long as both arms (and the judge's
noise) use the same unit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

__all__ = [
    "EXACT_MAX_TOTAL",
    "MONTE_CARLO_DRAWS",
    "MONTE_CARLO_SEED",
    "ArmComparison",
    "ArmSpread",
    "arm_spread",
    "compare_arms",
    "hodges_lehmann",
    "min_p_value",
    "noise_sigma",
    "permutation_test",
    "spread_test",
]

#: Largest n_a + n_b the permutation test enumerates exactly (C(20, 10) = 184,756 splits).
EXACT_MAX_TOTAL = 20
#: Random splits drawn when the sizes are too large to enumerate.
MONTE_CARLO_DRAWS = 100_000
#: Fixed seed so the same data always gives the same p-value (reports must be rebuildable).
MONTE_CARLO_SEED = 20_240_601
# Above this many pooled values the exact Mann-Whitney distribution is replaced by its normal
# approximation: the exact table is then both slow and no longer needed for accuracy.
_HL_EXACT_MAX_TOTAL = 100

Outcome = Literal["a_better", "b_better", "tie", "cannot_tell"]


def _values(name: str, values: Sequence[float], minimum: int = 1) -> np.ndarray:
    try:
        array = np.asarray([float(v) for v in values], dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of numbers: {exc}") from exc
    if array.size < minimum:
        raise ValueError(f"{name} needs at least {minimum} value(s), got {array.size}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must hold finite numbers only (no NaN or inf): {list(values)}")
    return array


def _fraction(name: str, value: float) -> float:
    number = float(value)
    if not 0 < number < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value!r}")
    return number


@dataclass(frozen=True)
class ArmSpread:
    """Where one arm's results lie across seeds (quartiles by linear interpolation)."""

    n: int
    median: float
    q25: float
    q75: float
    minimum: float
    maximum: float


def arm_spread(values: Sequence[float]) -> ArmSpread:
    """Summarise one arm's per-seed results.

    Args:
        values: One result per seed (tok/s or ratio); a single value is allowed.

    Returns:
        The count, median, quartiles, minimum and maximum.

    Raises:
        ValueError: ``values`` is empty or holds NaN/inf or non-numbers.
    """
    array = _values("values", values)
    q25, median, q75 = np.percentile(array, [25, 50, 75])
    return ArmSpread(
        n=int(array.size),
        median=float(median),
        q25=float(q25),
        q75=float(q75),
        minimum=float(array.min()),
        maximum=float(array.max()),
    )


def min_p_value(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value any exact test of n_a vs n_b values can reach.

    An exact (permutation or rank) test can do no better than find the observed split the most
    extreme of all C(n_a + n_b, n_a) splits, once per side: ``2 / C(n_a + n_b, n_a)``, capped
    at 1. For 3 vs 3 that is 2 / 20 = 0.1, so no test of three seeds per arm can ever reach
    p < 0.05, however large the gap; 4 vs 4 gives 2 / 70 ≈ 0.029.

    Args:
        n_a: Number of values in arm a (>= 1).
        n_b: Number of values in arm b (>= 1).

    Raises:
        ValueError: a size is below 1.
    """
    if int(n_a) != n_a or int(n_b) != n_b or n_a < 1 or n_b < 1:
        raise ValueError(f"sizes must be integers >= 1, got n_a={n_a!r}, n_b={n_b!r}")
    return min(1.0, 2.0 / math.comb(int(n_a) + int(n_b), int(n_a)))


def permutation_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided permutation p-value for the difference in means of ``a`` and ``b``.

    Under the null hypothesis (no difference between the arms) every split of the pooled values
    into groups of n_a and n_b is equally likely. The two-sided p-value is twice the smaller
    one-sided tail (``P(D >= observed)``, ``P(D <= observed)``), capped at 1. Doubling rather
    than counting ``|D| >= |observed|`` keeps the floor at exactly :func:`min_p_value` for
    unequal sizes too, so the decision rule in :func:`compare_arms` and this test agree; for
    equal sizes the two conventions give the same number.

    When ``n_a + n_b <= 20`` (:data:`EXACT_MAX_TOTAL`) every split is enumerated with
    :func:`itertools.combinations` and the p-value is exact. Above that it is a Monte-Carlo
    estimate from 100,000 random splits (:data:`MONTE_CARLO_DRAWS`) with a fixed seed
    (:data:`MONTE_CARLO_SEED`, so the same data always gives the same p), each tail estimated
    as ``(hits + 1) / (draws + 1)`` so the estimate is never 0.

    Example: ``[1, 2, 3]`` vs ``[4, 5, 6]`` is the most extreme of 20 splits: p = 2/20 = 0.1.

    Args:
        a: Arm a's values (>= 1).
        b: Arm b's values (>= 1).

    Returns:
        The p-value in (0, 1].

    Raises:
        ValueError: either arm is empty or holds NaN/inf.
    """
    xa = _values("a", a)
    xb = _values("b", b)
    n_a, n_b = xa.size, xb.size
    pooled = np.concatenate([xa, xb])
    # mean_a - mean_b is an increasing function of sum_a (the pooled total is fixed), so tails
    # of the sum are tails of the difference and the sums are cheaper and steadier to compare.
    observed = float(xa.sum())
    # Sums of the same values in another order can differ in the last bits; without a tolerance
    # the observed split could fail to count itself.
    tolerance = 1e-9 * max(1.0, float(np.abs(pooled).sum()))

    if n_a + n_b <= EXACT_MAX_TOTAL:
        index = np.fromiter(
            itertools.chain.from_iterable(itertools.combinations(range(n_a + n_b), n_a)),
            dtype=np.intp,
        ).reshape(-1, n_a)
        sums = pooled[index].sum(axis=1)
        upper = int(np.count_nonzero(sums >= observed - tolerance))
        lower = int(np.count_nonzero(sums <= observed + tolerance))
        return min(1.0, 2.0 * min(upper, lower) / sums.size)

    rng = np.random.default_rng(MONTE_CARLO_SEED)
    upper = lower = 0
    remaining = MONTE_CARLO_DRAWS
    # Chunks keep memory bounded for large arms while still drawing vectorised.
    chunk = max(1, min(remaining, 2_000_000 // (n_a + n_b)))
    while remaining:
        size = min(chunk, remaining)
        shuffled = rng.permuted(np.broadcast_to(pooled, (size, n_a + n_b)), axis=1)
        sums = shuffled[:, :n_a].sum(axis=1)
        upper += int(np.count_nonzero(sums >= observed - tolerance))
        lower += int(np.count_nonzero(sums <= observed + tolerance))
        remaining -= size
    return min(1.0, 2.0 * (min(upper, lower) + 1) / (MONTE_CARLO_DRAWS + 1))


def spread_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of "``a`` and ``b`` are equally spread": Brown-Forsythe's statistic
    (each value's absolute deviation from its own sample's median) under
    :func:`permutation_test`. NaN with fewer than two values on a side.

    Small samples tell little: six values a side with standard deviations 0.10 and 0.05 give
    p ~ 0.4. Printed beside two spreads, it keeps anyone from reading more into them.

    Args:
        a: One sample's values.
        b: The other's.

    Raises:
        ValueError: a value is NaN or infinite.
    """
    if len(a) < 2 or len(b) < 2:
        return math.nan
    xa, xb = _values("a", a), _values("b", b)
    return permutation_test(np.abs(xa - np.median(xa)), np.abs(xb - np.median(xb)))


def _mann_whitney_cdf(n_a: int, n_b: int) -> np.ndarray:
    """``cdf[u] = P(U <= u)`` for the Mann-Whitney U of n_a vs n_b under the null, exactly.

    Counts size-n_a subsets of the ranks 1..N by rank sum (U = rank sum - n_a(n_a+1)/2). Floats
    hold the counts: C(100, 50) ≈ 1e29 is far inside float range, and only ratios are used.
    """
    n = n_a + n_b
    top = n_a * (2 * n - n_a + 1) // 2
    counts = np.zeros((n_a + 1, top + 1))
    counts[0, 0] = 1.0
    for rank in range(1, n + 1):
        # Descending j so each rank joins a subset at most once.
        for j in range(min(rank, n_a), 0, -1):
            counts[j, rank:] += counts[j - 1, : top + 1 - rank]
    offset = n_a * (n_a + 1) // 2
    by_u = counts[n_a, offset : offset + n_a * n_b + 1]
    return np.cumsum(by_u) / by_u.sum()


def _hl_rank(n_a: int, n_b: int, confidence: float) -> int:
    """The 1-based order statistic k such that [d_(k), d_(mn+1-k)] covers >= ``confidence``.

    Returns 0 when even k = 1 (the full range of differences) falls short.
    """
    half_alpha = (1.0 - confidence) / 2.0
    if n_a + n_b <= _HL_EXACT_MAX_TOTAL:
        cdf = _mann_whitney_cdf(n_a, n_b)
        # Coverage of [d_(k), d_(mn+1-k)] is 1 - 2 P(U <= k - 1); take the largest such k.
        # The small slack absorbs float rounding in the cdf at exact boundaries.
        return int(np.count_nonzero(cdf <= half_alpha + 1e-12))
    mn = n_a * n_b
    z = NormalDist().inv_cdf(1.0 - half_alpha)
    sd = math.sqrt(mn * (n_a + n_b + 1) / 12.0)
    return max(0, math.floor(mn / 2.0 - z * sd))


def hodges_lehmann(
    a: Sequence[float], b: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """Hodges-Lehmann shift of a over b, with a distribution-free confidence interval.

    The estimate is the median of all n_a × n_b pairwise differences ``a_i - b_j``. The interval
    is ``[d_(k), d_(mn+1-k)]`` of the sorted differences, with k taken from the exact null
    distribution of the Mann-Whitney U (for n_a + n_b <= 100; its normal approximation
    above) as the largest k whose coverage ``1 - 2 P(U <= k - 1)`` is at least ``confidence``.
    The coverage is exact for continuous data; ties make it approximate.

    Small samples: when even the widest interval (min, max of the differences) covers less
    than ``confidence`` (its coverage is ``1 - min_p_value(n_a, n_b)``, e.g. 0.9 for 3 vs 3
    against a requested 0.95), that widest interval is returned anyway. It is then an interval
    at the lower coverage, not at ``confidence``; callers that must know can compare
    ``min_p_value(n_a, n_b)`` with ``1 - confidence``.

    Args:
        a: Arm a's values (>= 1).
        b: Arm b's values (>= 1).
        confidence: Requested coverage, strictly between 0 and 1.

    Returns:
        ``(estimate, low, high)``.

    Raises:
        ValueError: an arm is empty or holds NaN/inf, or ``confidence`` is not in (0, 1).
    """
    xa = _values("a", a)
    xb = _values("b", b)
    level = _fraction("confidence", confidence)
    diffs = np.sort(np.subtract.outer(xa, xb).ravel())
    estimate = float(np.median(diffs))
    k = _hl_rank(xa.size, xb.size, level)
    if k < 1:
        return estimate, float(diffs[0]), float(diffs[-1])
    # Cap k at the middle so the interval never inverts when confidence is set very low.
    k = min(k, (diffs.size + 1) // 2)
    return estimate, float(diffs[k - 1]), float(diffs[diffs.size - k])


def noise_sigma(baseline_values: Sequence[float]) -> float:
    """The judge's measured noise: sample standard deviation of re-judging one candidate.

    Re-judge the same candidate (normally the frozen baseline) N times and pass the N results,
    as tok/s or as ratios over the baseline; sigma comes back in the same unit, and must be
    compared with arm differences in that unit.

    Args:
        baseline_values: N >= 2 results of judging the same candidate.

    Returns:
        The sample standard deviation (``ddof=1``).

    Raises:
        ValueError: fewer than 2 values, or NaN/inf among them.
    """
    array = _values("baseline_values", baseline_values, minimum=2)
    return float(np.std(array, ddof=1))


@dataclass(frozen=True)
class ArmComparison:
    """The verdict of :func:`compare_arms`, with every number it was drawn from."""

    arm_a: str
    arm_b: str
    spread_a: ArmSpread
    spread_b: ArmSpread
    difference: float
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float
    min_p: float
    alpha: float
    noise_sigma: float | None
    outcome: Outcome
    reason: str


def compare_arms(
    a: Sequence[float],
    b: Sequence[float],
    *,
    arm_a: str = "swarm",
    arm_b: str = "solo",
    noise_sigma: float | None = None,
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> ArmComparison:
    """Compare two arms' per-seed results and say which is better, or that nobody can tell.

    ``difference`` is ``median(a) - median(b)``; the interval is the Hodges-Lehmann interval of
    the shift (:func:`hodges_lehmann`); the p-value is the permutation test on the means
    (:func:`permutation_test`). The decision rule, first match wins:

    1. ``min_p_value(n_a, n_b) > alpha`` → ``"cannot_tell"``: no exact test of these sizes can
       reach significance (3 vs 3 seeds: smallest possible p is 0.1 > 0.05), so the data
       cannot separate the arms whatever they show. One value per arm lands here too.
    2. ``noise_sigma`` given and ``|difference| < 2 × noise_sigma`` → ``"tie"``: the gap is
       within what re-judging the same candidate moves, so it is not a difference in the arms.
    3. ``p_value < alpha`` → ``"a_better"`` or ``"b_better"`` by the sign of the mean
       difference (the statistic the test judged).
    4. Otherwise → ``"tie"``: no significant difference.

    Args:
        a: Arm a's results, one per seed (>= 1).
        b: Arm b's results, one per seed (>= 1), same unit as ``a``.
        arm_a: Arm a's name, used in the reason.
        arm_b: Arm b's name, used in the reason.
        noise_sigma: The judge's measured noise (:func:`noise_sigma`) in the same unit, or
            None to skip the noise rule.
        alpha: Significance level, in (0, 1).
        confidence: Coverage of the shift interval, in (0, 1).

    Returns:
        An :class:`ArmComparison` whose ``reason`` is one plain sentence with the numbers.

    Raises:
        ValueError: an arm is empty or holds NaN/inf, ``noise_sigma`` is negative or not
            finite, or ``alpha``/``confidence`` is not in (0, 1).
    """
    xa = _values("a", a)
    xb = _values("b", b)
    level = _fraction("alpha", alpha)
    conf = _fraction("confidence", confidence)
    sigma: float | None = None
    if noise_sigma is not None:
        sigma = float(noise_sigma)
        if not math.isfinite(sigma) or sigma < 0:
            raise ValueError(f"noise_sigma must be a finite number >= 0, got {noise_sigma!r}")

    spread_a = arm_spread(xa)
    spread_b = arm_spread(xb)
    difference = spread_a.median - spread_b.median
    _, ci_low, ci_high = hodges_lehmann(xa, xb, conf)
    p_value = permutation_test(xa, xb)
    floor = min_p_value(xa.size, xb.size)
    sizes = f"{xa.size} vs {xb.size} seeds"
    kind = (
        "exact permutation" if xa.size + xb.size <= EXACT_MAX_TOTAL else "Monte-Carlo permutation"
    )
    gap = f"median difference {arm_a} − {arm_b} = {difference:+.4g}"

    outcome: Outcome
    if floor > level:
        outcome = "cannot_tell"
        reason = (
            f"{sizes}: no exact test can reach p < {level:g}; smallest possible p is "
            f"{floor:.3g} ({gap})."
        )
    elif sigma is not None and abs(difference) < 2 * sigma:
        outcome = "tie"
        reason = (
            f"Tie: {gap} is within 2 × the judge's noise (σ = {sigma:.4g}, "
            f"2σ = {2 * sigma:.4g}), {sizes}."
        )
    elif p_value < level:
        mean_gap = float(xa.mean() - xb.mean())
        outcome = "a_better" if mean_gap > 0 else "b_better"
        winner, loser = (arm_a, arm_b) if mean_gap > 0 else (arm_b, arm_a)
        reason = (
            f"{winner} beats {loser}: {gap}, {conf:.0%} interval {ci_low:+.4g} to "
            f"{ci_high:+.4g}, {kind} p = {p_value:.3g} < {level:g}, {sizes}."
        )
    else:
        outcome = "tie"
        reason = (
            f"No significant difference: {kind} p = {p_value:.3g} >= {level:g} "
            f"({gap}, {conf:.0%} interval {ci_low:+.4g} to {ci_high:+.4g}), {sizes}."
        )

    return ArmComparison(
        arm_a=arm_a,
        arm_b=arm_b,
        spread_a=spread_a,
        spread_b=spread_b,
        difference=difference,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=conf,
        p_value=p_value,
        min_p=floor,
        alpha=level,
        noise_sigma=sigma,
        outcome=outcome,
        reason=reason,
    )
