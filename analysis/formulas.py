"""The seed experiment's two formulas, as plain functions.

Formula one (seed, section 4): the evaluator is the ceiling. A serial judge can absorb at most
``effective run time ÷ time per evaluation`` evaluations, and how busy it was tells whether more
agents could have bought more evaluations or only a longer queue.

Formula two (seed, section 5): what a gain cost. ``output tokens ÷ (best − baseline)`` is the
price of one unit of improvement (tok/s in the seed), and the marginal cost between two arms is
the price of each unit one arm gained over the other.

Every function refuses input that would give a meaningless number (negative time or tokens, a
zero time per evaluation, NaN) with ``ValueError`` instead of returning it.
"""

from __future__ import annotations

import math

__all__ = [
    "judge_capacity",
    "judge_utilisation",
    "marginal_token_cost",
    "token_cost_per_gain",
]


def _finite(name: str, value: float) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def _non_negative(name: str, value: float) -> float:
    number = _finite(name, value)
    if number < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return number


def _positive(name: str, value: float) -> float:
    number = _finite(name, value)
    if number <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return number


def judge_capacity(run_seconds: float, seconds_per_evaluation: float) -> float:
    """How many evaluations a serial judge could run: effective run time ÷ time per evaluation.

    The seed (section 4) timed one full evaluation at 218 s and got, for the five-agent group
    (8.1 h: 2.6 h, a stall, then 5.5 h) ``8.1 × 3600 ÷ 218 ≈ 134`` evaluations possible, and
    for the solo agent (8 h) ``8 × 3600 ÷ 218 ≈ 132``.

    Args:
        run_seconds: Effective run time in seconds (exclude stalls the judge could not use).
        seconds_per_evaluation: Wall-clock seconds one evaluation takes, end to end.

    Returns:
        The number of evaluations possible, unrounded (the seed's 134 is 133.76).

    Raises:
        ValueError: ``run_seconds`` is negative or not finite, or ``seconds_per_evaluation`` is
            not a finite number > 0.
    """
    run = _non_negative("run_seconds", run_seconds)
    per = _positive("seconds_per_evaluation", seconds_per_evaluation)
    return run / per


def judge_utilisation(evaluations: int, seconds_per_evaluation: float, run_seconds: float) -> float:
    """The fraction of the run the judge was busy: evaluations × time each ÷ run time.

    Equivalently, actual evaluations ÷ :func:`judge_capacity`. The seed (section 4): five
    agents ``125 × 218 ÷ (8.1 × 3600) ≈ 93%``, one agent ``73 × 218 ÷ (8 × 3600) ≈ 55%``.
    The seed warns (section 9) that 218 s is a single measurement, so trust the order of
    magnitude, not the second digit.

    Args:
        evaluations: Evaluations the judge actually ran for the arm or run.
        seconds_per_evaluation: Seconds one evaluation takes (measured or estimated).
        run_seconds: Effective run time in seconds.

    Returns:
        A fraction, normally in [0, 1]. It is not clipped: a value above 1 means the time per
        evaluation is overestimated or evaluations ran after the deadline (drain), and hiding
        that would hide a wrong input.

    Raises:
        ValueError: ``evaluations`` is negative, ``seconds_per_evaluation`` or ``run_seconds``
            is not a finite number > 0.
    """
    count = _non_negative("evaluations", evaluations)
    per = _positive("seconds_per_evaluation", seconds_per_evaluation)
    run = _positive("run_seconds", run_seconds)
    return count * per / run


def token_cost_per_gain(output_tokens: float, best: float, baseline: float) -> float:
    """Output tokens spent per unit gained over the baseline: tokens ÷ (best − baseline).

    The seed (section 5), baseline 66.65 tok/s, Opus output tokens only: one agent
    ``1.33M ÷ (103.97 − 66.65) = 1.33M ÷ 37.32 ≈ 36K`` tokens per tok/s; five agents
    ``1.96M ÷ (114.14 − 66.65) = 1.96M ÷ 47.49 ≈ 41K``.

    Args:
        output_tokens: Output tokens the arm spent (>= 0).
        best: The arm's best result (same unit as ``baseline``: tok/s, or a ratio).
        baseline: The baseline's result.

    Returns:
        Tokens per unit of gain, or ``math.inf`` when ``best <= baseline``: with no gain every
        token bought nothing, and infinity keeps the cost ordering right (any real gain is
        cheaper) where zero or a negative number would rank a loss as a bargain.

    Raises:
        ValueError: ``output_tokens`` is negative or not finite, or ``best``/``baseline`` is
            not finite.
    """
    tokens = _non_negative("output_tokens", output_tokens)
    gain = _finite("best", best) - _finite("baseline", baseline)
    if gain <= 0:
        return math.inf
    return tokens / gain


def marginal_token_cost(tokens_a: float, best_a: float, tokens_b: float, best_b: float) -> float:
    """Extra tokens arm a spent over arm b, per extra unit of best it reached over b.

    The seed (section 5), five agents (a) vs one agent (b):
    ``(1.96 − 1.33)M ÷ (114.14 − 103.97) = 0.63M ÷ 10.17 ≈ 62K`` tokens per tok/s, about 1.7×
    the solo agent's average price per point (36K).

    Args:
        tokens_a: Output tokens arm a spent (>= 0).
        best_a: Arm a's best result.
        tokens_b: Output tokens arm b spent (>= 0).
        best_b: Arm b's best result, in the same unit.

    Returns:
        Extra tokens per extra unit, or ``math.inf`` when ``best_a <= best_b`` (a bought no
        extra result). Negative when a reached more with fewer tokens: a was better and
        cheaper, which is reported as is rather than hidden.

    Raises:
        ValueError: a token count is negative or not finite, or a best is not finite.
    """
    spent_a = _non_negative("tokens_a", tokens_a)
    spent_b = _non_negative("tokens_b", tokens_b)
    extra = _finite("best_a", best_a) - _finite("best_b", best_b)
    if extra <= 0:
        return math.inf
    return (spent_a - spent_b) / extra
