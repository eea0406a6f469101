"""The whole plan from one or more finished runs: read, fit, simulate, replay, power; and its
Markdown section and files."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.plan.counterfactual import replay_table, self_replay_error
from analysis.plan.figure import team_figure
from analysis.plan.fit import Fit, RunRecord, fit_runs, read_run, run_dirs
from analysis.plan.power import DIFFERENCES, POWER, Pilot, early_signal, pilot, power_table
from analysis.plan.sim import SATURATED
from analysis.plan.team import DEVICES, REPLICATIONS, SEATS, SPEEDS, knees, team_table

__all__ = ["Plan", "make_plan", "render", "write_plan"]

LABEL = "simulation"


@dataclass
class Plan:
    """Everything the planner found and predicted (every prediction a simulation)."""

    fit: Fit
    horizon_s: float
    pace: pd.DataFrame
    service: pd.DataFrame
    team: pd.DataFrame
    knees: pd.DataFrame
    replays: dict[str, pd.DataFrame]
    self_replay: dict[str, dict[str, dict[str, float]]]
    pilot: Pilot
    power: pd.DataFrame | None
    early: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    max_seeds: int = 10

    @property
    def runs(self) -> list[RunRecord]:
        return self.fit.runs


def _pace_table(fit: Fit) -> pd.DataFrame:
    rows = []
    for pace in fit.arms.values():
        think = pd.Series(pace.think_s, dtype=float)
        rows.append(
            {
                "arm": pace.arm,
                "seats": pace.seats,
                "submissions": pace.submissions,
                "per_seat_hour": pace.per_seat_hour,
                "think_median_s": think.median() if len(think) else math.nan,
                "think_p90_s": think.quantile(0.9) if len(think) else math.nan,
                "first_median_s": pd.Series(pace.first_s, dtype=float).median(),
            }
        )
    return pd.DataFrame.from_records(rows)


def _service_table(fit: Fit) -> pd.DataFrame:
    rows = []
    for pace in fit.arms.values():
        for outcome, samples in pace.service.items():
            total = pd.Series([u + t for u, t in samples], dtype=float)
            untimed = pd.Series([u for u, _ in samples], dtype=float)
            rows.append(
                {
                    "arm": pace.arm,
                    "outcome": outcome,
                    "count": len(samples),
                    "share": pace.mix.get(outcome, 0.0),
                    "median_s": total.median(),
                    "p90_s": total.quantile(0.9),
                    "untimed_median_s": untimed.median(),
                }
            )
    return pd.DataFrame.from_records(rows)


def make_plan(
    paths: Sequence[Path],
    *,
    horizon_s: float | None = None,
    seats: Sequence[int] = SEATS,
    speeds: Sequence[float] = SPEEDS,
    devices: Sequence[int] = DEVICES,
    replications: int = REPLICATIONS,
    differences: Sequence[float] = DIFFERENCES,
    max_seeds: int = 10,
    draws: int = 200,
) -> Plan:
    """Read the runs under ``paths`` (runs or sweeps), fit, simulate and replay.

    Args:
        paths: Run folders, sweep folders, or both.
        horizon_s: The simulated team's run length (default: the runs' budget).
        seats, speeds, devices, replications: The team table's grid
            (:func:`analysis.plan.team.team_table`).
        differences: Relative differences the power table asks about.
        max_seeds: The most seeds per arm the power search tries.
        draws: Simulated comparisons per power estimate.

    Raises:
        ValueError: a path holds no run, or the runs hold no judged evaluation.
    """
    dirs = run_dirs(list(paths))
    runs = [read_run(d, multi=len(dirs) > 1) for d in dirs]
    if not any(j.judged for run in runs for j in run.jobs):
        raise ValueError("the judge judged nothing in these runs: no judge seconds to plan from")
    fit = fit_runs(runs)
    horizon = float(horizon_s if horizon_s is not None else fit.horizon_s)
    team = team_table(
        fit,
        horizon_s=horizon,
        seats=seats,
        speeds=speeds,
        devices=devices,
        replications=replications,
    )
    notes = []
    pilot_ = pilot(runs)
    seeds = pilot_.values.groupby("arm").size()
    power = None
    if len(seeds) >= 1 and int(seeds.min()) >= 2:
        power = power_table(pilot_, differences, max_seeds=max_seeds, draws=draws)
    else:
        notes.append(
            "One seed per arm: no between-seed spread to size a comparison from. Run a pilot "
            "of 3 or more seeds (a sweep, `seed=1,2,3`) and plan from it."
        )
    if len(runs) > 1:
        notes.append(
            "Several runs are replayed one by one, each through its own judge: runs that "
            "shared one judge (a parallel sweep) queued behind each other, which no replay "
            "of one run shows."
        )
    return Plan(
        fit=fit,
        horizon_s=horizon,
        pace=_pace_table(fit),
        service=_service_table(fit),
        team=team,
        knees=knees(team),
        replays={r.run_id: replay_table(r, fit.duplicate_s) for r in runs},
        self_replay={r.run_id: self_replay_error(r, fit.duplicate_s) for r in runs},
        pilot=pilot_,
        power=power,
        early=early_signal(runs),
        notes=notes,
        max_seeds=max_seeds,
    )


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value).replace("|", "\\|")


def _pct(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{100 * float(value):.0f}%"


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render(plan: Plan, *, figure: str | None = "plan.png", level: int = 2) -> str:
    """The plan as Markdown: a section headed at ``level``, every prediction labelled a
    simulation.

    Args:
        plan: The plan (:func:`make_plan`).
        figure: The figure's path relative to the Markdown file, or None to leave it out.
        level: The heading level of the section.
    """
    h = "#" * level
    runs = plan.runs
    out = [f"{h} Planner ({LABEL})", ""]
    out.append(
        f"Read {len(runs)} run(s): " + ", ".join(f"`{r.run_id}`" for r in runs) + ". "
        "Every number below the fitted tables is a simulation of the judge queue "
        "(`analysis.plan`, simpy), not a measurement."
    )
    out += ["", f"{h}# Submission process per arm (fitted)", ""]
    out += _md(
        [
            "arm",
            "seats",
            "submissions",
            "per seat-hour",
            "verdict to next (median)",
            "p90",
            "first submission (median)",
        ],
        [
            [
                r.arm,
                _fmt(r.seats),
                _fmt(r.submissions),
                _fmt(r.per_seat_hour),
                _fmt(r.think_median_s),
                _fmt(r.think_p90_s),
                _fmt(r.first_median_s),
            ]
            for r in plan.pace.itertuples()
        ],
    )
    out += ["", f"{h}# Judge seconds per outcome (fitted)", ""]
    out += _md(
        ["arm", "outcome", "count", "share", "median s", "p90 s", "untimed median s"],
        [
            [
                r.arm,
                r.outcome,
                _fmt(r.count),
                _pct(r.share),
                _fmt(r.median_s, 2),
                _fmt(r.p90_s, 2),
                _fmt(r.untimed_median_s, 2),
            ]
            for r in plan.service.itertuples()
        ],
    )
    hours = plan.horizon_s / 3600
    out += [
        "",
        f"{h}# Team size x judge ({LABEL}, {hours:.2f} h per run)",
        "",
        f"Every arm gets the same number of seats. Saturated: utilisation >= {SATURATED:.0%}. "
        "Overlap: the untimed stages (checkout, integrity, container, build, load) run on a "
        "spare CPU beside the timed job.",
        "",
    ]
    out += _md(
        [
            "seats/arm",
            "speed",
            "devices",
            "evaluations",
            "utilisation",
            "mean wait s",
            "p95 wait s",
            "evaluations, overlap",
            "saturated",
        ],
        [
            [
                _fmt(int(r.seats_per_arm)),
                f"{r.speed:g}x",
                _fmt(int(r.devices)),
                _fmt(r.evaluations, 0),
                _pct(r.utilisation),
                _fmt(r.mean_wait_s),
                _fmt(r.p95_wait_s),
                _fmt(r.evaluations_overlap, 0),
                _fmt(bool(r.saturated)),
            ]
            for r in plan.team.itertuples()
        ],
    )
    out += ["", f"{h}# The knee ({LABEL})", ""]
    out.append(
        "The smallest team at which the judge is saturated: beyond it more agents buy a "
        "longer queue, not more evaluations (seed §4)."
    )
    out.append("")
    out += _md(
        ["speed", "devices", "knee (seats per arm)", "evaluations at the knee"],
        [
            [
                f"{r.speed:g}x",
                _fmt(int(r.devices)),
                _fmt(r.knee_seats_per_arm)
                if pd.notna(r.knee_seats_per_arm)
                else f"> {max(plan.team['seats_per_arm'])}",
                _fmt(r.evaluations_at_knee, 0),
            ]
            for r in plan.knees.itertuples()
        ],
    )
    out += ["", f"{h}# Counterfactual replay ({LABEL})", ""]
    out.append(
        "The run's actual submission times and judge seconds replayed through a simulated "
        "judge under other settings; the agents' submissions stay where they were. "
        "Sooner: seconds earlier than the run knew the arm's best."
    )
    for run_id, table in plan.replays.items():
        out += ["", f"Run `{run_id}`:", ""]
        out += _md(
            [
                "scenario",
                "arm",
                "evaluations",
                "utilisation",
                "mean wait s",
                "p95 wait s",
                "best known at s",
                "sooner s",
            ],
            [
                [
                    r.scenario,
                    r.arm,
                    _fmt(r.evaluations),
                    _pct(r.utilisation),
                    _fmt(r.mean_wait_s),
                    _fmt(r.p95_wait_s),
                    _fmt(getattr(r, "best_known_s", None)),
                    _fmt(getattr(r, "sooner_s", None)),
                ]
                for r in table.itertuples()
            ],
        )
    out += ["", f"{h}# Validation: self-replay", ""]
    out.append(
        "Each run replayed under its own settings against what it measured "
        "(`analysis.tables` arms rows)."
    )
    out.append("")
    out += _md(
        ["run", "quantity", "measured", "simulated", "error"],
        [
            [
                f"`{run_id}`",
                name,
                _fmt(v["measured"], 3),
                _fmt(v["simulated"], 3),
                f"{100 * v['relative_error']:.1f}%",
            ]
            for run_id, errors in plan.self_replay.items()
            for name, v in errors.items()
        ],
    )
    out += ["", f"{h}# Seeds and power ({LABEL})", ""]
    spread = plan.pilot.spread()
    out += _md(
        ["arm", "seeds", "median x", "sd", "min", "max", "sd of raw best", "sd of re-judged"],
        [
            [
                r.arm,
                _fmt(int(r.seeds)),
                _fmt(r.median, 3),
                _fmt(r.sd, 3),
                _fmt(r.min, 3),
                _fmt(r.max, 3),
                _fmt(r.best_x_sd, 3),
                _fmt(r.rejudged_x_sd, 3),
            ]
            for r in spread.itertuples()
        ],
    )
    noise = plan.pilot.noise_sigma
    out.append("")
    if plan.power is not None:
        out.append(
            f"Seeds per arm for {POWER:.0%} power with the report's test and tie rule "
            "(`analysis.stats.compare_arms`, permutation test at p < 0.05, a tie under "
            f"2 x the judge's noise σ = {_fmt(noise, 4)}); cost for both arms."
        )
        out.append("")
        out += _md(
            ["difference", "seeds per arm", "power", "judge hours", "output tokens", "USD"],
            [
                [
                    f"{r.difference:.0%}",
                    _fmt(r.seeds_per_arm) if pd.notna(r.seeds_per_arm) else f"> {plan.max_seeds}",
                    _pct(r.power),
                    _fmt(r.judge_hours, 2),
                    _fmt(r.output_tokens, 0),
                    _fmt(r.cost_usd, 2),
                ]
                for r in plan.power.itertuples()
            ],
        )
    out += ["", "Early progress against the final best (Spearman, across seeds and arms):", ""]
    out += _md(
        ["at", "pairs", "Spearman ρ"],
        [
            [f"{r.fraction:.0%} of the phase", _fmt(r.pairs), _fmt(r.spearman, 2)]
            for r in plan.early.itertuples()
        ],
    )
    for note in plan.notes:
        out += ["", note]
    if figure:
        out += ["", f"![Team size x judge ({LABEL})]({figure})"]
    return "\n".join(out) + "\n"


def write_plan(plan: Plan, out_dir: Path) -> list[Path]:
    """Write the plan's tables (CSV), its figure (``plan.png``) and ``plan.md`` to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    tables = {
        "pace": plan.pace,
        "service": plan.service,
        "team": plan.team,
        "knees": plan.knees,
        "spread": plan.pilot.spread(),
        "early": plan.early,
        "replay": pd.concat(
            [t.assign(run_id=run_id) for run_id, t in plan.replays.items()], ignore_index=True
        ),
        "self_replay": pd.DataFrame.from_records(
            [
                {"run_id": run_id, "quantity": name, **v}
                for run_id, errors in plan.self_replay.items()
                for name, v in errors.items()
            ]
        ),
    }
    if plan.power is not None:
        tables["power"] = plan.power
    for name, table in tables.items():
        path = out_dir / f"{name}.csv"
        table.to_csv(path, index=False)
        written.append(path)
    written.append(team_figure(plan.team, out_dir / "plan.png", title="team size x judge"))
    md = out_dir / "plan.md"
    md.write_text(render(plan))
    written.append(md)
    return written
