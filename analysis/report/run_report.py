"""A run's ``report.md``: its sections in order, from the facts to what is not solid."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.figures import FigureResult
from analysis.report.arms import arms_table, facts_table
from analysis.report.budgets import budget_section, run_budgets
from analysis.report.endpoint import endpoint_section
from analysis.report.findings import not_solid
from analysis.report.independent import audit_section, comparison_section
from analysis.report.ledger import ledger_section
from analysis.report.measured import formulas_section
from analysis.report.relays import relays_section
from analysis.report.server import server_section
from analysis.tables import Tables


def run_report(tables: Tables, figures: list[FigureResult], led: pd.DataFrame, out: Path) -> str:
    """A run's ``report.md`` text; ``out`` is where it goes (figure links are relative to it)."""
    run = tables.runs[0]
    lines = [f"# Report: {run.experiment}, {run.task}, seed {run.seed}", ""]
    if not run.finished:
        lines += [
            f"> **INCOMPLETE**: this run did not finish (status `{run.status}`). The "
            "report covers what was recorded up to its last event.",
            "",
        ]
    if run.scripted:
        lines += [
            f"> Agents: {run.agent_kind}. Every number below is from scripted programs, "
            "not from a model.",
            "",
        ]
    lines += [
        "## Run",
        "",
        *facts_table(run),
        "",
        "## Arms",
        "",
        *arms_table(tables.arms, False, run.metric),
        "",
        # A run with a private arm: the board's effect, more seats' effect, and the audit.
        *titled("## Three arms", comparison_section(tables, run)),
        *titled("## What differs between the arms", audit_section(tables, run)),
        *(budget_section(tables, run) if run_budgets(run) else []),
        *endpoint_section(tables, run),
        *server_section(tables, run),
        "## The formulas, measured",
        "",
        *formulas_section(tables, run),
        "",
        "## Figures",
        "",
        *figures_list(figures, out.parent),
        "## Relay graph",
        "",
        *relays_section(tables, run),
        "",
        "## Dead-end ledger",
        "",
        *ledger_section(led),
        "",
        "## What is not solid",
        "",
        *[f"- {line}" for line in not_solid(tables, run)],
        "",
        *tables_list(),
    ]
    return "\n".join(lines) + "\n"


def titled(heading: str, lines: list[str]) -> list[str]:
    """A section: its heading and ``lines``, or nothing when there are none."""
    return [heading, "", *lines, ""] if lines else []


def figures_list(figures: list[FigureResult], base: Path) -> list[str]:
    """``## Figures``: each drawn figure linked from ``base``, then the ones not drawn and why."""
    out, skipped = [], []
    for fig in figures:
        if fig.path is None:
            skipped.append(f"- *{fig.title}*: not drawn: {fig.note}.")
        else:
            rel = fig.path.relative_to(base).as_posix()
            note = f" ({fig.note})" if fig.note else ""
            out += [f"### {fig.title}", "", f"![{fig.title}]({rel}){note}", ""]
    return out + (["Not drawn:", "", *skipped, ""] if skipped else [])


def tables_list() -> list[str]:
    """``## Tables``: where the tidy tables are."""
    return [
        "## Tables",
        "",
        "In `tables/` as Parquet and CSV, one row per thing (columns: `analysis/tables.py`):"
        " `evaluations`, `submissions`, `messages`, `tokens`, `lifecycle`, `model_calls`,"
        " `arms`, `relays` and `dead_ends`.",
    ]
