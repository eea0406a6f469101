"""The per-arm row, defined once: every column with its name, its meaning, its digits and the
surfaces that show it.

One row per arm of a run. ``summary.csv`` (written by ``runner.summary``), the printed summary
at a run's end, the analysis' ``arms`` table (``analysis.arms_table``), the report's ``## Arms``
table (``analysis.report.arms``) and the view's panels (``analysis.view.data``) each show the
columns ``ROW`` says they show, under the one name ``ROW`` gives, projected by ``columns`` and
``project``. A new per-arm column is one ``Column`` here plus its value where it is computed.

The values come from the run record: the per-arm facts (``runrecord.facts.arm_facts``, turned
into columns by ``fact_values`` and ``call_values`` for both the runner and the analysis), the
run's metadata and seats, and, for the columns only the analysis shows, its own tables (tokens,
messages, the judge formulas). Every value is unrounded; ``summary.csv`` rounds a column that
has ``digits``, the ``arms`` table keeps every digit. Older runs' names for these columns are
read in one place, ``runrecord.names.current_columns``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from runrecord.facts import ArmFacts, ModelCallFacts

# The surfaces a column can be shown on.
SUMMARY_CSV = "summary.csv"  # the runner's summary.csv, one row per arm
PRINTED = "printed"  # the table the runner prints at a run's end (floats with two decimals)
ARMS = "arms"  # the analysis' arms table (arms.csv / arms.parquet, every digit)
REPORT = "report"  # the report's "## Arms" table (analysis.report.arms.arms_table)
VIEW_RACE = "view:race"  # the view's race panel (analysis.view.data: race.arms)
VIEW_JUDGE = "view:judge"  # the view's judge panel (judge.capacity)
VIEW_COST = "view:cost"  # the view's cost panel (cost.arms: tokens and model calls)
SURFACES = (SUMMARY_CSV, PRINTED, ARMS, REPORT, VIEW_RACE, VIEW_JUDGE, VIEW_COST)


class _Metric(Protocol):  # judge.kinds.Metric, as far as the row uses it
    name: str
    unit: str


@dataclass(frozen=True)
class Column:
    """One column of the per-arm row.

    Attributes:
        name: The column's one name, on every surface.
        meaning: What the value is (the documentation's text).
        shown: The surfaces that show it (``SURFACES``).
        digits: Decimal digits ``summary.csv`` rounds it to (None: written as computed).
        dtype: The ``arms`` table's pandas dtype (None: as pandas infers it).
    """

    name: str
    meaning: str
    shown: frozenset[str]
    digits: int | None = None
    dtype: str | None = None


def _col(name: str, shown: str, meaning: str, digits: int | None = None, dtype: str | None = None):
    """A ``Column`` with ``shown`` written as space-separated surface names (or ``all``)."""
    surfaces = frozenset(SURFACES if shown == "all" else shown.split())
    unknown = surfaces - set(SURFACES)
    if unknown:
        raise ValueError(f"column {name}: unknown surfaces {sorted(unknown)}")
    return Column(name, meaning, surfaces, digits, dtype)


_CSV = f"{SUMMARY_CSV} {ARMS}"  # the summary's columns (the arms table shows all of them)
_INT = "Int64"

#: The per-arm row, in column order (every surface keeps this order).
ROW: tuple[Column, ...] = (
    _col("run_id", f"{ARMS} {VIEW_RACE} {VIEW_JUDGE} {VIEW_COST}", "the run's id"),
    _col("seed", f"{ARMS} {REPORT} {VIEW_RACE}", "the run's seed", dtype=_INT),
    _col("task", ARMS, "the task's name"),
    _col("status", ARMS, "the run's status (finished, or why it stopped)"),
    _col("arm", "all", "the arm's name"),
    _col("agent_kind", f"{_CSV} {PRINTED} {REPORT}",
         "the arm's seats' agent kinds; scripted agents say plainly that no model ran"),
    _col("scripted", ARMS, "whether every seat of the arm is scripted"),
    _col("isolation", f"{_CSV} {PRINTED}",
         "the agents' isolation (the local backend says that it isolates nothing)"),
    _col("start", ARMS, "the commit the arm started from (its config's start, else master)"),
    _col("seats", f"{_CSV} {PRINTED} {REPORT}", "the arm's seats (agents)"),
    _col("workers", f"{ARMS} {REPORT}", "of the seats, the workers"),
    _col("critics", f"{ARMS} {REPORT}", "of the seats, the critics"),
    _col("budget_minutes", ARMS, "the run's time budget in minutes", dtype="float"),
    _col("run_seconds", f"{ARMS} {VIEW_JUDGE}",
         "the agents' phase in seconds: the run's start to the runner's re-judging, else to "
         "its end, else to the last event of an unfinished run"),
    _col("submissions", f"{ARMS} {REPORT}", "the agents' submissions (pseudo-agents' left out)"),
    _col("evaluations", f"{_CSV} {PRINTED} {REPORT}", "the agents' evaluations"),
    _col("duplicates", f"{_CSV} {REPORT}",
         "of those, how many reused an earlier verdict of the same tree (judge.duplicates)"),
    _col("pass", f"{_CSV} {PRINTED} {REPORT}", "the agents' PASS verdicts"),
    _col("wrong", f"{_CSV} {PRINTED} {REPORT}", "the agents' WRONG verdicts"),
    _col("reject", f"{_CSV} {PRINTED} {REPORT}", "the agents' REJECT verdicts"),
    _col("error", f"{_CSV} {PRINTED} {REPORT}", "the agents' ERROR verdicts"),
    _col("not_evaluated", _CSV, "the agents' submissions the judge never scored"),
    _col("metric", _CSV, "the task kind's metric the scores are counted in"),
    _col("unit", f"{_CSV} {PRINTED}", "the metric's unit"),
    _col("best_score", f"{_CSV} {PRINTED} {REPORT} {VIEW_RACE} {VIEW_COST}",
         "the agents' best PASS's score (the highest, or the lowest for a lower-is-better "
         "metric)", dtype="float"),
    _col("best_x_baseline", f"{_CSV} {PRINTED} {REPORT} {VIEW_RACE}",
         "that PASS's score as a multiple of the baseline's", dtype="float"),
    _col("x_champion", f"{SUMMARY_CSV} {PRINTED}",
         "a continuation: how many times better the best is than the starting champion, "
         "re-measured in the same run", digits=3),
    _col("best_commit", f"{ARMS} {REPORT} {VIEW_RACE}", "the best PASS's commit"),
    _col("best_agent", f"{ARMS} {REPORT} {VIEW_RACE}", "the agent that submitted it"),
    _col("time_to_best_s", f"{_CSV} {PRINTED} {REPORT} {VIEW_RACE}",
         "seconds from the run's start to the best PASS's verdict", digits=1, dtype="float"),
    _col("rejudged_score", f"{_CSV} {VIEW_RACE}",
         "the best judged again after the deadline (the runner's re-judging): the median "
         "score of its PASSes", digits=3, dtype="float"),
    _col("rejudged_x_baseline", f"{_CSV} {PRINTED} {REPORT} {VIEW_RACE}",
         "the same median as a multiple of the baseline", digits=4, dtype="float"),
    _col("rejudged_verdicts", f"{_CSV} {REPORT} {VIEW_RACE}",
         "every verdict the re-judged best got, comma-separated (a best that fails when "
         "re-judged is a finding)"),
    _col("judge_noise_x_sd", f"{_CSV} {VIEW_RACE}",
         "standard deviation of x_baseline over the start commit's re-judgements, pooled over "
         "the arms: the judge's own noise, the yardstick for a tie", digits=4, dtype="float"),
    _col("baseline_score", f"{ARMS} {VIEW_RACE} {VIEW_COST}",
         "median of every baseline measurement in the run (one value shared by all arms)",
         dtype="float"),
    _col("judge_evaluations", f"{ARMS} {VIEW_JUDGE}",
         "evaluations in the agents' phase: theirs plus any champion re-measurement"),
    _col("judge_seconds", f"{ARMS} {VIEW_JUDGE}",
         "judge seconds of those inside the agents' phase", dtype="float"),
    _col("seconds_per_evaluation", f"{ARMS} {VIEW_JUDGE}",
         "judge_seconds / judge_evaluations", dtype="float"),
    _col("full_evaluation_s", f"{ARMS} {VIEW_JUDGE}",
         "median duration of a PASS judged in the phase (every stage ran)", dtype="float"),
    _col("judge_capacity", f"{ARMS} {VIEW_JUDGE}",
         "evaluations the judge could run in the phase (analysis.formulas.judge_capacity)",
         dtype="float"),
    _col("judge_utilisation", f"{_CSV} {PRINTED} {REPORT} {VIEW_JUDGE}",
         "the fraction of the agents' phase the judge was busy with the arm: judge_seconds / "
         "run_seconds (analysis.formulas.judge_utilisation)", digits=3, dtype="float"),
    _col("mean_queue_wait_s", f"{_CSV} {PRINTED} {REPORT} {VIEW_JUDGE}",
         "mean seconds the agents' submissions waited in the judge's queue", digits=1,
         dtype="float"),
    _col("messages", ARMS, "posts on the arm's board"),
    _col("restarts", f"{_CSV} {REPORT}", "times an agent of the arm was restarted"),
    _col("exits", ARMS, "times an agent of the arm exited"),
    _col("token_records", f"{ARMS} {VIEW_COST}", "the CLIs' token records"),
    _col("output_tokens", f"{ARMS} {REPORT} {VIEW_COST}",
         "output tokens the CLIs recorded (empty without token records)", dtype=_INT),
    _col("token_cost_per_gain", f"{ARMS} {VIEW_COST}",
         "output tokens per unit of the metric gained over baseline_score (empty without token "
         "records, inf without gain)", dtype="float"),
    _col("relays", f"{_CSV} {PRINTED} {REPORT}",
         "PASSes that first took up another agent's PASS, from the submission repository's "
         "ancestry (empty without a repository)", dtype=_INT),
    _col("model_calls", f"{_CSV} {VIEW_COST}",
         "the seats' calls through the model proxy (empty for a run without it)", dtype=_INT),
    _col("model_call_failures", f"{_CSV} {VIEW_COST}",
         "of those, the endpoint's failures (429, 5xx, unreachable: runrecord.failed)",
         dtype=_INT),
    _col("model_lost_s", f"{_CSV} {VIEW_COST}",
         "seat-seconds lost from each failed call to the next answered one, summed over seats",
         digits=1, dtype="float"),
    _col("wire_output_tokens", f"{_CSV} {VIEW_COST}",
         "output tokens (reasoning included) the vendor's responses reported, read on the wire "
         "by the proxy: the check on output_tokens", dtype=_INT),
)  # fmt: skip

#: Each column by name.
COLUMNS_BY_NAME: Mapping[str, Column] = {c.name: c for c in ROW}


def columns(surface: str) -> list[str]:
    """The names of the columns ``surface`` shows, in the row's order.

    Raises:
        ValueError: No such surface.
    """
    if surface not in SURFACES:
        raise ValueError(f"no surface {surface!r}: one of {SURFACES}")
    return [c.name for c in ROW if surface in c.shown]


def csv_value(column: str, value: Any) -> Any:
    """A value as ``summary.csv`` holds it: rounded to the column's digits; None stays None."""
    digits = COLUMNS_BY_NAME[column].digits
    if digits is None or value is None:
        return value
    return round(value, digits)


def project(values: Mapping[str, Any], surface: str) -> dict[str, Any]:
    """One arm's values as ``surface`` shows them: its columns in order, ``summary.csv``'s
    rounded.

    Args:
        values: The arm's values by column name (more columns than the surface's may be given).
        surface: One of ``SURFACES``.

    Raises:
        KeyError: A column the surface shows has no value in ``values``.
    """
    missing = [c for c in columns(surface) if c not in values]
    if missing:
        raise KeyError(f"{surface}: no value for {missing}")
    if surface == SUMMARY_CSV:
        return {c: csv_value(c, values[c]) for c in columns(surface)}
    return {c: values[c] for c in columns(surface)}


def fact_values(facts: ArmFacts, metric: _Metric, noise: float | None) -> dict[str, Any]:
    """The columns the run record's per-arm facts give, unrounded (runner and analysis alike).

    Args:
        facts: The arm's facts (``runrecord.arm_facts``).
        metric: The run's metric (its name and unit).
        noise: The judge's noise over the run's arms (``runrecord.judge_noise``).
    """
    best = facts.best
    judge_n = facts.judge_evaluations
    return {
        "submissions": facts.submissions,
        "evaluations": facts.evaluations,
        "duplicates": facts.duplicates,
        "pass": facts.pass_,
        "wrong": facts.wrong,
        "reject": facts.reject,
        "error": facts.error,
        "not_evaluated": facts.not_evaluated,
        "metric": metric.name,
        "unit": metric.unit,
        "best_score": facts.best_score,
        "best_x_baseline": facts.best_x_baseline,
        "best_commit": best.commit if best is not None else None,
        "best_agent": best.agent if best is not None else None,
        "time_to_best_s": facts.time_to_best_s,
        "rejudged_score": facts.rejudged_score,
        "rejudged_x_baseline": facts.rejudged_x_baseline,
        "rejudged_verdicts": facts.rejudged_verdicts,
        "judge_noise_x_sd": noise,
        "judge_evaluations": judge_n,
        "judge_seconds": facts.judge_seconds,
        "seconds_per_evaluation": facts.judge_seconds / judge_n if judge_n else None,
        "full_evaluation_s": facts.full_evaluation_s,
        "judge_utilisation": facts.judge_utilisation,
        "mean_queue_wait_s": facts.mean_queue_wait_s,
    }


def call_values(calls: ModelCallFacts | None) -> dict[str, Any]:
    """The model-proxy columns (all None for a run without the proxy)."""
    return {
        "model_calls": calls.calls if calls else None,
        "model_call_failures": calls.failures if calls else None,
        "model_lost_s": calls.lost_s if calls else None,
        "wire_output_tokens": calls.wire_output_tokens if calls else None,
    }


def documented(surface: str) -> Iterable[tuple[str, str]]:
    """``(name, meaning)`` of each column ``surface`` shows, for documentation."""
    return ((c.name, c.meaning) for c in ROW if surface in c.shown)
