"""How the report writes numbers, shares, commits, times and tables in Markdown."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from analysis.tables import finite_or_none
from judge import Metric


def num(value: Any, digits: int = 1) -> str:
    """``1,234.5``; ``inf`` for an infinite float, ``-`` for anything else not a finite number."""
    number = finite_or_none(value)
    if number is None:
        return "inf" if isinstance(value, float) and math.isinf(value) else "-"
    return f"{number:,.{digits}f}"


def seconds(value: Any) -> str:
    """``12.3 s``, or ``-``."""
    number = finite_or_none(value)
    return "-" if number is None else f"{number:,.1f} s"


def pct(value: Any) -> str:
    """A share as a whole percentage (``0.25`` → ``25%``), or ``-``."""
    number = finite_or_none(value)
    return "-" if number is None else f"{100 * number:.0f}%"


def pct1(value: Any) -> str:
    """A share with one decimal: endpoint losses are often a few tenths of a percent."""
    number = finite_or_none(value)
    return "-" if number is None else f"{100 * number:.1f}%"


def short(sha: Any) -> str:
    """A commit's first ten characters, or ``-``."""
    return str(sha)[:10] if isinstance(sha, str) and sha else "-"


def clock(ts: float | None) -> str:
    """A Unix time as ``YYYY-MM-DD HH:MM:SS UTC``, or ``-``."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def unit_suffix(metric: Metric) -> str:
    """`` tok/s``: the metric's unit as it follows a number (empty for a unitless one)."""
    return f" {metric.unit}" if metric.unit else ""


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table's lines; a cell's pipes are escaped and its newlines become spaces."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines
