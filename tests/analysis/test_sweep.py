"""The sweep aggregate from fixture job folders laid out as the runner writes them: two finished
jobs, one failed job, one killed job."""

from __future__ import annotations

import json
import sys
import time
import types
from typing import Any

import pandas as pd
import pytest
import yaml

from analysis import sweep
from runner.events import EventLog
from runner.summary import COLUMNS, write_summary


def _summary(arm: str, x: float | None) -> dict[str, Any]:
    """A summary row as the runner writes it; columns the runner adds later stay empty."""
    values = {
        "arm": arm, "agent_kind": "scripted (no model)", "isolation": "docker",
        "seats": 5 if arm == "swarm" else 1, "evaluations": 4, "pass": 1 if x else 0, "wrong": 2,
        "reject": 1, "error": 0, "not_evaluated": 0, "metric": "tok_s", "unit": "tok/s",
        "best_score": None if x is None else 100 * x,
        "best_x_baseline": x, "time_to_best_s": None if x is None else 30.0, "relays": 0,
        "judge_utilisation": 0.5, "mean_queue_wait_s": 1.0, "restarts": 0,
    }  # fmt: skip
    return {c: values.get(c) for c in COLUMNS}


def make_job(
    sweep_dir,
    name: str,
    seed: int,
    *,
    outcome: str = "ok",
    xs: dict[str, float | None] | None = None,
    window: tuple[float, float] = (0.0, 60.0),
    judge_home: str = "/judge/home",
    error: str | None = None,
):
    """One job folder: .hydra/, job.json, events.sqlite meta, and summary.csv if it finished."""
    job = sweep_dir / name
    (job / ".hydra").mkdir(parents=True)
    overrides = ["experiment=swarm_vs_solo", f"seed={seed}"]
    config = {"experiment": "swarm_vs_solo", "seed": seed, "arms": {"swarm": {}, "solo": {}}}
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    t0 = 1_700_000_000.0
    start, end = t0 + window[0], t0 + window[1]
    record = {"status": outcome, "seed": seed, "overrides": overrides, "started_at": start}
    if outcome != "running":
        record.update(exit_status={"ok": 0, "failed": 1}.get(outcome, 130), ended_at=end)
    if error:
        record["error"] = error
    (job / "job.json").write_text(json.dumps(record))
    events = EventLog(job / "events.sqlite")
    events.set_meta(
        seed=seed,
        arms=["swarm", "solo"],
        judge_home=judge_home,
        status="running",
        started_at=start,
    )
    if outcome == "ok":
        events.set_meta(status="finished", ended_at=end)
        xs = xs or {"swarm": 1.5, "solo": 1.2}
        write_summary([_summary(arm, x) for arm, x in xs.items()], job / "summary.csv")
    return job


@pytest.fixture
def sweep_dir(tmp_path):
    d = tmp_path / "multirun" / "2026-01-01_00-00-00"
    make_job(d, "seed=1", 1, xs={"swarm": 1.6, "solo": 1.2}, window=(0, 60))
    make_job(d, "seed=2", 2, xs={"swarm": 1.4, "solo": None}, window=(30, 90))
    make_job(
        d, "seed=3", 3, outcome="failed", window=(100, 110),
        error="APIError: Minimum memory limit allowed is 6MB",
    )  # fmt: skip
    make_job(d, "seed=4", 4, outcome="running", window=(200, 0))  # killed: no end
    return d


def test_aggregate_one_row_per_job_and_arm_failed_job_kept(sweep_dir):
    frame = sweep.aggregate(sweep_dir)
    written = pd.read_csv(sweep_dir / sweep.AGGREGATE)
    assert len(frame) == len(written) == 8
    assert list(frame.columns[:6]) == sweep.LEAD
    by = {(r["seed"], r["arm"]): r for r in written.to_dict("records")}
    assert by[(1, "swarm")]["status"] == "ok"
    assert by[(1, "swarm")]["best_x_baseline"] == 1.6
    assert by[(1, "solo")]["evaluations"] == 4
    assert by[(1, "swarm")]["job_dir"] == "seed=1"
    assert pd.isna(by[(2, "solo")]["best_x_baseline"])  # an ok job whose arm got no PASS
    for arm in ("swarm", "solo"):
        failed = by[(3, arm)]
        assert failed["status"] == "failed"
        assert "Minimum memory limit" in failed["job_error"]
        assert failed["exit_status"] == 1
        assert pd.isna(failed["evaluations"])
        assert by[(4, arm)]["status"] == "incomplete"
        assert "killed" in by[(4, arm)]["job_error"]
    assert by[(1, "swarm")]["error"] == 0  # the summary's count of ERROR verdicts
    # seeds 1 and 2 overlapped on the same judge; 3 and 4 ran alone
    concurrent = {seed: by[(seed, "solo")]["concurrent_jobs"] for seed in (1, 2, 3, 4)}
    assert concurrent == {1: 1, 2: 1, 3: 0, 4: 0}
    assert list(written["seed"]) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert set(written["status"]) <= set(sweep.STATUSES)


