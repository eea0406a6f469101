"""The recommendation printed before a run starts (``python -m runner ... plan=DIR``).

From finished runs (a pilot, a sweep) and the settings of the run about to start: the seed's
formula one filled in (judge capacity = budget seconds ÷ seconds per evaluation), what the
configured team would get from this judge (simulated), the team size where the judge saturates,
and the seeds per arm each difference needs, with their judge hours and tokens. Everything
predicted is labelled a simulation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from analysis import formulas
from analysis.plan.build import make_plan
from analysis.plan.fit import Fit
from analysis.plan.sim import SATURATED, JudgeSetup, simulate

__all__ = ["recommend"]


def _mean_service_s(plan_fit: Fit) -> float:
    """Seconds per evaluation over every judged agents' job read (the fitted mean)."""
    seconds = [j.service_s for run in plan_fit.runs for j in run.jobs if j.judged and not j.pseudo]
    return sum(seconds) / len(seconds) if seconds else 0.0


def recommend(
    paths: Sequence[Path],
    *,
    minutes: float,
    policy: str,
    workers: Mapping[str, int],
    draws: int = 100,
    max_seeds: int = 10,
) -> str:
    """The recommendation for a run of ``minutes`` with ``workers`` submitting seats per arm
    and a ``policy`` queue, planned from the finished runs under ``paths``.

    Raises:
        ValueError: ``paths`` hold no finished run.
    """
    horizon = float(minutes) * 60
    plan = make_plan(
        paths,
        horizon_s=horizon,
        speeds=(1.0,),
        devices=(1,),
        replications=1,
        draws=draws,
        max_seeds=max_seeds,
    )
    per_eval = _mean_service_s(plan.fit)
    lines = [
        f"plan (simulation; from {len(plan.runs)} finished run(s): {', '.join(map(str, paths))})"
    ]
    if per_eval > 0:
        capacity = formulas.judge_capacity(horizon, per_eval)
        lines.append(
            f"  judge capacity = {horizon:.0f} s ÷ {per_eval:.1f} s per evaluation "
            f"= {capacity:.0f} evaluations (one device; the mean of the recorded outcomes)"
        )
    known = {a: n for a, n in workers.items() if a in plan.fit.arms}
    unknown = sorted(set(workers) - set(known))
    if known:
        out = simulate(
            plan.fit, known, JudgeSetup(policy=policy, duplicate_s=plan.fit.duplicate_s), horizon
        )
        team = ", ".join(f"{a} {n}" for a, n in known.items())
        lines.append(
            f"  this run ({team} seats, {policy}): {out.evaluations} evaluations, judge "
            f"utilisation {out.utilisation:.0%} = busy s ÷ {horizon:.0f} s, mean queue wait "
            f"{out.mean_wait_s:.0f} s (p95 {out.p95_wait_s:.0f} s)"
        )
        if out.utilisation >= SATURATED:
            lines.append(
                "  the judge is saturated: more seats buy a longer queue, not more evaluations"
            )
    if unknown:
        lines.append(
            f"  no record of arm(s) {', '.join(unknown)} in the plan's runs: not simulated"
        )
    knee = plan.knees.iloc[0]["knee_seats_per_arm"] if len(plan.knees) else pd.NA
    if pd.notna(knee):
        lines.append(
            f"  agents per arm: at most {int(knee)} (the smallest team that keeps the judge "
            f">= {SATURATED:.0%} busy)"
        )
    else:
        lines.append(
            f"  agents per arm: the judge is not saturated by {max(plan.team['seats_per_arm'])} "
            "seats per arm"
        )
    if plan.power is None:
        lines.append("  seeds per arm: " + " ".join(plan.notes[:1]))
    else:
        for row in plan.power.itertuples():
            if pd.isna(row.seeds_per_arm):
                lines.append(
                    f"  seeds per arm for a {row.difference:.0%} difference at 80% power: more "
                    f"than {max_seeds}"
                )
                continue
            tokens = (
                f", {row.output_tokens:,.0f} output tokens" if pd.notna(row.output_tokens) else ""
            )
            lines.append(
                f"  seeds per arm for a {row.difference:.0%} difference at 80% power: "
                f"{row.seeds_per_arm} ({row.judge_hours:.2f} judge hours{tokens}, both arms)"
            )
    return "\n".join(lines)
