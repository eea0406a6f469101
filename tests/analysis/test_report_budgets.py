"""The report at equal spend (``analysis.figures.spend``, ``analysis.report.budgets``) on fixture
runs: best so far against output tokens and against evaluations, the budgets of the run, which
budget ended each seat, and the flag on an arm that ended with budget unspent."""

from __future__ import annotations

import numpy as np

from analysis.figures.spend import (
    PROXY,
    RECORDS,
    evaluation_curves,
    token_curves,
    token_source,
)
from analysis.report import build_report
from analysis.report.budgets import budgets_text, ended_by, spends, unspent_budget
from analysis.tables import build_tables
from runner.events import EventLog

from .conftest import BUDGETS


def _by_arm(curves):
    return {c.arm: c for c in curves}


def test_best_against_tokens_and_evaluations_is_what_the_tables_give(run_factory):
    run = run_factory(budgets=True)
    tables = build_tables(run.path)
    info = tables.runs[0]
    arms = tables.arms.set_index("arm")
    assert token_source(tables, info) == PROXY
    tokens = _by_arm(token_curves(tables))
    # Each arm's whole spend is the proxy's count in the arms table.
    for arm in ("swarm", "solo"):
        assert tokens[arm].total == arms.loc[arm, "wire_output_tokens"]
    # The tokens of the calls finished by each new best's verdict (calls end 2 s after start).
    assert tokens["swarm"].spent.tolist() == [1500, 2500, 3300]
    assert tokens["swarm"].best.tolist() == [120, 150, 160]
    assert tokens["solo"].spent.tolist() == [700, 1200]
    assert tokens["solo"].best.tolist() == [110, 140]
    evals = _by_arm(evaluation_curves(tables))
    for arm in ("swarm", "solo"):
        assert evals[arm].total == arms.loc[arm, "evaluations"]
        assert evals[arm].best[-1] == arms.loc[arm, "best_score"]
    # swarm: c1 PASS, c2 PASS, WRONG, REJECT, WRONG, c6 PASS; solo: s1, s2 (slower), s3.
    assert evals["swarm"].spent.tolist() == [1, 2, 6]
    assert evals["solo"].spent.tolist() == [1, 3]


def test_the_report_draws_both_and_shows_the_budgets(run_factory):
    run = run_factory(budgets=True)
    report = build_report(run.path)
    drawn = {f.name: f for f in report.figures}
    assert drawn["best_vs_tokens"].path.is_file()
    assert "read by the model proxy" in drawn["best_vs_tokens"].note
    assert drawn["best_vs_evaluations"].path.is_file()
    text = report.path.read_text()
    assert "output tokens 3,000 per arm, matched between the arms; evaluations 6 per arm" in text
    assert "| solo | output tokens | 3,000 | 1,200 | 40% | **unspent** |" in text
    assert "| swarm | output tokens | 3,000 | 3,300 | 110% | spent |" in text
    assert "swarm/w1 by output tokens (3,300 of 3,000)" in text
    assert "the others (swarm/critic, solo/w1) ran until the run ended (`deadline`)" in text
    # What fair use cost each arm: waits for a slot, and refusals past the bound.
    assert (
        "Fair use of the account (per seat: 2 in flight, 20 a minute, waits <= 60 s;"
        " `isolation/fair_use.py`): swarm 1 call(s) waited 60.0 s in all, 1 answered 429;"
        " solo 1 call(s) waited 3.5 s in all, 0 answered 429." in text
    )
    # A scripted agent stays labelled scripted.
    assert "Agents: scripted (no model)" in text


def test_budget_spend_equals_the_tables(run_factory):
    run = run_factory(budgets=True)
    tables = build_tables(run.path)
    info = tables.runs[0]
    arms = tables.arms.set_index("arm")
    got = {(s.arm, s.budget): s.spent for s in spends(tables, info)}
    assert got == {
        ("swarm", "output_tokens"): arms.loc["swarm", "wire_output_tokens"],
        ("solo", "output_tokens"): arms.loc["solo", "wire_output_tokens"],
        ("swarm", "evaluations"): arms.loc["swarm", "evaluations"],
        ("solo", "evaluations"): arms.loc["solo", "evaluations"],
    }
    assert set(ended_by(tables, info)) == {("swarm", "w1"), ("swarm", "w2")}


def test_the_unspent_flag_appears_only_when_it_should(run_factory):
    run = run_factory(budgets=True)
    tables = build_tables(run.path)
    lines = unspent_budget(tables, tables.runs[0])
    assert len(lines) == 2 and all(line.startswith("solo ended with") for line in lines)
    assert "60% of its output tokens budget unspent (1,200 of 3,000 used)" in lines[0]
    assert "50% of its evaluations budget unspent (3 of 6 used)" in lines[1]
    text = build_report(run.path).path.read_text()
    assert text.count("budget unspent") == 2
    # Limits both arms reached: nothing to flag.
    events = EventLog(run.path / "events.sqlite")
    events.set_meta(
        budgets={
            **BUDGETS,
            "output_tokens": {"limit": 1200, "scope": "per_arm"},
            "evaluations": {"limit": 3, "scope": "per_arm"},
        }
    )
    tables = build_tables(run.path)
    assert unspent_budget(tables, tables.runs[0]) == []
    # Per seat, each seat against its own limit: swarm/w1 (1,500) and w2 (1,800) spent 1,300;
    # the critic (no call) and solo/w1 (1,200) did not.
    events.set_meta(budgets={"minutes": 1, "output_tokens": {"limit": 1300, "scope": "per_seat"}})
    tables = build_tables(run.path)
    flagged = unspent_budget(tables, tables.runs[0])
    assert [line.split(" ended")[0] for line in flagged] == ["swarm/critic", "solo/w1"]


def test_a_run_with_minutes_only_says_so_and_flags_nothing(run_factory):
    run = run_factory()
    report = build_report(run.path)
    info = report.tables.runs[0]
    assert budgets_text(info) == "minutes only: 1.7 min"
    text = report.path.read_text()
    assert "| budget | minutes only: 1.7 min (drain 0.5 min)" in text
    assert "## Budgets" not in text and "budget unspent" not in text
    drawn = {f.name: f for f in report.figures}
    assert drawn["best_vs_tokens"].path is None  # scripted seats: no token numbers at all
    assert drawn["best_vs_evaluations"].path is not None


def test_without_the_proxy_the_records_give_one_point_per_arm_and_say_so(run_factory):
    run = run_factory(tokens=True)
    tables = build_tables(run.path)
    assert token_source(tables, tables.runs[0]) == RECORDS
    arms = tables.arms.set_index("arm")
    for curve in token_curves(tables):
        assert curve.total == arms.loc[curve.arm, "output_tokens"]
        assert curve.spent.tolist() == [curve.total]
        assert np.array_equal(curve.best, [arms.loc[curve.arm, "best_score"]])
    drawn = {f.name: f for f in build_report(run.path).figures}
    assert "CLIs' own records" in drawn["best_vs_tokens"].note
