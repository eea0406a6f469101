"""What several sections and findings of the report read alike: one run's part of the tables, the
judge's noise, the seat time each arm lost to its model endpoint."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import stats
from analysis.tables import RunInfo, Tables, finite_or_none


def subset(tables: Tables, run: RunInfo) -> Tables:
    """The tables' rows of one run (a sweep's tables hold every job's)."""

    def pick(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["run_id"] == run.run_id] if "run_id" in df else df

    return Tables(
        runs=[run],
        evaluations=pick(tables.evaluations),
        submissions=pick(tables.submissions),
        messages=pick(tables.messages),
        tokens=pick(tables.tokens),
        lifecycle=pick(tables.lifecycle),
        model_calls=pick(tables.model_calls),
        arms=pick(tables.arms),
        relays=pick(tables.relays),
    )


def baseline_noise(tables: Tables) -> tuple[float, float] | None:
    """(sigma, median) of the judge's repeated baseline measurements in the task's metric, if 2
    or more."""
    values = tables.evaluations["baseline_score"].dropna()
    if len(values) < 2:
        return None
    return stats.noise_sigma(values.tolist()), float(values.median())


def lost_shares(tables: Tables, run: RunInfo) -> dict[str, tuple[float, float | None]]:
    """Per arm with a proxy record: (seat-seconds lost, their share of the arm's seat time).
    Seat time is the arm's seats × the agents' phase (``run_seconds``)."""
    out: dict[str, tuple[float, float | None]] = {}
    for r in tables.arms.itertuples(index=False):
        lost = finite_or_none(r.model_lost_s)
        if lost is None:
            continue
        seat_s = r.seats * run.run_seconds
        out[r.arm] = (lost, lost / seat_s if seat_s > 0 else None)
    return out


def call_records(calls: pd.DataFrame) -> list[dict[str, Any]]:
    """The table's rows as the event log holds them (None, not pandas' NA, where empty)."""
    return calls.astype(object).where(calls.notna(), None).to_dict("records")
