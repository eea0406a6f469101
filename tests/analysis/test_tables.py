"""Tidy tables, relays and dead ends from a fixture run (see conftest for what it holds)."""

from __future__ import annotations

import math
import sqlite3

import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis._git import CommitGraph, dead_ends, relay_table
from analysis.tables import COLUMNS, TABLES, build_tables, write_tables

from .conftest import RUN_S


def test_one_row_per_thing_with_explicit_columns(fixture_run):
    tables = build_tables(fixture_run.path)
    sizes = {name: len(df) for name, df in tables.items()}
    assert sizes == {
        "evaluations": 9,
        "submissions": 10,
        "messages": 2,
        "tokens": 0,
        "lifecycle": 6,
        "model_calls": 0,
        "arms": 2,
    }
    for name, df in tables.items():
        assert list(df.columns) == COLUMNS[name], name
        assert set(df["run_id"]) <= {"fixture-0"} and (df["seed"] == 0).all()
    for name in ("evaluations", "submissions", "messages", "tokens", "lifecycle"):
        kinds = set(getattr(tables, name)["agent_kind"])
        assert kinds <= {"scripted (no model)"}, (name, kinds)
    assert set(tables.arms["agent_kind"]) == {"scripted (no model)"}
    critic = tables.messages[tables.messages["author"] == "critic"]
    assert critic["role"].tolist() == ["critic"]


def test_evaluation_flags_and_times(fixture_run):
    ev = build_tables(fixture_run.path).evaluations.set_index("commit")
    c = fixture_run.commits
    assert ev.loc[c["c3"], "verdict"] == "WRONG" and bool(ev.loc[c["c3"], "tokens_correct"])
    assert not pd.isna(ev.loc[c["c5"], "tokens_correct"])
    assert not ev.loc[c["c5"], "tokens_correct"] and bool(ev.loc[c["c5"], "near_tie"])
    assert pd.isna(ev.loc[c["c4"], "tokens_correct"])  # a REJECT: tokens never checked
    assert bool(ev.loc[c["c6"], "b1_unresolved"]) and not ev.loc[c["c1"], "b1_unresolved"]
    assert ev.loc[c["c2"], "t_start_s"] == pytest.approx(22.0)
    assert ev.loc[c["c2"], "t_end_s"] == pytest.approx(32.0)
    assert ev.loc[c["c2"], "duration_s"] == pytest.approx(10.0)
    assert ev.loc[c["s1"], "queue_wait_s"] == pytest.approx(9.0)
    assert ev.loc[c["c2"], "score"] == 150.0 and ev.loc[c["c2"], "baseline_score"] == 104.0
    assert (ev.loc[c["c2"], "metric"], ev.loc[c["c2"], "unit"]) == ("tok_s", "tok/s")


def test_arms_fill_in_the_formulas_from_measured_values(fixture_run):
    arms = build_tables(fixture_run.path).arms.set_index("arm")
    swarm, solo = arms.loc["swarm"], arms.loc["solo"]
    assert (swarm["pass"], swarm["wrong"], swarm["reject"], swarm["error"]) == (3, 2, 1, 0)
    assert (solo["pass"], solo["not_evaluated"], solo["submissions"]) == (3, 1, 4)
    assert swarm["best_score"] == 160.0 and swarm["best_agent"] == "w2"
    assert (swarm["metric"], swarm["unit"]) == ("tok_s", "tok/s")
    assert swarm["best_commit"] == fixture_run.commits["c6"]
    assert solo["best_score"] == 140.0 and solo["time_to_best_s"] == pytest.approx(76.0)
    assert swarm["baseline_score"] == 100.0  # the median of the six baseline measurements
    assert swarm["run_seconds"] == pytest.approx(RUN_S)
    # swarm: 10 + 10 + 5 + 0.1 + 5 + 10 s of judge time over 6 evaluations.
    assert swarm["judge_seconds"] == pytest.approx(40.1)
    assert swarm["seconds_per_evaluation"] == pytest.approx(40.1 / 6)
    assert swarm["judge_capacity"] == pytest.approx(RUN_S / (40.1 / 6))
    assert swarm["judge_utilisation"] == pytest.approx(0.401)
    assert solo["judge_capacity"] == pytest.approx(10.0)
    assert solo["full_evaluation_s"] == pytest.approx(10.0)
    assert (swarm["relays"], solo["relays"]) == (1, 0)
    assert (swarm["restarts"], swarm["exits"], solo["restarts"]) == (1, 1, 0)
    assert pd.isna(swarm["output_tokens"]) and pd.isna(swarm["token_cost_per_gain"])


