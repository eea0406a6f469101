"""``python -m analysis.report DIR`` on fixture runs and sweeps (see conftest)."""

from __future__ import annotations

import runpy
import sqlite3
import sys
import time
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest

import analysis
from analysis.report import main, not_solid
from analysis.report.endpoint import endpoint_section
from analysis.report.sweep_report import across_seeds
from analysis.tables import build_tables
from isolation.model_proxy import ModelCall
from runner.events import EventLog

from .conftest import RUN_S, T0, _last_id, _stamp, copy_run

PNG = b"\x89PNG\r\n\x1a\n"


def _report(path: Path) -> str:
    return (path / "analysis" / "report.md").read_text()


def _section(text: str, title: str) -> str:
    body = text.split(f"## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def _pngs(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((path / "analysis" / "figures").glob("*.png"))}


@pytest.fixture(scope="module")
def built(template_run, tmp_path_factory):
    """One report build shared by the tests that only read it (a build draws four figures)."""
    run = copy_run(template_run, tmp_path_factory.mktemp("built") / "run")
    assert main([str(run.path)]) == 0
    return run


def test_report_has_every_section_with_measured_values(built):
    text = _report(built.path)
    assert text.startswith("# Report: swarm_vs_solo, decode_cpu, seed 0")
    assert "INCOMPLETE" not in text
    for title in (
        "Run",
        "Arms",
        "The formulas, measured",
        "Figures",
        "Relay graph",
        "Dead-end ledger",
        "What is not solid",
        "Tables",
    ):
        assert f"\n## {title}\n" in text, title
    formulas = _section(text, "The formulas, measured")
    assert "judge capacity = 100.0 s / 6.68 s per evaluation = 15.0 evaluations" in formulas
    assert "judge utilisation = 6 × 6.68 s / 100.0 s = 40%" in formulas
    assert "judge capacity = 100.0 s / 10.00 s per evaluation = 10.0 evaluations" in formulas
    assert "No token records" in formulas
    arms = _section(text, "Arms")
    assert arms.count("scripted (no model)") == 2 and "no token records" in arms
    assert "## Model endpoint" not in text  # no proxy, no calls


def test_relays_and_dead_ends_are_reported(built):
    text = _report(built.path)
    c = built.commits
    relays = _section(text, "Relay graph")
    assert f"w1 `{c['c1'][:10]}`" in relays and f"w2 `{c['c2'][:10]}`" in relays
    assert "Relays per arm: swarm 1, solo 0." in relays
    ledger = _section(text, "Dead-end ledger")
    assert f"{c['c4'][:10]} {c['c5'][:10]}" in ledger  # one direction, two commits
    assert "REJECT frozen_zone; WRONG mismatch" in ledger
    assert "engine.py: head" in ledger and "c5 is a dead end" in ledger
    assert c["s2"][:10] in ledger and c["s3"][:10] not in ledger
    dead = pd.read_csv(built.path / "analysis" / "tables" / "dead_ends.csv")
    assert list(zip(dead["arm"], dead["agent"], strict=True)) == [
        ("swarm", "w2"),
        ("swarm", "w1"),
        ("solo", "w1"),
    ]


def test_not_solid_is_drawn_from_the_data(built):
    solid = _section(_report(built.path), "What is not solid")
    c = built.commits
    assert "One seed (seed 0)" in solid
    assert "The agents are scripted" in solid
    assert "1 WRONG verdict(s) with every token correct" in solid and c["c3"][:10] in solid
    assert "flagged `near_tie`" in solid and "flagged `b1_unresolved`" in solid
    assert "swarm/w1 exited before the deadline 1 time(s)" in solid
    # The idle lines from posts and submissions are replaced by the seat-time table.
    assert "idled" not in solid and "stalled" not in solid  # no stalled events in this run
    seat_time = _section(_report(built.path), "Seat time")
    assert "waiting for the judge (min)" in seat_time and "| swarm | 3 |" in seat_time
    assert "1 submission(s) were never evaluated" in solid
    assert "Timing noise" in solid and "Noise is larger than the gap" not in solid
    assert "seat counts differ: swarm 3, solo 1" in solid
    assert "Arms differ" not in solid


def test_a_seat_that_ended_at_the_deadline_did_not_exit_before_it(run_factory):
    """The scripted agent ends its work at the deadline and the supervisor sees it exit a
    moment later: the demo report listed that as "exited before the deadline (at minute 5.0)"."""
    run = run_factory()
    events = EventLog(run.path / "events.sqlite")
    for agent, at in (("w1", T0 + RUN_S + 0.4), ("w2", T0 + RUN_S - 30)):
        events.lifecycle("swarm", agent, "exited", code=0, log_tail="")
        _stamp(events, "lifecycle", _last_id(events, "lifecycle"), at)
        events.lifecycle("swarm", agent, "restarted", restarts=1, reason="exited")
        _stamp(events, "lifecycle", _last_id(events, "lifecycle"), at + 0.1)
    events.lifecycle("solo", "w1", "restarted", restarts=1, reason="exited before the deadline")
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + RUN_S + 0.5)
    assert main([str(run.path)]) == 0
    solid = _section(_report(run.path), "What is not solid")
    assert "swarm/w1 exited before the deadline 1 time(s) (at minute 1.2)" in solid
    minute = f"{(RUN_S - 30) / 60:.1f}"
    assert f"swarm/w2 exited before the deadline 1 time(s) (at minute {minute})" in solid
    assert "solo/w1 exited" not in solid  # a restart alone is not an exit


