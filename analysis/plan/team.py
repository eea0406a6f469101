"""The team-size table: a fitted team of every size against every judge, simulated.

One row per seats per arm (:data:`SEATS`) x judge speed (:data:`SPEEDS`) x devices
(:data:`DEVICES`): predicted evaluations, judge utilisation, mean and 95th-percentile queue
wait (each the mean of :data:`REPLICATIONS` simulations with different draws), the same judge
with its untimed stages overlapped on spare CPUs, and per judge the knee: the smallest team at
which the judge is saturated (:data:`analysis.plan.sim.SATURATED`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.plan.fit import Fit
from analysis.plan.sim import SATURATED, JudgeSetup, Outcome, simulate

__all__ = ["DEVICES", "REPLICATIONS", "SEATS", "SPEEDS", "knees", "team_table"]

SEATS = (1, 2, 5, 10, 20, 50, 100)
SPEEDS = (1.0, 2.0)
DEVICES = (1, 2, 4, 8)
REPLICATIONS = 3


def team_table(
    fit: Fit,
    *,
    horizon_s: float | None = None,
    policy: str | None = None,
    seats: Sequence[int] = SEATS,
    speeds: Sequence[float] = SPEEDS,
    devices: Sequence[int] = DEVICES,
    replications: int = REPLICATIONS,
) -> pd.DataFrame:
    """Simulate every combination and return one row each.

    Args:
        fit: The fitted runs (:func:`analysis.plan.fit.fit_runs`).
        horizon_s: Seconds each simulated run lasts (default: the runs' budget).
        policy: The queue policy (default: the first run's).
        seats: Seats per arm to try.
        speeds: Judge speeds to try (2.0: every judge second halved).
        devices: Device counts to try.
        replications: Simulations per row, with seeds 0..n-1, averaged.

    Returns:
        Columns: seats_per_arm, speed, devices, evaluations, utilisation, mean_wait_s,
        p95_wait_s, evaluations_overlap, utilisation_overlap, saturated.
    """
    horizon = float(horizon_s if horizon_s is not None else fit.horizon_s)
    chosen = policy or fit.runs[0].policy
    rows = []
    for n in seats:
        for speed in speeds:
            for count in devices:
                cells = {}
                for overlap in (False, True):
                    setup = JudgeSetup(
                        devices=count,
                        speed=speed,
                        policy=chosen,
                        overlap=overlap,
                        duplicate_s=fit.duplicate_s,
                    )
                    outs = [
                        simulate(fit, n, setup, horizon, seed=seed) for seed in range(replications)
                    ]
                    cells[overlap] = outs
                plain = cells[False]
                utilisation = _mean("utilisation", plain)
                rows.append(
                    {
                        "seats_per_arm": n,
                        "speed": speed,
                        "devices": count,
                        "evaluations": _mean("evaluations", plain),
                        "utilisation": utilisation,
                        "mean_wait_s": _mean("mean_wait_s", plain),
                        "p95_wait_s": _mean("p95_wait_s", plain),
                        "evaluations_overlap": _mean("evaluations", cells[True]),
                        "utilisation_overlap": _mean("utilisation", cells[True]),
                        "saturated": utilisation >= SATURATED,
                    }
                )
    return pd.DataFrame.from_records(rows)


def _mean(name: str, outs: Sequence[Outcome]) -> float:
    return sum(getattr(o, name) for o in outs) / len(outs)


def knees(table: pd.DataFrame) -> pd.DataFrame:
    """Per judge (speed, devices): the smallest seats per arm at which it is saturated, or
    NA when no team in the table saturates it."""
    rows = []
    for (speed, count), group in table.groupby(["speed", "devices"], sort=True):
        hit = group[group["saturated"]].sort_values("seats_per_arm")
        rows.append(
            {
                "speed": speed,
                "devices": count,
                "knee_seats_per_arm": int(hit["seats_per_arm"].iloc[0]) if len(hit) else pd.NA,
                "evaluations_at_knee": float(hit["evaluations"].iloc[0]) if len(hit) else pd.NA,
            }
        )
    out = pd.DataFrame.from_records(rows)
    out["knee_seats_per_arm"] = out["knee_seats_per_arm"].astype("Int64")
    return out