def test_token_cost_only_where_token_records_exist(run_factory):
    arms = build_tables(run_factory(tokens=True).path).arms.set_index("arm")
    assert arms.loc["swarm", "output_tokens"] == 2000
    assert arms.loc["swarm", "token_cost_per_gain"] == pytest.approx(2000 / (160 - 100))
    assert arms.loc["solo", "token_cost_per_gain"] == pytest.approx(1000 / (140 - 100))


def test_relays_follow_git_ancestry_across_agents(fixture_run):
    tables = build_tables(fixture_run.path)
    edges = tables.relays
    assert len(edges) == 1
    edge = edges.iloc[0]
    c = fixture_run.commits
    assert (edge["from_agent"], edge["from_commit"]) == ("w1", c["c1"])
    assert (edge["to_agent"], edge["to_commit"]) == ("w2", c["c2"])
    # c6 builds on w2's own c2: the pickup of c1 was counted once, at c2.
    repo = fixture_run.path / "arms" / "swarm" / "submissions.git"
    swarm = tables.evaluations[tables.evaluations["arm"] == "swarm"]
    assert len(relay_table(repo, swarm, start=fixture_run.start)) == 1


def test_dead_ends_are_pinned_to_commits_files_and_functions(fixture_run):
    tables = build_tables(fixture_run.path)
    c = fixture_run.commits
    repo = fixture_run.path / "arms" / "swarm" / "submissions.git"
    subs = tables.submissions
    ends = dead_ends(
        repo,
        subs[subs["arm"] == "swarm"],
        tables.relays,
        c["c6"],
        fixture_run.start,
        messages=tables.messages,
        graph=CommitGraph.load(repo),
    )
    lines = {tuple(e.commits): e for e in ends}
    assert set(lines) == {(c["c3"],), (c["c4"], c["c5"])}
    w1 = lines[(c["c4"], c["c5"])]
    assert w1.agent == "w1" and w1.base == fixture_run.start and w1.base_owner == "start"
    assert w1.verdicts == ["REJECT frozen_zone", "WRONG mismatch"]
    assert w1.changes is not None
    assert w1.changes.files == ["engine.py", "harness/check.py"]
    assert w1.changes.functions == {"engine.py": ["head"]}
    assert w1.declared == ["c5 is a dead end"]
    w2 = lines[(c["c3"],)]
    assert w2.base == c["c2"] and w2.base_owner == "w2"
    assert w2.changes is not None and w2.changes.functions == {"engine.py": ["moe"]}
    solo = dead_ends(
        fixture_run.path / "arms" / "solo" / "submissions.git",
        subs[subs["arm"] == "solo"],
        tables.relays.iloc[0:0],
        c["s3"],
        fixture_run.start,
    )
    # s2 PASSed but was slower and never built on; s4 was never evaluated (cut off, not dead).
    assert [e.commits for e in solo] == [[c["s2"]]]
    assert solo[0].verdicts == ["PASS 1.05x"]


def test_written_twice_byte_for_byte(fixture_run, tmp_path):
    tables = build_tables(fixture_run.path)
    first = {p.name: p.read_bytes() for p in write_tables(tables, tmp_path / "a")}
    again = build_tables(fixture_run.path)
    second = {p.name: p.read_bytes() for p in write_tables(again, tmp_path / "b")}
    assert set(first) == {f"{n}.{ext}" for n in (*TABLES, "relays") for ext in ("csv", "parquet")}
    assert first == second
    back = pd.read_parquet(tmp_path / "a" / "evaluations.parquet")
    assert list(back.columns) == COLUMNS["evaluations"] and len(back) == 9


