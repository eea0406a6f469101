"""A sweep's ``report.md``: its jobs, the arms per seed, the comparison across seeds, and each
job's findings said once for the seeds that share them."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pandas as pd

from analysis import stats
from analysis.figures import FigureResult
from analysis.report.arms import arms_table
from analysis.report.budgets import budgets_text
from analysis.report.endpoint import endpoint_sweep
from analysis.report.findings import not_solid
from analysis.report.independent import sweep_comparisons
from analysis.report.markdown import num, table
from analysis.report.measures import baseline_noise, subset
from analysis.report.run_report import figures_list, tables_list, titled
from analysis.tables import Tables


def across_seeds(tables: Tables, sweep_dir: Path) -> list[str]:
    """The sweep engineer's aggregate when available, else per-arm spreads and a comparison."""
    try:
        from analysis import sweep

        if hasattr(sweep, "aggregate_with_stats"):
            frame, by_arm = sweep.aggregate_with_stats(sweep_dir)
            text = [sweep.format_jobs(frame), sweep.format_stats(by_arm)]
        else:
            text = [sweep.format_jobs(sweep.aggregate(sweep_dir))]
        return [
            "From `analysis.sweep` (also in `aggregate.csv`, `aggregate_stats.csv`):",
            "",
            "```",
            *text,
            "```",
        ]
    except Exception as exc:  # the aggregate is another module's: fall back, and say why
        lines = [f"(`analysis.sweep` unavailable: {type(exc).__name__}: {exc}.)", ""]
    metric = tables.runs[0].metric
    best = tables.arms.dropna(subset=["best_score"])
    arms = list(dict.fromkeys(tables.arms["arm"]))
    noise = baseline_noise(tables)
    for arm in arms:
        values = best.loc[best["arm"] == arm, "best_score"].tolist()
        if values:
            s = stats.arm_spread(values)
            lines.append(
                f"- **{arm}**: best {metric.unit or metric.name} over {s.n} seed(s): median "
                f"{num(s.median)}"
                f" (IQR {num(s.q25)}–{num(s.q75)}, range {num(s.minimum)}–"
                f"{num(s.maximum)})."
            )
    for a, b in combinations(arms, 2):
        paired = best[best["arm"] == a].merge(best[best["arm"] == b], on="run_id")
        if paired.empty:
            continue
        # compare_arms calls the larger better: a lower-is-better metric is compared by its
        # x_baseline (times better than the baseline), the noise scaled alike.
        column = "best_score" if metric.higher_is_better else "best_x_baseline"
        scale = float(paired[f"{column}_y"].median())
        sigma = noise[0] / noise[1] * scale if noise else None
        result = stats.compare_arms(
            paired[f"{column}_x"].tolist(),
            paired[f"{column}_y"].tolist(),
            arm_a=a,
            arm_b=b,
            noise_sigma=sigma,
        )
        lines.append(f"- **{a} vs {b}**: {result.outcome}. {result.reason}")
    return lines


def sweep_report(
    tables: Tables, figures: list[FigureResult], led: pd.DataFrame, out: Path, sweep_dir: Path
) -> str:
    """A sweep's ``report.md`` text; ``out`` is where it goes, ``sweep_dir`` the sweep."""
    first = tables.runs[0]
    unfinished = [r for r in tables.runs if not r.finished]
    lines = [f"# Sweep report: {first.experiment}, {first.task}, {len(tables.runs)} job(s)", ""]
    if unfinished or tables.missing:
        lines += [
            f"> **INCOMPLETE**: {len(unfinished)} job(s) did not finish and "
            f"{len(tables.missing)} left no event log.",
            "",
        ]
    jobs = [
        [
            r.run_dir.relative_to(sweep_dir).as_posix(),
            r.seed,
            r.status,
            r.agent_kind,
            budgets_text(r),
            ", ".join(r.arms),
        ]
        for r in tables.runs
    ]
    jobs += [
        [p.relative_to(sweep_dir).as_posix(), "-", "no event log", "-", "-", "-"]
        for p in tables.missing
    ]
    lines += [
        "## Jobs",
        "",
        *table(["job", "seed", "status", "agent kind", "budgets", "arms"], jobs),
        "",
        "## Arms, per seed",
        "",
        *arms_table(tables.arms, True, first.metric),
        "",
        *endpoint_sweep(tables),
        "## Across seeds",
        "",
        *across_seeds(tables, sweep_dir),
        "",
        *titled(
            "## Three arms, across seeds (the board's effect, more seats' effect)",
            sweep_comparisons(tables),
        ),
        "## Figures",
        "",
        *figures_list(figures, out.parent),
        "## Relays and dead ends",
        "",
    ]
    counts = [
        [
            r.seed,
            arm,
            int((tables.relays["run_id"] == r.run_id).mul(tables.relays["arm"] == arm).sum())
            if len(tables.relays)
            else 0,
            int(((led["run_id"] == r.run_id) & (led["arm"] == arm)).sum()),
        ]
        for r in tables.runs
        for arm in r.arms
    ]
    lines += [
        *table(["seed", "arm", "relay edges", "dead ends"], counts),
        "",
        "Details: `tables/relays.csv`, `tables/dead_ends.csv`.",
        "",
        "## What is not solid",
        "",
    ]
    for path in tables.missing:
        lines.append(
            f"- Job `{path.relative_to(sweep_dir).as_posix()}` left no event log: it "
            "failed before its run started."
        )
    seeds_of: dict[str, list[str]] = {}
    for run in tables.runs:
        for line in not_solid(subset(tables, run), run):
            if not line.startswith("One seed"):  # a sweep is the answer to that one
                seeds_of.setdefault(line, []).append(str(run.seed))
    # A finding every seed shares is said once.
    lines += [f"- seed {', '.join(seeds)}: {line}" for line, seeds in seeds_of.items()]
    lines += ["", *tables_list()]
    return "\n".join(lines) + "\n"