def test_stats_median_spread_and_comparison(sweep_dir):
    _, stats = sweep.aggregate_with_stats(sweep_dir)
    written = pd.read_csv(sweep_dir / sweep.STATS)
    assert list(written.columns) == sweep.STATS_COLUMNS
    arms = {r["arm"]: r for r in stats[stats["row"] == "arm"].to_dict("records")}
    assert set(arms) == {"swarm", "solo"}
    swarm, solo = arms["swarm"], arms["solo"]
    assert (swarm["jobs"], swarm["n"], swarm["failed"], swarm["incomplete"]) == (4, 2, 1, 1)
    assert swarm["median_x_baseline"] == pytest.approx(1.5)
    assert (swarm["min_x_baseline"], swarm["max_x_baseline"]) == (1.4, 1.6)
    # solo had no PASS on seed 2: counted as the baseline it kept (1.0), and said so
    assert solo["no_pass"] == 1 and solo["median_x_baseline"] == pytest.approx(1.1)
    (comparison,) = stats[stats["row"] == "comparison"].to_dict("records")
    assert (comparison["arm_a"], comparison["arm_b"], comparison["n"]) == ("swarm", "solo", 2)
    # 2 vs 2 seeds: no exact test can reach 0.05
    assert comparison["outcome"] == "cannot_tell", comparison["reason"]
    assert comparison["difference"] == pytest.approx(0.4)
    text = sweep.format_stats(stats)
    assert "swarm vs solo on 2 seed(s)" in text and "cannot_tell" in text


def test_comparison_unavailable_still_writes_everything(sweep_dir, monkeypatch):
    # analysis.stats missing or broken: the aggregate and per-arm figures are still written.
    monkeypatch.setitem(sys.modules, "analysis.stats", types.ModuleType("analysis.stats"))
    _, stats = sweep.aggregate_with_stats(sweep_dir)
    (comparison,) = stats[stats["row"] == "comparison"].to_dict("records")
    assert comparison["outcome"] == "unavailable"
    assert "compare_arms" in comparison["reason"]
    assert (sweep_dir / sweep.AGGREGATE).is_file() and (sweep_dir / sweep.STATS).is_file()


def test_compare_arms_gets_paired_values_in_seed_order(sweep_dir, monkeypatch):
    seen = {}

    def compare_arms(a, b, *, arm_a, arm_b, noise_sigma):
        seen.update(a=a, b=b, arm_a=arm_a, arm_b=arm_b, noise_sigma=noise_sigma)
        return types.SimpleNamespace(
            difference=0.1, ci_low=-1.0, ci_high=1.0, p_value=0.5, min_p=0.33,
            outcome="cannot_tell", reason="too few seeds",
        )  # fmt: skip

    fake = types.ModuleType("analysis.stats")
    fake.compare_arms = compare_arms  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "analysis.stats", fake)
    _, stats = sweep.aggregate_with_stats(sweep_dir)
    assert seen == {"a": [1.6, 1.4], "b": [1.2, 1.0], "arm_a": "swarm", "arm_b": "solo",
                    "noise_sigma": None}  # fmt: skip
    (comparison,) = stats[stats["row"] == "comparison"].to_dict("records")
    assert (comparison["p_value"], comparison["reason"]) == (0.5, "too few seeds")


def test_resumed_job_is_ok_and_nested_job_dirs_are_found(tmp_path):
    d = tmp_path / "sweep"
    # failed first, then `resume=DIR` finished it: the event log says finished
    job = make_job(d, "seed=1", 1, outcome="failed", error="boom")
    EventLog(job / "events.sqlite").set_meta(status="finished", ended_at=time.time())
    write_summary([_summary("swarm", 1.3), _summary("solo", 1.1)], job / "summary.csv")
    # an override holding a path nests the job folder
    make_job(d, "from_run=/x/y/seed=2", 2)
    frame = sweep.aggregate(d)
    assert set(frame["job_dir"]) == {"seed=1", "from_run=/x/y/seed=2"}
    assert set(frame["status"]) == {"ok"}
    assert frame["job_error"].isna().all()


def test_only_two_other_arms_are_compared(tmp_path):
    d = tmp_path / "sweep"
    for seed in (1, 2):
        make_job(d, f"seed={seed}", seed, xs={"a": 1.1 * seed, "b": 1.0})
    _, stats = sweep.aggregate_with_stats(d)
    (comparison,) = stats[stats["row"] == "comparison"].to_dict("records")
    assert (comparison["arm_a"], comparison["arm_b"]) == ("a", "b")


def test_three_arms_give_the_three_comparisons(tmp_path):
    # experiment=swarm_vs_independent_vs_solo: swarm vs solo as before, then the board's
    # effect (swarm vs independent) and more seats' (independent vs solo).
    d = tmp_path / "sweep"
    for seed in (1, 2, 3):
        xs = {"swarm": 1.5 + 0.1 * seed, "independent": 1.3 + 0.1 * seed, "solo": 1.1}
        make_job(d, f"seed={seed}", seed, xs=xs)
    _, stats = sweep.aggregate_with_stats(d)
    rows = stats[stats["row"] == "comparison"].to_dict("records")
    assert [(r["arm_a"], r["arm_b"]) for r in rows] == [
        ("swarm", "solo"),
        ("swarm", "independent"),
        ("independent", "solo"),
    ]
    assert [r["n"] for r in rows] == [3, 3, 3]
    assert rows[1]["difference"] == pytest.approx(0.2) and rows[1]["outcome"] == "cannot_tell"
    assert "swarm vs independent on 3 seed(s)" in sweep.format_stats(stats)


