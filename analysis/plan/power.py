"""Seeds and power: how many seeds per arm a comparison needs, and what they cost.

Each run read is one seed. An arm's value in a seed is the sweep's own (``analysis.sweep``):
its re-judged best ``x_baseline`` where the runner re-judged it, else its raw best, else 1.0
(no PASS). The between-seed spread is the spread of those values around each arm's median.

Power is simulated with the report's own test and tie rule (:func:`analysis.stats.compare_arms`
with the judge's measured noise, ``analysis.sweep.judge_noise``): arm b's values are drawn
around the pilot's centre, arm a's around it times ``1 + difference``, and the power is the
share of draws the comparison calls ``a_better``. Draws resample the pilot's pooled deviations
from their arm's median (a bootstrap) when there are at least :data:`BOOTSTRAP_MIN` of them,
else a normal with their standard deviation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.plan.fit import RunRecord
from analysis.stats import compare_arms

__all__ = [
    "BOOTSTRAP_MIN",
    "DIFFERENCES",
    "POWER",
    "Pilot",
    "early_signal",
    "pilot",
    "power_table",
]

DIFFERENCES = (0.05, 0.10, 0.20)
POWER = 0.8
BOOTSTRAP_MIN = 6


@dataclass
class Pilot:
    """Per seed and arm: the arm's value and cost, from the runs read."""

    # run_id, arm, value (compared), best_x, rejudged_x, judge_hours, output_tokens, cost_usd
    values: pd.DataFrame
    noise_sigma: float | None

    def spread(self) -> pd.DataFrame:
        """Per arm: seeds, median, standard deviation (ddof 1), min and max of its values (the
        compared value), and the sd of its raw best and of its re-judged best apart."""
        groups = self.values.groupby("arm", sort=False)
        g = groups["value"]
        return pd.DataFrame(
            {
                "seeds": g.size(),
                "median": g.median(),
                "sd": g.std(ddof=1),
                "min": g.min(),
                "max": g.max(),
                "best_x_sd": groups["best_x"].std(ddof=1),
                "rejudged_x_sd": groups["rejudged_x"].std(ddof=1),
            }
        ).reset_index()

    def deviations(self) -> np.ndarray:
        """Every value's deviation from its arm's median, pooled over arms."""
        v = self.values
        return (v["value"] - v.groupby("arm")["value"].transform("median")).to_numpy(float)


def _arm_value(row: pd.Series) -> float:
    for name in ("rejudged_x_baseline", "best_x_baseline"):
        value = pd.to_numeric(row.get(name), errors="coerce")
        if pd.notna(value):
            return float(value)
    return 1.0


def pilot(runs: Sequence[RunRecord]) -> Pilot:
    """The per-seed values and costs of every run's arms (runs without tables are skipped)."""
    rows = []
    noise = []
    for run in runs:
        if run.tables is None:
            continue
        arms = run.tables.arms
        tokens = run.tables.tokens
        for _, row in arms.iterrows():
            if not (pd.to_numeric(row.get("evaluations"), errors="coerce") or 0) > 0:
                continue  # the judge never scored it: no evidence (analysis.sweep's rule)
            cost = tokens.loc[tokens["arm"] == row["arm"], "cost_estimate"]
            cost = pd.to_numeric(cost, errors="coerce").dropna()
            out = pd.to_numeric(row.get("output_tokens"), errors="coerce")
            rows.append(
                {
                    "run_id": run.run_id,
                    "arm": row["arm"],
                    "value": _arm_value(row),
                    "best_x": pd.to_numeric(row.get("best_x_baseline"), errors="coerce"),
                    "rejudged_x": pd.to_numeric(row.get("rejudged_x_baseline"), errors="coerce"),
                    "judge_hours": float(row["judge_seconds"]) / 3600,
                    "output_tokens": float(out) if pd.notna(out) else np.nan,
                    "cost_usd": float(cost.sum()) if len(cost) else np.nan,
                }
            )
            sd = pd.to_numeric(row.get("judge_noise_x_sd"), errors="coerce")
            if pd.notna(sd):
                noise.append(float(sd))
    values = pd.DataFrame.from_records(
        rows,
        columns=[
            "run_id",
            "arm",
            "value",
            "best_x",
            "rejudged_x",
            "judge_hours",
            "output_tokens",
            "cost_usd",
        ],
    )
    return Pilot(values, float(np.median(noise)) if noise else None)


