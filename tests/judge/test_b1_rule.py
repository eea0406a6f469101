"""The B=1 conviction rule: an exact sign test, checked against the binomial distribution and
against heavy-tailed noise like these VMs produce."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judge.evaluation import median_lower_bound, sign_test_count


def upper_tail(n: int, k: int) -> float:
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n


@pytest.mark.parametrize("n", [1, 5, 9, 20, 27, 60])
@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.001])
def test_sign_test_count_is_the_smallest_count_at_the_level(n: int, alpha: float) -> None:
    k = sign_test_count(n, alpha)
    if k <= n:
        assert upper_tail(n, k) <= alpha
    if k >= 1:
        assert k == n + 1 or upper_tail(n, k - 1) > alpha


def test_known_values() -> None:
    # P(Bin(27, 1/2) >= 22) = 0.00050 and >= 21 = 0.0030: 22 of 27 pairs at level 0.001.
    assert sign_test_count(27, 0.001) == 22
    assert sign_test_count(27, 0.01) == 20
    # Nine pairs can never reach 0.001 (all nine above has p = 0.002).
    assert sign_test_count(9, 0.001) == 10


def test_lower_bound_is_the_order_statistic_the_test_compares() -> None:
    values = [float(v) for v in range(1, 28)]  # 1..27
    # 22 of 27 must exceed the limit: the bound is the 6th smallest value.
    assert median_lower_bound(values, 0.001) == 6.0
    assert median_lower_bound(values[:9], 0.001) == 1.0  # too few: the weakest bound


def convicted(ratios: np.ndarray, limit: float, alpha: float) -> bool:
    return int((ratios > limit).sum()) >= sign_test_count(len(ratios), alpha)


def test_innocent_code_under_heavy_tailed_noise_is_almost_never_convicted() -> None:
    # Same code on both sides: log-ratios from a Student t (3 df) scaled to ~20% spread, the
    # shape that made a normal-theory rule convict the baseline. 20,000 evaluations.
    rng = np.random.default_rng(0)
    ratios = np.exp(0.2 * rng.standard_t(3, size=(20_000, 27)))
    rate = np.mean([convicted(r, 1.02, 0.001) for r in ratios])
    assert rate < 0.001
    # The old rule on the same draws convicts far more often: the reason it was replaced.
    med = np.median(ratios, axis=1)
    mad = np.median(np.abs(ratios - med[:, None]), axis=1)
    old = np.mean(med - 1.645 * 1.2533 * 1.4826 * mad / np.sqrt(27) > 1.02)
    assert old > 5 * max(rate, 1e-4)


def test_a_large_regression_is_convicted_through_the_same_noise() -> None:
    rng = np.random.default_rng(1)
    ratios = 2.0 * np.exp(0.2 * rng.standard_t(3, size=(2_000, 27)))
    assert np.mean([convicted(r, 1.02, 0.001) for r in ratios]) > 0.99
