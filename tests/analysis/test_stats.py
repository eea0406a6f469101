"""Statistics across seeds: hand-computed small cases, the 3-vs-3 floor, and bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from analysis.stats import (
    ArmSpread,
    arm_spread,
    compare_arms,
    hodges_lehmann,
    min_p_value,
    noise_sigma,
    permutation_test,
    spread_test,
)

# --- arm_spread --------------------------------------------------------------------------------


def test_arm_spread_of_five_values() -> None:
    assert arm_spread([5, 1, 4, 2, 3]) == ArmSpread(
        n=5, median=3.0, q25=2.0, q75=4.0, minimum=1.0, maximum=5.0
    )


def test_arm_spread_of_one_value() -> None:
    spread = arm_spread([114.14])
    assert (spread.n, spread.median, spread.q25, spread.q75) == (1, 114.14, 114.14, 114.14)


# --- min_p_value -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_a", "n_b", "expected"),
    [
        (3, 3, 0.1),  # 2 / C(6, 3) = 2 / 20
        (4, 4, 2 / 70),
        (6, 6, 2 / 924),
        (1, 1, 1.0),  # 2 / C(2, 1) = 1
        (1, 3, 0.5),  # 2 / C(4, 1)
        (2, 5, 2 / 21),
    ],
)
def test_min_p_value(n_a: int, n_b: int, expected: float) -> None:
    assert min_p_value(n_a, n_b) == pytest.approx(expected)


def test_three_seeds_per_arm_can_never_reach_five_percent() -> None:
    assert min_p_value(3, 3) > 0.05
    assert min_p_value(4, 4) < 0.05


@pytest.mark.parametrize(("n_a", "n_b"), [(0, 3), (3, 0), (-1, 2), (2.5, 3)])
def test_min_p_value_bad_sizes(n_a: float, n_b: float) -> None:
    with pytest.raises(ValueError, match="sizes"):
        min_p_value(n_a, n_b)  # type: ignore[arg-type]


# --- permutation_test --------------------------------------------------------------------------


def test_permutation_fully_separated_3v3_is_0_1() -> None:
    # {4,5,6} in a is 1 of 20 splits on the high side: p = 2 × 1/20.
    assert permutation_test([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert permutation_test([4, 5, 6], [1, 2, 3]) == pytest.approx(0.1)


def test_permutation_hand_computed_3v3() -> None:
    # Pooled 1..6, a = {1, 2, 4} (sum 7). Splits with sum <= 7: {1,2,3}, {1,2,4} → 2 of 20,
    # so p = 2 × 2/20 = 0.2.
    assert permutation_test([1, 2, 4], [3, 5, 6]) == pytest.approx(0.2)


def test_permutation_identical_arms_give_one() -> None:
    assert permutation_test([7, 7, 7], [7, 7, 7]) == 1.0
    assert permutation_test([1, 2, 3], [1, 2, 3]) == 1.0


def test_permutation_one_vs_one_is_one() -> None:
    assert permutation_test([100.0], [50.0]) == 1.0


def test_permutation_reaches_min_p_for_unequal_sizes() -> None:
    assert permutation_test([10, 11], [1, 2, 3, 4, 5]) == pytest.approx(min_p_value(2, 5))


def test_permutation_matches_brute_force_on_unequal_sizes() -> None:
    a, b = [3.1, 0.4, 2.2], [1.0, -0.5, 0.3, 0.9]
    pooled = a + b
    observed = np.mean(a) - np.mean(b)
    diffs = []
    for idx in itertools.combinations(range(7), 3):
        inside = [pooled[i] for i in idx]
        outside = [pooled[i] for i in range(7) if i not in idx]
        diffs.append(np.mean(inside) - np.mean(outside))
    diffs_arr = np.array(diffs)
    upper = np.mean(diffs_arr >= observed - 1e-12)
    lower = np.mean(diffs_arr <= observed + 1e-12)
    assert permutation_test(a, b) == pytest.approx(min(1.0, 2 * min(upper, lower)))


def test_permutation_is_exact_up_to_20_values() -> None:
    # 10 vs 10 fully separated: exactly 2 / C(20, 10).
    assert permutation_test(range(10, 20), range(10)) == pytest.approx(2 / math.comb(20, 10))


def test_permutation_monte_carlo_above_20_values_is_reproducible() -> None:
    rng = np.random.default_rng(1)
    a = list(rng.normal(0.0, 1.0, 12))
    b = list(rng.normal(0.3, 1.0, 12))
    first = permutation_test(a, b)
    assert first == permutation_test(a, b)
    assert 0 < first <= 1


def test_permutation_monte_carlo_never_returns_zero() -> None:
    p = permutation_test(range(100, 112), range(12))
    assert 0 < p <= 2 / 100_001 + 1e-12


def test_permutation_monte_carlo_close_to_exact_for_a_null_case() -> None:
    # Same distribution, interleaved values: a true null, p should be large.
    a = [float(x) for x in range(0, 24, 2)]
    b = [float(x) for x in range(1, 25, 2)]
    assert permutation_test(a, b) > 0.5


# --- hodges_lehmann ----------------------------------------------------------------------------


def test_hl_estimate_of_a_pure_shift() -> None:
    base = [1.0, 2.0, 3.5, 4.0, 6.0, 7.5]
    estimate, low, high = hodges_lehmann([x + 10 for x in base], base)
    assert estimate == pytest.approx(10.0)
    assert low <= 10.0 <= high


def test_hl_interval_contains_true_shift_for_a_constructed_case() -> None:
    rng = np.random.default_rng(7)
    shift = 3.0
    b = rng.normal(100.0, 1.0, 8)
    a = rng.normal(100.0, 1.0, 8) + shift
    estimate, low, high = hodges_lehmann(list(a), list(b))
    assert low < shift < high
    assert low <= estimate <= high


def test_hl_6v6_uses_the_6th_and_31st_differences() -> None:
    # Exact Mann-Whitney null for 6 vs 6: P(U <= 5) = 19/924 <= 0.025 < P(U <= 6) = 30/924,
    # so the 95% interval is [d_(6), d_(31)] of the 36 sorted differences.
    a = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    b = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    diffs = sorted(x - y for x in a for y in b)
    estimate, low, high = hodges_lehmann(a, b)
    assert (low, high) == (diffs[5], diffs[30])
    assert estimate == pytest.approx(float(np.median(diffs)))


def test_hl_too_few_values_give_the_widest_interval() -> None:
    # 3 vs 3 covers at most 1 - 0.1 = 90% < 95%: min and max of the differences.
    estimate, low, high = hodges_lehmann([4, 5, 6], [1, 2, 3])
    assert (estimate, low, high) == (3.0, 1.0, 5.0)


def test_hl_lower_confidence_narrows_the_interval() -> None:
    a = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    b = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    _, low95, high95 = hodges_lehmann(a, b, 0.95)
    _, low80, high80 = hodges_lehmann(a, b, 0.80)
    assert low95 <= low80 <= high80 <= high95
    assert (low80, high80) != (low95, high95)


def test_hl_large_samples_use_the_normal_approximation() -> None:
    rng = np.random.default_rng(3)
    b = rng.normal(0.0, 1.0, 60)
    a = rng.normal(0.0, 1.0, 60) + 1.0
    estimate, low, high = hodges_lehmann(list(a), list(b))
    assert low < estimate < high
    assert low < 1.0 < high


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 1.5])
def test_hl_bad_confidence(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        hodges_lehmann([1, 2], [3, 4], confidence)


# --- noise_sigma -------------------------------------------------------------------------------


def test_noise_sigma_is_the_sample_standard_deviation() -> None:
    # mean 67, squared deviations 1 + 0 + 1 = 2, / (3 - 1) = 1.
    assert noise_sigma([66.0, 67.0, 68.0]) == pytest.approx(1.0)


def test_noise_sigma_accepts_ratios() -> None:
    assert noise_sigma([0.99, 1.01]) == pytest.approx(math.sqrt(2) * 0.01)


@pytest.mark.parametrize("values", [[], [67.04], [67.0, math.nan]])
def test_noise_sigma_bad_input(values: list[float]) -> None:
    with pytest.raises(ValueError, match="baseline_values"):
        noise_sigma(values)


# --- compare_arms ------------------------------------------------------------------------------

SEP_A = [114.0, 115.0, 116.0, 117.0, 118.0, 119.0]
SEP_B = [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]


def test_3v3_is_always_cannot_tell_however_large_the_gap() -> None:
    result = compare_arms([1000.0, 1001.0, 1002.0], [1.0, 2.0, 3.0])
    assert result.outcome == "cannot_tell"
    assert result.min_p == pytest.approx(0.1)
    assert result.p_value == pytest.approx(0.1)
    assert result.reason.startswith(
        "3 vs 3 seeds: no exact test can reach p < 0.05; smallest possible p is 0.1"
    )


def test_one_value_per_arm_is_cannot_tell() -> None:
    # The seed itself: each group ran once (section 9).
    result = compare_arms([114.14], [103.97])
    assert result.outcome == "cannot_tell"
    assert result.difference == pytest.approx(10.17)
    assert "1 vs 1 seeds" in result.reason


def test_6v6_well_separated_is_a_better() -> None:
    result = compare_arms(SEP_A, SEP_B)
    assert result.outcome == "a_better"
    assert result.difference == pytest.approx(14.0)
    assert result.p_value == pytest.approx(2 / 924)
    assert result.min_p == pytest.approx(2 / 924)
    assert result.ci_low <= result.difference <= result.ci_high
    assert result.ci_low > 0
    assert result.spread_a.n == result.spread_b.n == 6
    assert result.reason.startswith("swarm beats solo")


def test_6v6_well_separated_other_way_is_b_better() -> None:
    result = compare_arms(SEP_B, SEP_A, arm_a="left", arm_b="right")
    assert result.outcome == "b_better"
    assert result.reason.startswith("right beats left")
    assert result.ci_high < 0


def test_noise_tie_overrides_a_significant_difference() -> None:
    result = compare_arms(SEP_A, SEP_B, noise_sigma=8.0)
    assert result.p_value < 0.05
    assert result.outcome == "tie"
    assert result.noise_sigma == 8.0
    assert "noise" in result.reason


def test_difference_above_twice_noise_is_not_a_tie() -> None:
    assert compare_arms(SEP_A, SEP_B, noise_sigma=6.9).outcome == "a_better"


def test_no_significant_difference_is_a_tie() -> None:
    a = [100.0, 102.0, 104.0, 106.0, 108.0, 110.0]
    b = [101.0, 103.0, 105.0, 107.0, 109.0, 111.0]
    result = compare_arms(a, b)
    assert result.outcome == "tie"
    assert result.p_value >= 0.05
    assert result.reason.startswith("No significant difference")


def test_cannot_tell_comes_before_the_noise_rule() -> None:
    assert compare_arms([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], noise_sigma=5).outcome == "cannot_tell"


def test_comparison_records_its_settings() -> None:
    result = compare_arms(SEP_A, SEP_B, alpha=0.01, confidence=0.9)
    assert (result.alpha, result.confidence) == (0.01, 0.9)
    assert (result.arm_a, result.arm_b) == ("swarm", "solo")


@pytest.mark.parametrize(
    ("a", "b"),
    [([], [1.0, 2.0]), ([1.0, 2.0], []), ([1.0, math.nan], [1.0, 2.0]), ([1.0], [math.inf])],
)
def test_compare_bad_values(a: list[float], b: list[float]) -> None:
    with pytest.raises(ValueError):
        compare_arms(a, b)


@pytest.mark.parametrize(
    "kwargs",
    [{"noise_sigma": -1.0}, {"noise_sigma": math.nan}, {"alpha": 0.0}, {"confidence": 1.0}],
)
def test_compare_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        compare_arms(SEP_A, SEP_B, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "function",
    [arm_spread, lambda v: permutation_test(v, [1.0]), lambda v: hodges_lehmann(v, [1.0])],
)
@pytest.mark.parametrize("values", [[], [math.nan], [1.0, "x"]])
def test_bad_values_everywhere(function, values) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        function(values)


def test_spread_test_tells_spread_from_level_and_says_when_too_few():
    steady = [1.00, 1.01, 0.99, 1.00, 1.01, 0.99, 1.00, 1.00]
    wild = [0.60, 1.40, 0.70, 1.30, 1.00, 0.50, 1.50, 1.00]
    assert spread_test(steady, wild) < 0.01
    assert spread_test(wild, steady) < 0.01
    assert spread_test(wild, [v + 0.2 for v in wild]) > 0.5  # shifted, as spread
    assert math.isnan(spread_test([1.0], wild))
    many = [1.0 + 0.01 * ((7 * i) % 13) for i in range(30)]
    assert 0.0 <= spread_test(many, many[::-1]) <= 1.0  # sampled splits, not all