def test_stalls_make_the_seat_time_table_and_the_arm_that_lost_more_is_said(run_factory):
    run = run_factory()
    events = EventLog(run.path / "events.sqlite")
    # swarm/w2 quiet for 20 s, nudged at +60 s; solo/w1 quiet 10 s, recorded only, until its
    # next post (none after: until the end).
    events.lifecycle("swarm", "w2", "stalled", idle_s=20.0, action="nudge", last={}, restarts=0)
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 60)
    events.lifecycle("swarm", "w2", "restarted", restarts=1, reason="stalled", idle_s=20.0)
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 60)
    events.lifecycle("solo", "w1", "stalled", idle_s=10.0, action="record", last={}, restarts=0)
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + RUN_S - 10)
    assert main([str(run.path)]) == 0
    text = _report(run.path)
    table = _section(text, "Seat time")
    swarm = next(line for line in table.splitlines() if line.startswith("| swarm |"))
    solo = next(line for line in table.splitlines() if line.startswith("| solo |"))
    # swarm: 20 s of 3 seats' time; solo: 10 s quiet, then on to its next event or the end.
    assert swarm.split("|")[6].strip().startswith("0.3")
    assert float(solo.split("|")[6].split()[0]) >= 0.2
    solid = _section(text, "What is not solid")
    assert "Seats stalled" in solid and "solo lost the most of its seat time to stalls" in solid


def test_a_seat_at_its_disk_quota_and_a_quota_not_enforced_are_said(run_factory):
    run = run_factory()
    events = EventLog(run.path / "events.sqlite")
    events.lifecycle("solo", "w1", "quota", used_bytes=2**31, limit_bytes=2**31, free_bytes=0,
                     free_inodes=9, reason="no room left")  # fmt: skip
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 45)
    assert main([str(run.path)]) == 0
    solid = _section(_report(run.path), "What is not solid")
    assert (
        "solo/w1 filled its disk quota (2048 MiB) 1 time(s) (at minute 0.8): its writes failed "
        "with ENOSPC until it made room." in solid
    )
    assert "was not enforced" not in solid
    events.set_meta(disk_quota={"mb": 2048, "enforced": False, "why": "not root"})
    assert main([str(run.path)]) == 0
    solid = _section(_report(run.path), "What is not solid")
    assert "The seats' disk quota (2048 MiB) was not enforced: not root." in solid


def test_figures_are_valid_pngs(built):
    figures = _pngs(built.path)
    assert set(figures) == {
        "best_so_far.png",
        "best_vs_evaluations.png",
        "judge_timeline.png",
        "verdict_mix.png",
        "agent_activity.png",
    }
    for name, data in figures.items():
        assert data.startswith(PNG), name
        image = mpimg.imread(built.path / "analysis" / "figures" / name)
        assert image.shape[0] > 200 and image.shape[1] > 400, name
        assert image.std() > 0.01, name  # not a blank canvas
    text = _report(built.path)
    for name in figures:
        assert f"(figures/{name})" in text
    assert "*Token cost per arm*: not drawn: no token records" in text


