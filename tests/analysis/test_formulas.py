"""The seed's formulas reproduce every figure of its sections 4 and 5.

Inputs are the seed's own (context 001, "Same problem, same judge, same model"): one evaluation
timed at 218 s; five agents ran 8.1 h (2.6 h, a stall, then 5.5 h) with 125 evaluations, best
114.14 tok/s and 1.96M Opus output tokens; one agent ran 8 h with 73 evaluations, best 103.97
tok/s and 1.33M output tokens; baseline 66.65 tok/s. The seed rounds its results (134, ~93%,
≈ 36K), so each tolerance is half a unit of the seed's last printed digit.
"""

from __future__ import annotations

import math

import pytest

from analysis.formulas import (
    judge_capacity,
    judge_utilisation,
    marginal_token_cost,
    token_cost_per_gain,
)

HOUR = 3600.0
SECONDS_PER_EVALUATION = 218.0
SWARM_HOURS = 2.6 + 5.5  # "2.6 hours, a stall, then 5.5 more" = "about 8.1 hours"
SOLO_HOURS = 8.0
SWARM_EVALUATIONS = 125
SOLO_EVALUATIONS = 73
BASELINE = 66.65
SWARM_BEST = 114.14
SOLO_BEST = 103.97
SWARM_TOKENS = 1.96e6
SOLO_TOKENS = 1.33e6


# --- Section 4: the evaluator is the ceiling -------------------------------------------------


def test_swarm_run_time_is_the_seeds_8_1_hours() -> None:
    assert pytest.approx(8.1) == SWARM_HOURS


def test_capacity_five_agents_134() -> None:
    capacity = judge_capacity(SWARM_HOURS * HOUR, SECONDS_PER_EVALUATION)
    assert capacity == pytest.approx(134, abs=0.5)
    assert round(capacity) == 134


def test_capacity_one_agent_132() -> None:
    capacity = judge_capacity(SOLO_HOURS * HOUR, SECONDS_PER_EVALUATION)
    assert capacity == pytest.approx(132, abs=0.5)
    assert round(capacity) == 132


def test_utilisation_five_agents_93_percent() -> None:
    busy = judge_utilisation(SWARM_EVALUATIONS, SECONDS_PER_EVALUATION, SWARM_HOURS * HOUR)
    assert busy == pytest.approx(0.93, abs=0.005)


def test_utilisation_one_agent_55_percent() -> None:
    busy = judge_utilisation(SOLO_EVALUATIONS, SECONDS_PER_EVALUATION, SOLO_HOURS * HOUR)
    assert busy == pytest.approx(0.55, abs=0.005)


def test_utilisation_is_actual_over_capacity() -> None:
    run = SWARM_HOURS * HOUR
    capacity = judge_capacity(run, SECONDS_PER_EVALUATION)
    busy = judge_utilisation(SWARM_EVALUATIONS, SECONDS_PER_EVALUATION, run)
    assert busy == pytest.approx(SWARM_EVALUATIONS / capacity)


# --- Section 5: what did the extra 10 tok/s cost? ---------------------------------------------


def test_seed_gains_are_exact() -> None:
    assert pytest.approx(37.32) == SOLO_BEST - BASELINE
    assert pytest.approx(47.49) == SWARM_BEST - BASELINE
    assert pytest.approx(10.17) == SWARM_BEST - SOLO_BEST
    assert pytest.approx(0.63e6) == SWARM_TOKENS - SOLO_TOKENS


def test_cost_per_gain_one_agent_36k() -> None:
    cost = token_cost_per_gain(SOLO_TOKENS, SOLO_BEST, BASELINE)
    assert cost == pytest.approx(SOLO_TOKENS / 37.32)
    assert cost == pytest.approx(36_000, abs=500)


def test_cost_per_gain_five_agents_41k() -> None:
    cost = token_cost_per_gain(SWARM_TOKENS, SWARM_BEST, BASELINE)
    assert cost == pytest.approx(SWARM_TOKENS / 47.49)
    assert cost == pytest.approx(41_000, abs=500)


