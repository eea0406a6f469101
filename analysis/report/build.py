"""Building the report: tables, figures and ``report.md`` from a run or sweep directory, and the
command line (``python -m analysis.report DIR``)."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.figures import FigureResult, make_figures
from analysis.report.ledger import ledger
from analysis.report.run_report import run_report
from analysis.report.sweep_report import sweep_report
from analysis.tables import (
    Tables,
    build_tables,
    is_run_dir,
    is_sweep_dir,
    write_table,
    write_tables,
)


@dataclass
class Report:
    """What one build wrote."""

    path: Path
    tables: Tables
    figures: list[FigureResult]
    ledger: pd.DataFrame


class MixedJudgeSettings(ValueError):
    """A run's evaluations were judged under more than one judge setting, or under settings
    other than the run's own: its numbers do not compare, so no report is made."""


def judge_settings_problems(tables: Tables) -> list[str]:
    """One line per run whose evaluations name more than one judge settings hash, or one other
    than the run's own (``judge_settings_hash`` in its meta). Evaluations from a log made
    before the hash was recorded (empty) say nothing either way."""
    problems = []
    for run in tables.runs:
        ev = tables.evaluations
        ev = ev[(ev["run_id"] == run.run_id) & (ev["settings_hash"] != "")]
        counts = ev["settings_hash"].value_counts()
        own = run.meta.get("judge_settings_hash")
        foreign = [h for h in counts.index if own and h != own]
        if len(counts) > 1 or foreign:
            shown = ", ".join(f"{h}: {n}" for h, n in counts.items())
            problems.append(
                f"run {run.run_id}: its evaluations were judged under"
                f" {len(counts)} judge setting(s) ({shown}; the run's own: {own or 'unknown'});"
                " not mixing them in one report"
            )
    return problems


def build_report(path: Path, out_dir: Path | None = None, *, plan: bool = False) -> Report:
    """Rebuild tables, figures and ``report.md`` for a run or sweep directory.

    Args:
        path: A run directory or a sweep (Hydra multirun) directory.
        out_dir: Where to write (default ``path/analysis``).
        plan: Also run the planner (``analysis.plan``, a simulation: one draw per row of its
            team table) into ``plan/`` and end the report with its section and figure.

    Returns:
        What was written.

    Raises:
        FileNotFoundError: ``path`` is neither a run nor a sweep.
        MixedJudgeSettings: a run's evaluations were judged under different judge settings.
    """
    path = Path(path)
    out = Path(out_dir) if out_dir else path / "analysis"
    tables = build_tables(path)
    problems = judge_settings_problems(tables)
    if problems:
        raise MixedJudgeSettings("; ".join(problems))
    led = ledger(tables)
    write_tables(tables, out / "tables")
    write_table(led, out / "tables", "dead_ends")
    figures = make_figures(tables, out / "figures")
    report = out / "report.md"
    if is_run_dir(path):
        text = run_report(tables, figures, led, report)
    else:
        text = sweep_report(tables, figures, led, report, path)
    if plan:
        text = text.rstrip("\n") + "\n\n" + plan_section(path, out / "plan")
    # The live view's page as one file beside the report, linked from its top.
    from analysis.view.cli import export

    export(path, out / VIEW_FILE, tables=tables)
    report.write_text(link_view(text))
    return Report(path=report, tables=tables, figures=figures, ledger=led)


def plan_section(path: Path, out: Path) -> str:
    """The planner's section for the report (its files and ``plan.png`` written to ``out``,
    ``plan/`` beside ``report.md``); one draw per row keeps it to seconds."""
    from analysis.plan import make_plan, render, write_plan

    try:
        made = make_plan([path], replications=1, draws=100)
    except ValueError as exc:  # nothing judged: the report is still made, saying why
        return f"## Planner (simulation)\n\nNo plan: {exc}.\n"
    write_plan(made, out)
    return render(made, figure=f"{out.name}/plan.png")


#: The exported view (``python -m analysis.view DIR --export``) next to ``report.md``.
VIEW_FILE = "view.html"


def link_view(text: str) -> str:
    """The report with one line linking the exported view, before its first section (after
    the title and any warning above it)."""
    line = (
        "The live view of this record as one page (race, judge, board, submissions, lineage,"
        f" cost; opens offline): [{VIEW_FILE}]({VIEW_FILE})."
    )
    head, sep, rest = text.partition("\n## ")
    return f"{head}\n{line}\n\n## {rest}" if sep else f"{text}\n{line}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m analysis.report DIR [--out OUT]``; exit 0, or 2 on bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m analysis.report",
        description="Tables, figures and report.md from a run or sweep directory.",
    )
    parser.add_argument("dir", type=Path, help="a run directory or a sweep (multirun) directory")
    parser.add_argument("--out", type=Path, help="write here instead of DIR/analysis")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="end the report with the planner's section and figure (analysis.plan, a simulation)",
    )
    args = parser.parse_args(argv)
    if not (is_run_dir(args.dir) or is_sweep_dir(args.dir)):
        print(
            f"analysis.report: {args.dir} is neither a run directory (no SQLite events.sqlite) "
            "nor a sweep directory (no job folders under a multirun.yaml)",
            file=sys.stderr,
        )
        return 2
    try:
        report = build_report(args.dir, args.out, plan=args.plan)
    except (sqlite3.DatabaseError, FileNotFoundError, PermissionError) as exc:
        print(f"analysis.report: {args.dir}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except MixedJudgeSettings as exc:
        print(f"analysis.report: {args.dir}: {exc}", file=sys.stderr)
        return 2
    print(report.path)
    return 0
