""" "What is not solid" finding by finding (``analysis/report/findings.py``), on the fixture run's
tables changed in memory: the arms' conditions that no report test sets up from an event log."""

from __future__ import annotations

import dataclasses

import pandas as pd

from analysis.report import FINDINGS, not_solid
from analysis.report.asymmetries import agent_kinds, resumed, start_times, token_records
from analysis.tables import build_tables


def _tables(run_factory, **options):
    tables = build_tables(run_factory(**options).path, git=False)
    return tables, tables.runs[0]


def test_not_solid_is_every_finding_in_order(run_factory):
    tables, run = _tables(run_factory)
    lines = not_solid(tables, run)
    assert lines == [line for finding in FINDINGS for line in finding(tables, run)]
    assert lines[0].startswith("One seed (seed 0)")


def test_equal_arms_raise_no_asymmetry(run_factory):
    tables, run = _tables(run_factory, tokens=True)
    for finding in (agent_kinds, start_times, token_records, resumed):
        assert finding(tables, run) == [], finding.__name__


def test_unequal_arms_are_each_said(run_factory):
    tables, run = _tables(run_factory, tokens=True)
    life = tables.lifecycle
    late = life["event"].eq("started") & life["arm"].eq("solo")
    life = life.assign(t_s=life["t_s"].where(~late, life["t_s"] + 60))
    again = life[life["event"].eq("started") & life["arm"].eq("swarm")].assign(event="resumed")
    tables = dataclasses.replace(
        tables,
        lifecycle=pd.concat([life, again], ignore_index=True),
        tokens=tables.tokens[tables.tokens["arm"] == "swarm"],
    )
    seats = [
        dataclasses.replace(s, agent_kind="codex") if s.arm == "solo" else s for s in run.seats
    ]
    run = dataclasses.replace(run, seats=seats)
    solid = "\n".join(not_solid(tables, run))
    assert "Arms ran different agent kinds (swarm: scripted (no model); solo: codex)." in solid
    assert "Arms started at different times (solo at 60.3 s, swarm at 0.0 s)" in solid
    assert "Token records exist for some arms only (none for solo)." in solid
    assert "resumed swarm/critic, swarm/w1, swarm/w2: the arms were interrupted" in solid