def test_cli(sweep_dir, tmp_path, capsys):
    assert sweep.main([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "seed=3" in out and "failed" in out and "Minimum memory limit" in out
    assert str(sweep_dir / sweep.AGGREGATE) in out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert sweep.main([str(empty)]) == 2
    assert "holds no job folder" in capsys.readouterr().err
    assert sweep.main([str(tmp_path / "missing")]) == 2


def test_summary_columns_follow_the_runner(sweep_dir):
    # every summary.csv column reaches the aggregate, whatever the runner adds later
    frame = sweep.aggregate(sweep_dir)
    header = pd.read_csv(sweep_dir / "seed=1" / "summary.csv").columns
    assert set(header) <= set(frame.columns)


def test_re_judged_best_and_the_judges_noise_feed_the_comparison(tmp_path, monkeypatch):
    d = tmp_path / "multirun" / "t"
    for seed, (raw, confirmed, noise) in enumerate([(1.9, 1.5, 0.08), (1.7, None, 0.12)], 1):
        job = make_job(d, f"seed={seed}", seed, xs={"swarm": raw, "solo": 1.1})
        summary = pd.read_csv(job / "summary.csv")
        summary["confirmed_x_baseline"] = [confirmed, 1.05]
        summary["judge_noise_x_sd"] = noise
        summary.to_csv(job / "summary.csv", index=False)
    seen = {}

    def compare_arms(a, b, *, arm_a, arm_b, noise_sigma):
        seen.update(a=a, b=b, noise_sigma=noise_sigma)
        return types.SimpleNamespace(
            difference=0.0, ci_low=0.0, ci_high=0.0, p_value=1.0, min_p=0.33,
            outcome="cannot_tell", reason="r",
        )  # fmt: skip

    fake = types.ModuleType("analysis.stats")
    fake.compare_arms = compare_arms  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "analysis.stats", fake)
    sweep.aggregate_with_stats(d)
    # Seed 1 was re-judged (1.5, not the lucky 1.9); seed 2 was not, so its raw best stands.
    assert seen["a"] == [1.5, 1.7] and seen["b"] == [1.05, 1.05]
    assert seen["noise_sigma"] == pytest.approx(0.10)


def test_an_older_jobs_summary_csv_reads_under_todays_names(tmp_path):
    # summary.csv before it became the per-arm row: agents, x_baseline, judge_busy_pct (percent).
    d = tmp_path / "multirun" / "t"
    make_job(d, "seed=1", 1, xs={"swarm": 1.6, "solo": 1.2})
    old = make_job(d, "seed=2", 2, xs={"swarm": 1.4, "solo": 1.3})
    summary = pd.read_csv(old / "summary.csv").rename(
        columns={"seats": "agents", "best_x_baseline": "x_baseline",
                 "judge_utilisation": "judge_busy_pct"}
    )  # fmt: skip
    summary["judge_busy_pct"] = 50.0
    summary.to_csv(old / "summary.csv", index=False)
    frame, stats = sweep.aggregate_with_stats(d)
    assert not {"agents", "x_baseline", "judge_busy_pct"} & set(frame.columns)
    row = frame[(frame["seed"] == 2) & (frame["arm"] == "swarm")].iloc[0]
    assert (row["best_x_baseline"], row["seats"], row["judge_utilisation"]) == (1.4, 5, 0.5)
    arms = stats[stats["row"] == "arm"].set_index("arm")
    assert arms.loc["swarm", "min_x_baseline"] == pytest.approx(1.4)
    assert arms.loc["swarm", "n"] == 2


def test_an_arm_the_judge_never_scored_is_left_out_not_counted_as_1x(tmp_path):
    d = tmp_path / "multirun" / "t"
    make_job(d, "seed=1", 1, xs={"swarm": 1.6, "solo": 1.2})
    make_job(d, "seed=2", 2, xs={"swarm": 1.4, "solo": 1.3})
    starved = make_job(d, "seed=3", 3, xs={"swarm": None, "solo": None})
    summary = pd.read_csv(starved / "summary.csv")
    summary["evaluations"] = 0  # a parallel job that got no turn with the shared judge
    summary.to_csv(starved / "summary.csv", index=False)
    _, stats = sweep.aggregate_with_stats(d)
    arms = stats[stats["row"] == "arm"].set_index("arm")
    assert arms.loc["swarm", "unjudged"] == 1 and arms.loc["swarm", "no_pass"] == 0
    assert arms.loc["swarm", "n"] == 2
    assert arms.loc["swarm", "min_x_baseline"] == pytest.approx(1.4)