def power_at(
    pilot_: Pilot,
    n: int,
    difference: float,
    *,
    draws: int = 200,
    seed: int = 0,
) -> float:
    """The share of ``draws`` simulated comparisons of ``n`` seeds per arm, arm a better by
    ``difference`` (relative), that :func:`compare_arms` calls ``a_better``."""
    deviations = pilot_.deviations()
    sd = float(np.std(deviations, ddof=1)) if deviations.size > 1 else 0.0
    centre = float(pilot_.values["value"].median())
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        if deviations.size >= BOOTSTRAP_MIN:
            noise_a, noise_b = rng.choice(deviations, n), rng.choice(deviations, n)
        else:
            noise_a, noise_b = rng.normal(0, sd, n), rng.normal(0, sd, n)
        a = centre * (1 + difference) + noise_a
        b = centre + noise_b
        result = compare_arms(a, b, arm_a="a", arm_b="b", noise_sigma=pilot_.noise_sigma)
        hits += result.outcome == "a_better"
    return hits / draws


def power_table(
    pilot_: Pilot,
    differences: Sequence[float] = DIFFERENCES,
    *,
    max_seeds: int = 10,
    draws: int = 200,
    target: float = POWER,
) -> pd.DataFrame:
    """Per difference: the fewest seeds per arm (2..``max_seeds``) that reach ``target`` power,
    the power there (or at ``max_seeds`` when none does), and what those seeds cost: judge
    hours, output tokens and dollars for both arms (each seed's median cost per arm, summed
    over arms, times the seeds; NA where the runs recorded none).

    Returns:
        Columns: difference, seeds_per_arm (NA: more than ``max_seeds``), power, judge_hours,
        output_tokens, cost_usd.
    """
    per_seed = pilot_.values.groupby("arm")[["judge_hours", "output_tokens", "cost_usd"]]
    per_seed = per_seed.median().sum(min_count=1)
    rows = []
    for difference in differences:
        needed, power = None, 0.0
        for n in range(2, max_seeds + 1):
            power = power_at(pilot_, n, difference, draws=draws)
            if power >= target:
                needed = n
                break
        seeds = needed if needed is not None else pd.NA
        rows.append(
            {
                "difference": difference,
                "seeds_per_arm": seeds,
                "power": power,
                **{
                    name: (per_seed[name] * needed if needed is not None else pd.NA)
                    for name in ("judge_hours", "output_tokens", "cost_usd")
                },
            }
        )
    table = pd.DataFrame.from_records(rows)
    table["seeds_per_arm"] = table["seeds_per_arm"].astype("Int64")
    return table


def early_signal(
    runs: Sequence[RunRecord], fractions: Sequence[float] = (0.25, 0.5)
) -> pd.DataFrame:
    """How well the best ``x_baseline`` known at a fraction of the agents' phase predicts the
    final best, across seeds and arms: the Spearman rank correlation (NA under 3 pairs).

    Returns:
        Columns: fraction, pairs, spearman.
    """
    pairs: dict[float, list[tuple[float, float]]] = {f: [] for f in fractions}
    for run in runs:
        for arm in run.arms:
            passes = [
                (j.finished_s, j.x_baseline)
                for j in run.jobs
                if j.arm == arm and not j.pseudo and j.x_baseline is not None
            ]
            final = max((x for _, x in passes), default=1.0)
            for f in fractions:
                early = max((x for t, x in passes if t <= f * run.phase_s), default=1.0)
                pairs[f].append((early, final))
    rows = []
    for f, got in pairs.items():
        frame = pd.DataFrame(got, columns=["early", "final"])
        rho = None
        if len(frame) >= 3:
            # Spearman: Pearson on the ranks (ties averaged); pandas' own needs scipy.
            ranks = frame.rank()
            if ranks["early"].std() > 0 and ranks["final"].std() > 0:
                rho = float(np.corrcoef(ranks["early"], ranks["final"])[0, 1])
        rows.append(
            {
                "fraction": f,
                "pairs": len(frame),
                "spearman": rho if rho is not None and pd.notna(rho) else pd.NA,
            }
        )
    return pd.DataFrame.from_records(rows)
