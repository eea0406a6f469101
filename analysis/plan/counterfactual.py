"""Counterfactual replay: the run's actual submissions through a judge with other settings.

Every scenario replays the recorded enqueue times and judge seconds (not a fitted model) through
:func:`analysis.plan.sim.replay`, over the agents' phase. The first scenario is the run's own
settings: its distance from what the run measured is the simulation's error (the validation).
Submissions stay where they were: a simulation cannot say what agents would have done with
earlier verdicts, only when the judge would have delivered the ones they asked for.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from analysis.plan.fit import Fit, RunRecord
from analysis.plan.sim import JudgeSetup, SimJob, replay, simulate

__all__ = ["own_setup", "predict_run", "replay_table", "scenarios", "self_replay_error"]


def own_setup(run: RunRecord, duplicate_s: float = 0.05) -> JudgeSetup:
    """The judge the run had: its devices, queue policy, recorded dedupe, speed 1."""
    return JudgeSetup(devices=run.devices, policy=run.policy, duplicate_s=duplicate_s)


def scenarios(run: RunRecord, duplicate_s: float = 0.05) -> list[tuple[str, JudgeSetup]]:
    """The run's own judge, then one change at a time: 2x faster, two devices, identical trees
    de-duplicated (or not, when the run did), the other queue policy, untimed stages overlapped.
    """
    own = own_setup(run, duplicate_s)
    other = "fifo" if run.policy == "fair" else "fair"
    dedupe = "off" if run.dedupe != "off" else "on"
    return [
        ("as recorded", own),
        ("judge 2x faster", replace(own, speed=2.0)),
        ("2 devices", replace(own, devices=max(2, run.devices * 2))),
        (f"dedupe {dedupe}", replace(own, dedupe=dedupe)),
        (other, replace(own, policy=other)),
        ("overlap untimed stages", replace(own, overlap=True)),
    ]


def _best_jobs(run: RunRecord) -> dict[str, int]:
    """Each arm's best PASS (highest x_baseline; the agents' own), by job id."""
    best: dict[str, tuple[float, int]] = {}
    for job in run.jobs:
        if job.pseudo or job.x_baseline is None or job.job_id is None:
            continue
        if job.arm not in best or job.x_baseline > best[job.arm][0]:
            best[job.arm] = (job.x_baseline, job.job_id)
    return {arm: job_id for arm, (_, job_id) in best.items()}


def replay_table(run: RunRecord, duplicate_s: float = 0.05) -> pd.DataFrame:
    """Replay the run under each of :func:`scenarios`; one row per scenario and arm (and an
    ``all`` row): evaluations judged, utilisation, queue waits, and when the arm's best
    would have been known (seconds since the start) against when it was.

    Returns:
        Columns: scenario, arm, evaluations, utilisation, mean_wait_s, p95_wait_s,
        best_known_s, recorded_best_known_s, sooner_s (recorded minus simulated; > 0 sooner).
    """
    best = _best_jobs(run)
    recorded_end = {j.job_id: j.finished_s for j in run.jobs if j.job_id is not None}
    rows = []
    for name, setup in scenarios(run, duplicate_s):
        outcome, jobs = replay(run.jobs, setup, run.phase_s)
        rows.append(
            {
                "scenario": name,
                "arm": "all",
                "evaluations": outcome.evaluations,
                "utilisation": outcome.utilisation,
                "mean_wait_s": outcome.mean_wait_s,
                "p95_wait_s": outcome.p95_wait_s,
            }
        )
        by_job: dict[int, SimJob] = {
            j.source.job_id: j for j in jobs if j.source and j.source.job_id is not None
        }
        for arm in run.arms:
            mine = [j for j in jobs if j.arm == arm and not j.pseudo]
            done = [j for j in mine if j.finished_s is not None]
            waits = pd.Series([j.started_s - j.enqueued_s for j in done], dtype=float)
            sim_best = by_job.get(best[arm]) if arm in best else None
            known = sim_best.finished_s if sim_best is not None else None
            was = recorded_end.get(best[arm]) if arm in best else None
            rows.append(
                {
                    "scenario": name,
                    "arm": arm,
                    "evaluations": outcome.per_arm.get(arm, 0),
                    "utilisation": pd.NA,
                    "mean_wait_s": float(waits.mean()) if len(waits) else pd.NA,
                    "p95_wait_s": float(waits.quantile(0.95)) if len(waits) else pd.NA,
                    "best_known_s": known if known is not None else pd.NA,
                    "recorded_best_known_s": was if was is not None else pd.NA,
                    "sooner_s": (was - known) if known is not None and was is not None else pd.NA,
                }
            )
    return pd.DataFrame.from_records(rows)


def self_replay_error(run: RunRecord, duplicate_s: float = 0.05) -> dict[str, dict[str, float]]:
    """The run replayed under its own settings against what it measured: for evaluations,
    utilisation and mean queue wait, the measured value, the simulated one and the relative
    error ``|simulated - measured| / measured`` (0 when both are 0)."""
    outcome, _ = replay(run.jobs, own_setup(run, duplicate_s), run.phase_s)
    simulated = {
        "evaluations": float(outcome.evaluations),
        "utilisation": outcome.utilisation,
        "mean_queue_wait_s": outcome.mean_wait_s,
    }
    out = {}
    for name, sim in simulated.items():
        measured = run.measured[name]
        error = abs(sim - measured) / abs(measured) if measured else (0.0 if sim == 0 else 1.0)
        out[name] = {"measured": measured, "simulated": sim, "relative_error": error}
    return out


def predict_run(
    fit: Fit, target: RunRecord, *, speed: float = 1.0, replications: int = 5
) -> dict[str, dict[str, float]]:
    """Predict another run from a fitted pilot: ``target``'s seats per arm, queue policy,
    devices, evaluations budget and phase, simulated ``replications`` times with the pilot's
    pace and judge seconds (``speed``: how much faster the target's judge is), against what
    ``target`` measured. A budget-limited run is predicted to its end (``phase_s``).

    Returns:
        Per quantity (evaluations, utilisation, mean_queue_wait_s, phase_s): measured,
        simulated (the mean over replications) and relative_error.
    """
    setup = JudgeSetup(
        devices=target.devices, speed=speed, policy=target.policy, duplicate_s=fit.duplicate_s
    )
    seats = {arm: len(names) for arm, names in target.seats.items()}
    # A run its evaluations budget ended is predicted to that end (its length is a
    # prediction); any other ends where it ended (its deadline, or an interruption).
    by_budget = target.evaluations_per_arm is not None and target.ended_by == "evaluations"
    horizon = target.budget_s if by_budget else target.phase_s
    outs = [
        simulate(
            fit, seats, setup, horizon, seed=seed, evaluations_per_arm=target.evaluations_per_arm
        )
        for seed in range(replications)
    ]
    simulated = {
        "evaluations": sum(o.evaluations for o in outs) / len(outs),
        "utilisation": sum(o.utilisation for o in outs) / len(outs),
        "mean_queue_wait_s": sum(o.mean_wait_s for o in outs) / len(outs),
        "phase_s": sum(o.horizon_s for o in outs) / len(outs),
    }
    measured = {**target.measured, "phase_s": target.phase_s}
    out = {}
    for name, sim in simulated.items():
        value = measured[name]
        error = abs(sim - value) / abs(value) if value else (0.0 if sim == 0 else 1.0)
        out[name] = {"measured": value, "simulated": sim, "relative_error": error}
    return out