def test_rebuilt_twice_byte_for_byte(built, capsys):
    # Built again in place, over its own output (the figures, report and tables all compared).
    tables = built.path / "analysis" / "tables"
    first = {p.name: p.read_bytes() for p in sorted(tables.iterdir())}
    report, figures = _report(built.path), _pngs(built.path)
    assert main([str(built.path)]) == 0
    assert {p.name: p.read_bytes() for p in sorted(tables.iterdir())} == first
    assert _report(built.path) == report and _pngs(built.path) == figures
    assert len(first) == 18  # seven tables, relays and dead ends, each as CSV and Parquet


def test_token_records_give_formula_two_and_a_figure(run_factory, capsys):
    run = run_factory(tokens=True)
    assert main([str(run.path)]) == 0
    text = _report(run.path)
    formulas = _section(text, "The formulas, measured")
    assert "2,000 ÷ (160.00 − 100.00) = 33 output tokens per tok/s" in formulas
    assert "1,000 ÷ (140.00 − 100.00) = 25 output tokens per tok/s" in formulas
    assert "(2,000 − 1,000) ÷ (160.00 − 140.00) = 50 output tokens per extra tok/s" in formulas
    assert "token_cost.png" in _pngs(run.path)


def test_asymmetric_arms_are_flagged(run_factory):
    tables = build_tables(run_factory(solo_prompt="never busy-poll").path, git=False)
    solid = "\n".join(not_solid(tables, tables.runs[0]))
    assert "Arms differ in `prompt`" in solid and "never busy-poll" in solid


def test_incomplete_run_is_reported_and_marked(run_factory, capsys):
    run = run_factory(status="interrupted")
    assert main([str(run.path)]) == 0
    text = _report(run.path)
    assert text.splitlines()[2].startswith("> **INCOMPLETE**")
    assert "**INCOMPLETE**: the run's status is `interrupted`" in text
    assert "## Dead-end ledger" in text and (run.path / "analysis" / "figures").is_dir()


def test_neither_run_nor_sweep_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a run directory" in err
    assert not (tmp_path / "analysis").exists()
    assert main([str(tmp_path / "missing")]) == 2