def test_unfinished_run_ends_at_its_last_event(run_factory):
    tables = build_tables(run_factory(status="running").path)
    run = tables.runs[0]
    assert not run.finished and run.ended_at is None
    assert run.run_seconds == pytest.approx(95.0)  # s4, the last thing recorded
    assert tables.arms["status"].tolist() == ["running", "running"]


def test_sweep_stacks_jobs_with_run_id_and_seed(sweep_dir):
    tables = build_tables(sweep_dir)
    assert [r.seed for r in tables.runs] == [1, 2]
    assert [p.name for p in tables.missing] == ["seed=3"]
    assert tables.arms[["seed", "arm"]].values.tolist() == [
        [1, "swarm"],
        [1, "solo"],
        [2, "swarm"],
        [2, "solo"],
    ]
    assert len(tables.evaluations) == 18
    assert set(tables.evaluations["run_id"]) == {"fixture-1", "fixture-2"}
    assert len(tables.relays) == 2


def test_neither_run_nor_sweep_is_refused(tmp_path):
    (tmp_path / "junk").mkdir()
    with pytest.raises(FileNotFoundError, match="neither a run"):
        build_tables(tmp_path / "junk")


def test_capacity_formula_matches_arms_row(fixture_run):
    from analysis.formulas import judge_capacity, judge_utilisation

    row = build_tables(fixture_run.path).arms.iloc[0]
    per = row["seconds_per_evaluation"]
    assert math.isclose(row["judge_capacity"], judge_capacity(row["run_seconds"], per))
    assert math.isclose(
        row["judge_utilisation"], judge_utilisation(row["judge_evaluations"], per, RUN_S)
    )


def test_the_runners_rechecks_are_not_the_agents_work(run_factory):
    run = run_factory(rechecks=True)
    tables = build_tables(run.path)
    ev = tables.evaluations
    assert int(ev["pseudo_agent"].sum()) == 8
    assert set(ev.loc[ev["pseudo_agent"], "agent_kind"]) == {
        "runner (re-judging the arm's best)",
        "runner (re-judging the start commit)",
    }
    arms = tables.arms.set_index("arm")
    swarm, solo = arms.loc["swarm"], arms.loc["solo"]
    # The agents' numbers are those of the run without rechecks ...
    assert (swarm["evaluations"], swarm["pass"], swarm["submissions"]) == (6, 3, 6)
    assert (solo["submissions"], solo["not_evaluated"]) == (4, 1)
    assert swarm["run_seconds"] == pytest.approx(RUN_S)
    assert swarm["judge_evaluations"] == 6 and swarm["judge_seconds"] == pytest.approx(40.1)
    assert (swarm["relays"], swarm["best_score"]) == (1, 160.0)
    # ... and the re-judgements say what the bests are worth, and how noisy the judge is.
    assert swarm["rejudged_score"] == pytest.approx(152.5)
    assert swarm["rejudged_x_baseline"] == pytest.approx(1.525)
    assert (swarm["rejudged_verdicts"], solo["rejudged_verdicts"]) == ("PASS,PASS", "PASS,WRONG")
    assert solo["rejudged_score"] == pytest.approx(138.0)
    # The fixture writes the re-judging pseudo-agent under its older name: read as today's.
    assert set(ev.loc[ev["pseudo_agent"], "agent"]) == {"rejudge", "baseline"}
    expected = pd.Series([1.0, 0.96, 1.04, 1.0]).std(ddof=1)
    assert swarm["judge_noise_x_sd"] == pytest.approx(expected)
    assert solo["judge_noise_x_sd"] == pytest.approx(expected)


