"""The task kind's metric, read from the run's record: named in tables and the report, its
direction deciding what "best" means, and old records read as decode tok/s."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import formulas
from analysis.report import main
from analysis.tables import build_tables
from runner.events import EventLog
from runner.summary import summarize


def _report(run) -> str:
    assert main([str(run.path)]) == 0
    return (run.path / "analysis" / "report.md").read_text()


def _agents_passes(tables) -> pd.DataFrame:
    ev = tables.evaluations
    return ev[(ev["verdict"] == "PASS") & ~ev["pseudo_agent"]]


def _summary_agrees(run, arms: pd.DataFrame) -> None:
    """The runner's summary.csv and the arms table pick the same best, in the same metric."""
    for row in summarize(EventLog(run.path / "events.sqlite"), run.path):
        arm = arms.loc[row["arm"]]
        assert (row["metric"], row["unit"]) == (arm["metric"], arm["unit"])
        assert row["best_score"] == pytest.approx(arm["best_score"])
        assert row["best_x_baseline"] == pytest.approx(arm["best_x_baseline"])


def test_the_report_names_the_tasks_metric(run_factory) -> None:
    text = _report(run_factory())
    assert "| metric | B=16 aggregate decode tok/s (higher is better) |" in text
    assert "best tok/s" in text  # the arms table's column, in the metric's unit


def test_an_old_record_reads_as_decode_tok_s(run_factory) -> None:
    """No "metric" in the meta and no "score" in the metrics: the report still builds."""
    run = run_factory(legacy=True, tokens=True)
    tables = build_tables(run.path)
    arms = tables.arms.set_index("arm")
    assert (arms.loc["swarm", "metric"], arms.loc["swarm", "unit"]) == ("tok_s", "tok/s")
    assert arms.loc["swarm", "best_score"] == 160.0 and arms.loc["swarm", "baseline_score"] == 100.0
    assert _agents_passes(tables)["score"].notna().all()
    _summary_agrees(run, arms)
    text = _report(run)
    assert "B=16 aggregate decode tok/s (higher is better)" in text
    assert "2,000 ÷ (160.00 − 100.00) = 33 output tokens per tok/s" in text


def test_a_lower_is_better_metric_takes_the_minimum(run_factory) -> None:
    run = run_factory(latency=True, tokens=True, rechecks=True)
    tables = build_tables(run.path)
    arms = tables.arms.set_index("arm")
    passes = _agents_passes(tables)
    for arm in ("swarm", "solo"):
        mine = passes[passes["arm"] == arm]
        lowest = mine.loc[mine["score"].idxmin()]
        assert arms.loc[arm, "best_score"] == lowest["score"] < mine["score"].max()
        assert arms.loc[arm, "best_commit"] == lowest["commit"]
        # x_baseline reads "times better" for every kind: the best has the highest.
        assert arms.loc[arm, "best_x_baseline"] == pytest.approx(mine["x_baseline"].max())
        baseline = arms.loc[arm, "baseline_score"]
        expected = formulas.token_cost_per_gain(
            arms.loc[arm, "output_tokens"], baseline, lowest["score"]
        )
        assert arms.loc[arm, "token_cost_per_gain"] == pytest.approx(expected)
    _summary_agrees(run, arms)
    text = _report(run)
    assert "| metric | p50 request latency (lower is better) |" in text
    assert "best ms" in text and "output tokens per ms" in text
    assert "tok/s" not in text