def test_corrupt_event_log_is_bad_input(tmp_path, capsys):
    (tmp_path / "events.sqlite").write_bytes(b"not a database at all" * 100)
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_shared_folder_with_stray_event_logs_is_no_sweep(tmp_path, template_run, capsys):
    """A /tmp-like folder: random files, non-database ``events.sqlite`` files nested at several
    depths, a symlink loop, and a real run buried deeper than any sweep nests its jobs. Before,
    it was taken for a sweep and the build ended in ``DatabaseError: file is not a database``."""
    shared = tmp_path / "shared"
    (shared / "pip-cache" / "wheels").mkdir(parents=True)
    (shared / "blob.bin").write_bytes(bytes(range(256)) * 40)
    (shared / "pip-cache" / "wheels" / "x.whl").write_bytes(b"PK\x03\x04junk")
    for nest in ("a", "b/c", "b/c/d/e"):
        (shared / nest).mkdir(parents=True, exist_ok=True)
        (shared / nest / "events.sqlite").write_bytes(b"not a database" * 64)
    (shared / "b" / "loop").symlink_to(shared, target_is_directory=True)
    copy_run(template_run, shared / "p1" / "p2" / "p3" / "p4" / "run")
    assert main([str(shared)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a run directory" in err
    assert "DatabaseError" not in err
    assert not (shared / "analysis").exists()
    # The same stray log one level down from a multirun.yaml is a job that left no event log.
    (shared / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    copy_run(template_run, shared / "seed=1", seed=1)
    assert main([str(shared)]) == 0
    text = _report(shared)
    assert "Job `a` left no event log" in text


def test_sweep_report(sweep_dir, capsys):
    assert main([str(sweep_dir)]) == 0
    text = _report(sweep_dir)
    assert text.startswith("# Sweep report: swarm_vs_solo, decode_cpu, 2 job(s)")
    assert "> **INCOMPLETE**: 0 job(s) did not finish and 1 left no event log." in text
    assert "Job `seed=3` left no event log" in text
    assert "## Across seeds" in text and "One seed" not in text
    assert "seed 1, 2: The agents are scripted" in text
    figures = _pngs(sweep_dir)
    assert "seeds_best.png" in figures and "agent_activity.png" not in figures
    arms = pd.read_csv(sweep_dir / "analysis" / "tables" / "arms.csv")
    assert list(arms.columns[:2]) == ["run_id", "seed"] and arms["seed"].tolist() == [1, 1, 2, 2]


@pytest.mark.filterwarnings("ignore:'analysis.report' found in sys.modules:RuntimeWarning")
def test_module_entry_point(tmp_path, monkeypatch, capsys):
    # ``python -m analysis.report DIR`` in-process: the __main__ guard, argv and exit status.
    monkeypatch.setattr(sys, "argv", ["analysis.report", str(tmp_path / "nope")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("analysis.report", run_name="__main__")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("analysis.report: ")


def test_across_seeds_without_the_sweep_module(sweep_dir, monkeypatch):
    # The aggregate belongs to analysis.sweep; without it the report computes its own.
    monkeypatch.setitem(sys.modules, "analysis.sweep", None)
    monkeypatch.delattr(analysis, "sweep", raising=False)
    tables = build_tables(sweep_dir, git=False)
    text = "\n".join(across_seeds(tables, sweep_dir))
    assert "`analysis.sweep` unavailable" in text
    assert "**swarm**: best tok/s over 2 seed(s): median 160.0" in text
    assert "**swarm vs solo**: cannot_tell." in text


def test_rejudging_gives_the_noise_yardstick_and_the_honest_best(run_factory):
    tables = build_tables(run_factory(rechecks=True).path)
    solid = "\n".join(not_solid(tables, tables.runs[0]))
    assert "the start commit re-judged gives σ = 0.033× the baseline" in solid
    assert (
        "swarm's best (160.0 tok/s, 1.63×) re-judged 2 time(s): PASS, PASS; median 152.5" in solid
    )
    assert "solo's best" in solid and "did not hold up when judged again" in solid
    assert "Noise is larger than the gap" not in solid  # 1.525 vs 1.38: 0.145 > 2σ = 0.065
    assert "finished after the deadline" not in solid  # the re-judging is not the agents' drain


def test_run_killed_before_any_verdict(tmp_path, capsys):
    events = EventLog(tmp_path / "events.sqlite")
    seats = {"swarm": [["w1", "worker", None]]}
    events.set_meta(
        run_id="early", arms=["swarm"], seats=seats, started_at=time.time() - 60, status="running"
    )
    events.add_submission("swarm", "w1", "r1", "0" * 40)
    assert main([str(tmp_path)]) == 0
    text = _report(tmp_path)
    assert "> **INCOMPLETE**" in text and "no evaluations, nothing to measure" in text
    assert "*The judge's timeline*: not drawn: no evaluations" in text
    assert "Only one arm (`swarm`): no control" in text
    assert "1 submission(s) were never evaluated" in text


def _prompts(worker_template: dict[str, str]) -> dict[str, dict[str, dict[str, str]]]:
    """The meta ``prompts`` as runner/seats.py records it: per arm, per seat."""
    return {
        "swarm": {
            "w1": {"role": "worker", "template_sha256": worker_template["swarm"], "version": "1"},
            "critic": {"role": "critic", "template_sha256": "c" * 64, "version": "1"},
        },
        "solo": {
            "w1": {"role": "worker", "template_sha256": worker_template["solo"], "version": "1"}
        },
    }


@pytest.mark.parametrize("same", [True, False])
def test_prompts_that_differ_beyond_the_role_are_flagged(run_factory, same):
    run = run_factory()
    templates = {"swarm": "a" * 64, "solo": "a" * 64 if same else "b" * 64}
    EventLog(run.path / "events.sqlite").set_meta(prompts=_prompts(templates))
    tables = build_tables(run.path, git=False)
    solid = "\n".join(not_solid(tables, tables.runs[0]))
    # A critic only in the swarm and a solo worker told it is alone are the design, not a flaw.
    assert ("The worker prompts differ between arms" in solid) is not same, solid
    assert "The critic prompts differ" not in solid


def test_endpoint_failures_are_reported_as_lost_seat_time(run_factory, capsys):
    run = run_factory(model_calls=True)
    assert main([str(run.path)]) == 0
    text = _report(run.path)
    section = _section(text, "Model endpoint")
    assert "Seat time = seats × the agents' phase (100.0 s)" in section
    # swarm: 3 seats × 100 s, 31 s lost (w1 30 s between two 429s and its next answer, w2 1 s).
    assert "| swarm | 3 | 6 | 3 (429 ×2, unreachable ×1) | 2 | 0.5 | 10.3% |" in section
    assert "| solo | 1 | 2 | 0 | 0 | 0.0 | 0.0% |" in section
    assert "- swarm/w1: 30.0 s in 1 outage(s) (2 failed call(s): 429 ×2)." in section
    assert "- swarm/w2: 1.0 s in 1 outage(s) (1 failed call(s): unreachable ×1); still" in section
    assert "solo/w1:" not in section
    assert "1 call(s) without a seat token were refused by the proxy." in section
    assert "lower bound" not in section  # every call the proxy saw is in the log
    solid = _section(text, "What is not solid")
    assert (
        "- Seats lost time to model endpoint failures (rate limits, 5xx, unreachable; from the "
        "model proxy's record of every call): swarm 0.5 seat-min (10.3% of its seat time), "
        "solo 0.0 seat-min (0.0% of its seat time): the arms' effective budgets differed by "
        "10.3% of seat time, so the comparison is between unequal budgets." in solid
    )
    calls = pd.read_csv(run.path / "analysis" / "tables" / "model_calls.csv")
    assert len(calls) == 9 and int(calls["failed"].sum()) == 3
    arms = pd.read_csv(run.path / "analysis" / "tables" / "arms.csv").set_index("arm")
    assert arms.loc["swarm", "model_lost_s"] == 31.0 and arms.loc["solo", "model_lost_s"] == 0.0


def test_unrecorded_calls_make_the_counts_a_lower_bound(run_factory):
    run = run_factory(model_calls=True)
    proxy = {"network": "n", "calls": 12, "record_errors": ["OperationalError('locked')"]}
    EventLog(run.path / "events.sqlite").set_meta(proxy=proxy)
    tables = build_tables(run.path, git=False)
    text = "\n".join(endpoint_section(tables, tables.runs[0]))
    assert "The proxy saw 12 call(s) and the log holds 9 (1 record error(s), the first" in text
    assert "lower bound" in text


def test_clean_endpoint_and_no_model_calls_table_add_nothing(run_factory, capsys):
    clean = run_factory("clean", model_calls=True)
    with sqlite3.connect(clean.path / "events.sqlite") as db:  # every call answered
        db.execute("UPDATE model_calls SET status = 200, upstream_status = 200, error = ''")
    tables = build_tables(clean.path, git=False)
    assert "Seats lost time" not in "\n".join(not_solid(tables, tables.runs[0]))
    assert tables.arms["model_lost_s"].tolist() == [0.0, 0.0]
    old = run_factory("old", no_model_calls_table=True)
    assert main([str(old.path)]) == 0
    text = _report(old.path)
    assert "## Model endpoint" not in text and "Seats lost time" not in text
    assert "## What is not solid" in text
    written = old.path / "analysis" / "tables"
    assert pd.read_csv(written / "model_calls.csv").empty
    assert pd.read_parquet(written / "model_calls.parquet").empty


def test_sweep_lists_endpoint_losses_per_seed(tmp_path, template_run, capsys):
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    copy_run(template_run, root / "seed=1", seed=1, model_calls=True)
    copy_run(template_run, root / "seed=2", seed=2, no_model_calls_table=True)
    assert main([str(root)]) == 0
    text = _report(root)
    section = _section(text, "Model endpoint")
    assert "| 1 | swarm | 3 | 6 | 3 (429 ×2, unreachable ×1) | 2 | 0.5 | 10.3% |" in section
    assert "| 1 | solo | 1 | 2 | 0 | 0 | 0.0 | 0.0% |" in section
    assert "\n| 2 | " not in section  # no proxy in that job
    assert "- seed 1: Seats lost time to model endpoint failures" in text
    assert "seed 2: Seats lost time" not in text and "seed 1, 2: Seats lost" not in text
    calls = pd.read_csv(root / "analysis" / "tables" / "model_calls.csv")
    assert set(calls["seed"]) == {1} and len(calls) == 9


def test_tokens_on_the_wire_are_the_check_on_the_records(run_factory):
    """Records: swarm 2,000 output tokens, solo 1,000 (the fixture's). The proxy read swarm's
    responses as 2,000 too (no finding) and solo's as 3,500: 2,500 output tokens the CLI's
    record does not hold."""
    run = run_factory(model_calls=True, tokens=True)
    events = EventLog(run.path / "events.sqlite")
    with events.connect() as db:
        # w1: two answered calls of 600, w2: one of 800 (its 502 reported nothing).
        db.execute("UPDATE model_calls SET model = 'model-x', output = 600 WHERE agent = 'w1'")
        db.execute("UPDATE model_calls SET output = 800 WHERE arm = 'swarm' AND agent = 'w2'")
        db.execute("UPDATE model_calls SET output = NULL WHERE arm = 'swarm' AND status <> 200")
        db.execute("UPDATE model_calls SET model = 'model-x', output = 1750 WHERE arm = 'solo'")
    assert main([str(run.path)]) == 0
    arms = pd.read_csv(run.path / "analysis" / "tables" / "arms.csv").set_index("arm")
    assert arms.loc["swarm", "wire_output_tokens"] == 2000
    assert arms.loc["solo", "wire_output_tokens"] == 3500
    text = _report(run.path)
    assert "on the wire (output tokens the vendor's responses reported" in text
    assert "swarm 2,000, solo 3,500" in text or "solo 3,500, swarm 2,000" in text
    solid = _section(text, "What is not solid")
    assert (
        "solo: the vendor's responses reported 3,500 output tokens (read by the model proxy), "
        "the CLIs' records 1,000 (-2,500)." in solid
    )
    assert "swarm: the vendor's responses reported" not in solid  # 2,000 on both sides
    # The fixture's 200s all carry usage here: no lower-bound remark.
    assert "reported no usage" not in text
    with events.connect() as db:
        db.execute("UPDATE model_calls SET output = NULL WHERE arm = 'solo' AND started_at < ?",
                   (T0 + 10,))  # fmt: skip
    assert main([str(run.path)]) == 0
    assert "1 answered model call(s) reported no usage" in _report(run.path)


def test_routes_refused_to_a_seat_are_listed(run_factory):
    run = run_factory(model_calls=True)
    events = EventLog(run.path / "events.sqlite")
    for path in ("/v1/files", "/v1/files", "/v1/fine_tuning/jobs"):
        events.add_model_call(
            ModelCall(
                "swarm", "w2", "POST", path, T0 + 50, status=403, upstream_status=None,
                error=f"POST {path}: not a model route of the API", finished_at=T0 + 50,
            )
        )  # fmt: skip
    assert main([str(run.path)]) == 0
    section = _section(_report(run.path), "Model endpoint")
    assert (
        "3 call(s) by seats were refused as not a model route of the API (never forwarded): "
        "swarm/w2 POST /v1/files ×2; swarm/w2 POST /v1/fine_tuning/jobs ×1." in section
    )
    # Refusals are the seat's doing, not the endpoint's: no failure, no lost time.
    assert "| swarm | 3 | 9 | 3 (429 ×2, unreachable ×1) | 2 | 0.5 | 10.3% |" in section


def test_a_host_firewall_that_was_off_is_said(run_factory):
    run = run_factory(model_calls=True)
    proxy = {"network": "n", "calls": 9, "record_errors": [], "host_firewall": "off: not root"}
    EventLog(run.path / "events.sqlite").set_meta(proxy=proxy)
    assert main([str(run.path)]) == 0
    text = _report(run.path)
    assert "Host firewall for the seats' network: off: not root." in _section(
        text, "Model endpoint"
    )
    assert "The host firewall for the seats' network was off: not root" in _section(
        text, "What is not solid"
    )
