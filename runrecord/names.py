"""Names a run record uses: the runner's pseudo-agents, the labels tables show, and the names
older runs wrote that a reader still accepts.

Re-judging is one idea with one word (``re-judge``): after the deadline the runner judges each
arm's best again (pseudo-agent ``rejudge``) and its starting commit (``baseline``). Runs made
before the word was settled called these ``confirm`` and their columns ``confirmed_*``; the
``LEGACY_*`` maps read them under today's names.

This module is the one place older runs' names are read: they are kept only so that old run
directories (their ``events.sqlite``, ``summary.csv`` and ``arms`` tables) still read; nothing
writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

# Pseudo-agents: evaluations the runner asks for, never an agent's work.
CHAMPION = "champion"
REJUDGE = "rejudge"
BASELINE = "baseline"
#: Each pseudo-agent with what it is (the ``agent_kind`` tables show for its rows).
PSEUDO_AGENTS: Mapping[str, str] = {
    CHAMPION: "runner (champion re-measurement)",
    REJUDGE: "runner (re-judging the arm's best)",
    BASELINE: "runner (re-judging the start commit)",
}
#: The pseudo-agents of the re-judging after the deadline: not part of the agents' phase.
REJUDGING_AGENTS = frozenset({REJUDGE, BASELINE})

#: Agent names older runs wrote, by today's name.
LEGACY_AGENTS: Mapping[str, str] = {"confirm": REJUDGE}
#: ``summary.csv`` and ``arms`` columns older runs wrote, by today's name (``runrecord.row``).
#: ``agents``, ``x_baseline`` and ``judge_busy_pct`` are the names ``summary.csv`` used before
#: it and the ``arms`` table became one row.
LEGACY_COLUMNS: Mapping[str, str] = {
    "confirmed_score": "rejudged_score",
    "confirmed_x_baseline": "rejudged_x_baseline",
    "confirm_verdicts": "rejudged_verdicts",
    "agents": "seats",
    "x_baseline": "best_x_baseline",
    "judge_busy_pct": "judge_utilisation",
}
#: Older columns whose value was in another unit: what to divide it by for today's (a percent
#: to a fraction).
LEGACY_DIVISORS: Mapping[str, float] = {"judge_busy_pct": 100.0}
#: The meta key saying when the runner began re-judging (older runs: ``rechecks_started_at``).
REJUDGING_STARTED_AT = "rejudging_started_at"
LEGACY_META: Mapping[str, str] = {"rechecks_started_at": REJUDGING_STARTED_AT}


def agent_name(name: str) -> str:
    """Today's name of an agent a run recorded (an older run's ``confirm`` is ``rejudge``)."""
    return LEGACY_AGENTS.get(name, name)


def current_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``summary.csv`` (or ``arms``) row with older runs' column names read as today's.

    A value in an older unit is converted (``LEGACY_DIVISORS``); it keeps its type: a number
    stays a number, a ``summary.csv`` field read as text stays text (an empty one stays empty).
    """
    return {LEGACY_COLUMNS.get(k, k): _converted(v, LEGACY_DIVISORS.get(k)) for k, v in row.items()}


def _converted(value: Any, divisor: float | None) -> Any:
    if divisor is None or value == "" or not isinstance(value, (str, int, float)):
        return value  # an empty field, None or pandas' NA stays as it is
    # In decimal: a percent written with one decimal is a fraction with three (57.1: 0.571).
    fraction = Decimal(str(value)) / Decimal(str(divisor))
    return str(fraction) if isinstance(value, str) else float(fraction)


def rejudging_started_at(meta: Mapping[str, Any]) -> float | None:
    """When the runner began re-judging (under either meta key), or None if it never did."""
    for key in (REJUDGING_STARTED_AT, *LEGACY_META):
        value = meta.get(key)
        if value is not None:
            return float(value)
    return None


def agent_kind_label(kind: str, scripted: bool) -> str:
    """The ``agent_kind`` every table shows: scripted agents say plainly that no model ran."""
    if not scripted:
        return kind
    return "scripted (no model)" if kind == "scripted" else f"{kind} (scripted, no model)"


def isolation_label(isolation: str) -> str:
    """The ``isolation`` tables show: the local backend says that it isolates nothing."""
    return "local (NOT isolated)" if isolation == "local" else isolation


#: The names a run whose re-judging began under the older words (its meta holds a
#: ``LEGACY_META`` key) keeps using when resumed: its best's pseudo-agent and the word of its
#: request ids, so that no round is queued twice under a second name.
LEGACY_REJUDGE_NAMES = ("confirm", "recheck")


def rejudging_names(meta: Mapping[str, Any]) -> tuple[str, str]:
    """The pseudo-agent of an arm's best re-judged and the word of its request ids: today's,
    or an older run's (``LEGACY_REJUDGE_NAMES``) for a run that began re-judging under them."""
    if any(key in meta for key in LEGACY_META):
        return LEGACY_REJUDGE_NAMES
    return REJUDGE, "rejudge"