def test_marginal_cost_62k() -> None:
    cost = marginal_token_cost(SWARM_TOKENS, SWARM_BEST, SOLO_TOKENS, SOLO_BEST)
    assert cost == pytest.approx(0.63e6 / 10.17)
    assert cost == pytest.approx(62_000, abs=500)


def test_marginal_point_costs_1_7_times_solo_average() -> None:
    marginal = marginal_token_cost(SWARM_TOKENS, SWARM_BEST, SOLO_TOKENS, SOLO_BEST)
    solo = token_cost_per_gain(SOLO_TOKENS, SOLO_BEST, BASELINE)
    assert marginal / solo == pytest.approx(1.7, abs=0.05)


# --- Edge cases ---------------------------------------------------------------------------------


def test_capacity_of_zero_run_time_is_zero() -> None:
    assert judge_capacity(0, SECONDS_PER_EVALUATION) == 0


def test_utilisation_is_not_clipped_above_one() -> None:
    # 10 evaluations of 218 s cannot fit in 1000 s: the input is wrong, and clipping would hide it.
    assert judge_utilisation(10, 218, 1000) == pytest.approx(2.18)


def test_utilisation_of_no_evaluations_is_zero() -> None:
    assert judge_utilisation(0, 218, 1000) == 0


@pytest.mark.parametrize("best", [BASELINE, BASELINE - 1.0])
def test_no_gain_costs_infinity(best: float) -> None:
    assert token_cost_per_gain(SOLO_TOKENS, best, BASELINE) == math.inf


def test_no_gain_with_no_tokens_is_still_infinity() -> None:
    assert token_cost_per_gain(0, BASELINE, BASELINE) == math.inf


def test_zero_tokens_with_a_gain_cost_nothing() -> None:
    assert token_cost_per_gain(0, SOLO_BEST, BASELINE) == 0


def test_cost_works_on_ratios_too() -> None:
    assert token_cost_per_gain(1000, 1.5, 1.0) == pytest.approx(2000)


@pytest.mark.parametrize("best_a", [SOLO_BEST, SOLO_BEST - 5])
def test_marginal_without_extra_result_is_infinity(best_a: float) -> None:
    assert marginal_token_cost(SWARM_TOKENS, best_a, SOLO_TOKENS, SOLO_BEST) == math.inf


def test_marginal_better_and_cheaper_is_negative() -> None:
    assert marginal_token_cost(1e6, 110, 2e6, 100) == pytest.approx(-1e5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1.0, 218.0), "run_seconds"),
        ((3600.0, 0.0), "seconds_per_evaluation"),
        ((3600.0, -218.0), "seconds_per_evaluation"),
        ((math.nan, 218.0), "run_seconds"),
        ((3600.0, math.inf), "seconds_per_evaluation"),
    ],
)
def test_capacity_bad_input(args: tuple[float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        judge_capacity(*args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 218.0, 3600.0), "evaluations"),
        ((10, 0.0, 3600.0), "seconds_per_evaluation"),
        ((10, 218.0, 0.0), "run_seconds"),
        ((10, 218.0, -3600.0), "run_seconds"),
        ((10, 218.0, math.nan), "run_seconds"),
    ],
)
def test_utilisation_bad_input(args: tuple[float, float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        judge_utilisation(*args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1.0, 100.0, 66.65), "output_tokens"),
        ((math.nan, 100.0, 66.65), "output_tokens"),
        ((1e6, math.nan, 66.65), "best"),
        ((1e6, 100.0, math.inf), "baseline"),
    ],
)
def test_cost_per_gain_bad_input(args: tuple[float, float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        token_cost_per_gain(*args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1.0, 110.0, 1e6, 100.0), "tokens_a"),
        ((1e6, 110.0, -1.0, 100.0), "tokens_b"),
        ((2e6, math.nan, 1e6, 100.0), "best_a"),
        ((2e6, 110.0, 1e6, math.nan), "best_b"),
    ],
)
def test_marginal_bad_input(args: tuple[float, float, float, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        marginal_token_cost(*args)