def test_phase_busy_clips_evaluations_to_the_agents_phase():
    from analysis.tables import phase_busy_s

    ev = pd.DataFrame(
        {"t_start_s": [-5.0, 10.0, 80.0, 120.0], "t_end_s": [5.0, 50.0, 130.0, 150.0]}
    )
    # 5 (clipped at the start) + 40 + 20 (clipped at the re-judging) + 0 (wholly after).
    assert phase_busy_s(ev, 100.0) == pytest.approx(65.0)
    assert phase_busy_s(ev.iloc[0:0], 100.0) == 0.0


def test_model_calls_table_flags_failures_and_arms_sum_the_lost_time(run_factory, tmp_path):
    run = run_factory(model_calls=True)
    tables = build_tables(run.path)
    calls = tables.model_calls
    assert list(calls.columns) == COLUMNS["model_calls"] and len(calls) == 9
    assert calls["call_id"].tolist() == list(range(1, 10))
    w1 = calls[(calls["arm"] == "swarm") & (calls["agent"] == "w1")]
    assert w1["status"].tolist() == [200, 429, 429, 200]
    assert w1["failed"].tolist() == [False, True, True, False]
    assert set(w1["role"]) == {"worker"} and set(w1["agent_kind"]) == {"scripted (no model)"}
    assert w1["t_start_s"].tolist() == pytest.approx([5.0, 10.0, 20.0, 40.0])
    assert w1["duration_s"].tolist() == pytest.approx([2.0, 0.2, 0.1, 5.0])
    assert w1["retry_after"].tolist() == ["", "2", "2", ""]
    unreachable = calls[calls["status"] == 502].iloc[0]
    assert bool(unreachable["failed"]) and pd.isna(unreachable["upstream_status"])
    refused = calls[calls["status"] == 401].iloc[0]  # the proxy's refusal: no failure, no seat
    assert not refused["failed"] and refused["agent_kind"] == "unknown"
    assert int(calls["failed"].sum()) == 3
    arms = tables.arms.set_index("arm")
    swarm, solo = arms.loc["swarm"], arms.loc["solo"]
    # swarm: w1 from its first 429 (10 s) to its next answer (40 s), w2 from 80 to 81 s (open).
    assert (swarm["model_calls"], swarm["model_call_failures"]) == (6, 3)
    assert swarm["model_lost_s"] == pytest.approx(31.0)
    assert (solo["model_calls"], solo["model_call_failures"], solo["model_lost_s"]) == (2, 0, 0.0)
    first = {p.name: p.read_bytes() for p in write_tables(tables, tmp_path / "a")}
    again = {p.name: p.read_bytes() for p in write_tables(build_tables(run.path), tmp_path / "b")}
    assert first == again
    back = pd.read_parquet(tmp_path / "a" / "model_calls.parquet")
    assert back["failed"].tolist() == calls["failed"].tolist()


def test_model_calls_are_empty_and_typed_without_a_proxy(run_factory, tmp_path):
    # No proxy: the arms say nothing about the endpoint (not 0 calls), ...
    plain = build_tables(run_factory("plain").path)
    assert plain.model_calls.empty and plain.arms["model_calls"].isna().all()
    assert plain.arms["model_lost_s"].isna().all()
    # ... and an event log written before the proxy has no model_calls table at all.
    old = run_factory("old", no_model_calls_table=True)
    with sqlite3.connect(old.path / "events.sqlite") as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "model_calls" not in names and "tokens" in names
    tables = build_tables(old.path)
    assert list(tables.model_calls.columns) == COLUMNS["model_calls"]
    assert tables.model_calls.empty and tables.arms["model_call_failures"].isna().all()
    assert len(tables.evaluations) == 9  # the rest of the log is read as before
    write_tables(tables, tmp_path / "out")
    schema = pq.read_schema(tmp_path / "out" / "model_calls.parquet")
    types = {name: str(schema.field(name).type) for name in schema.names}
    assert types["failed"] == "bool" and types["upstream_status"] == "int64"
    assert types["started_at"] == "double" and types["error"] == "large_string"
    header = (tmp_path / "out" / "model_calls.csv").read_text().splitlines()
    assert header == [",".join(f'"{c}"' for c in COLUMNS["model_calls"])]
