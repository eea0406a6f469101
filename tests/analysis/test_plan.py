"""The planner (analysis.plan) on a recorded run: tests/analysis/fixtures/plan_demo is the event
log of a real `make demo` run (scripted agents, the real judge in Docker, 24 evaluations in
152 s, fair queue), so the self-replay is checked against what a real judge did. The queue
order is checked against the real ``judge.queue.JudgeQueue`` on SQLite."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pandas as pd
import pytest

from analysis.plan import make_plan, render
from analysis.plan.__main__ import main
from analysis.plan.counterfactual import predict_run, replay_table, scenarios, self_replay_error
from analysis.plan.fit import Job, fit_runs, read_run, run_dirs
from analysis.plan.power import early_signal, pilot, power_at, power_table
from analysis.plan.sim import JudgeSetup, replay, simulate
from analysis.plan.team import knees, team_table
from analysis.tables import load_run
from judge.queue import JudgeQueue
from judge.verdict import Evaluation, Verdict

DEMO = Path(__file__).parent / "fixtures" / "plan_demo"


def _job(arm: str, at: float, seconds: float, *, untimed: float = 0.0, tree: str = "",
         job_id: int | None = None) -> Job:  # fmt: skip
    return Job(
        arm=arm,
        agent="w1",
        fair_key=arm,
        enqueued_s=at,
        service_s=seconds,
        full_s=seconds,
        untimed_s=untimed,
        outcome="PASS",
        verdict="PASS",
        tree=tree,
        job_id=job_id,
    )


# -- what is read ----------------------------------------------------------------------------


def test_the_recorded_run_is_read_as_the_tables_see_it():
    run = read_run(DEMO)
    arms = load_run(DEMO, git=False).arms
    assert run.policy == "fair" and run.devices == 1
    # The agents' 24 evaluations; the re-judgements after the deadline are not the phase's.
    assert len(run.jobs) == 24 == int(arms["judge_evaluations"].sum())
    assert {j.agent for j in run.jobs} == {"w1", "w2", "w3", "w4"}
    assert run.measured["evaluations"] == 24
    # A REJECT stops at the integrity scan: all of it untimed, a hundredth of a second.
    reject = next(j for j in run.jobs if j.outcome == "REJECT")
    assert reject.service_s < 0.1 and reject.untimed_s == pytest.approx(reject.service_s, abs=0.01)
    fit = fit_runs([run])
    assert fit.arms["swarm"].seats == 4 and fit.arms["solo"].seats == 1
    assert sum(fit.arms["swarm"].mix.values()) == pytest.approx(1.0)
    assert set(fit.arms["solo"].mix) == {"PASS", "REJECT", "WRONG alternating", "WRONG mismatch"}
    # One think time per submission after a seat's first: 24 submissions, 5 seats.
    assert sum(len(v) for v in run.think_s.values()) == 24 - 5


def test_a_folder_without_a_run_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="neither a run folder nor a sweep"):
        run_dirs([tmp_path])
    assert main([str(tmp_path)]) == 2


# -- validation ------------------------------------------------------------------------------


def test_self_replay_reproduces_the_recorded_run_within_ten_percent():
    """Issue 27 §4: replayed under its own settings, the run's evaluations, judge utilisation
    and mean queue wait come back within 10% of what it measured."""
    errors = self_replay_error(read_run(DEMO))
    for name in ("evaluations", "utilisation", "mean_queue_wait_s"):
        assert errors[name]["measured"] > 0
        assert errors[name]["relative_error"] < 0.10, (name, errors[name])


def test_self_replay_under_the_other_policy_is_not_the_run():
    """The check can fail: replaying the fair run as fifo moves its queue waits per arm."""
    run = read_run(DEMO)
    table = replay_table(run)
    own = table[(table["scenario"] == "as recorded") & (table["arm"] == "swarm")]
    fifo = table[(table["scenario"] == "fifo") & (table["arm"] == "swarm")]
    assert abs(float(fifo["mean_wait_s"].iloc[0]) - float(own["mean_wait_s"].iloc[0])) > 2.0


# -- the simulated judge ---------------------------------------------------------------------


def test_the_fair_order_is_the_real_queues(tmp_path: Path):
    """Jobs all waiting at once are started in the order the real JudgeQueue claims them."""
    arms = ["a", "a", "a", "b", "b", "c", "a", "c"]
    queue = JudgeQueue(tmp_path / "queue.sqlite", policy="fair")
    ids = [queue.enqueue(arm=arm, agent="w1", repo="r", commit=f"{i:040x}")
           for i, arm in enumerate(arms)]  # fmt: skip
    claimed = []
    while (job := queue.claim("cpu")) is not None:
        claimed.append(ids.index(job.id))
        queue.finish(job.id, Evaluation(job.id, job.arm, "w1", job.commit, Verdict.PASS))
    jobs = [_job(arm, 0.0, 1.0, job_id=i) for i, arm in enumerate(arms)]
    _, sim = replay(jobs, JudgeSetup(policy="fair"), horizon_s=100.0)
    started = [j.source.job_id for j in sorted(sim, key=lambda j: j.started_s)]
    assert started == claimed
    assert started != list(range(len(arms)))  # fair is not fifo here


def test_devices_speed_and_overlap_change_the_queue_as_they_should():
    jobs = [_job("a", 0.0, 10.0, untimed=2.0, job_id=i) for i in range(4)]
    one, _ = replay(jobs, JudgeSetup(), horizon_s=100.0)
    two, _ = replay(jobs, JudgeSetup(devices=2), horizon_s=100.0)
    fast, _ = replay(jobs, JudgeSetup(speed=2.0), horizon_s=100.0)
    _, sim = replay(jobs, JudgeSetup(overlap=True), horizon_s=100.0)
    assert one.mean_wait_s == pytest.approx((0 + 10 + 20 + 30) / 4)
    assert two.mean_wait_s == pytest.approx((0 + 0 + 10 + 10) / 4)
    assert fast.mean_wait_s == pytest.approx(one.mean_wait_s / 2)
    assert one.utilisation == pytest.approx(0.4) and two.utilisation == pytest.approx(0.2)
    # Overlapped, the device holds only the 8 timed seconds of each: the last ends at 2 + 32.
    assert max(j.finished_s for j in sim) == pytest.approx(34.0)
    # A horizon cuts off what was not finished by then.
    cut, _ = replay(jobs, JudgeSetup(), horizon_s=25.0)
    assert cut.evaluations == 2


def test_dedupe_answers_an_identical_tree_of_the_same_arm_only():
    jobs = [
        _job("a", 0.0, 10.0, tree="t1", job_id=1),
        _job("a", 20.0, 10.0, tree="t1", job_id=2),
        _job("b", 20.0, 10.0, tree="t1", job_id=3),
    ]
    _, sim = replay(jobs, JudgeSetup(dedupe="on", duplicate_s=0.5), horizon_s=100.0)
    took = {j.source.job_id: j.finished_s - j.started_s for j in sim}
    assert took == {1: pytest.approx(10.0), 2: pytest.approx(0.5), 3: pytest.approx(10.0)}
    _, off = replay(jobs, JudgeSetup(dedupe="off"), horizon_s=100.0)
    assert all(j.finished_s - j.started_s == pytest.approx(10.0) for j in off)


def test_a_fitted_team_saturates_a_slow_judge_sooner():
    fit = fit_runs([read_run(DEMO)])
    lone = simulate(fit, 1, JudgeSetup(devices=8), 600.0)
    crowd = simulate(fit, 20, JudgeSetup(devices=1), 600.0)
    assert crowd.utilisation > 0.9 > lone.utilisation
    assert crowd.mean_wait_s > lone.mean_wait_s
    table = team_table(fit, horizon_s=600.0, seats=(1, 5, 20), devices=(1, 8), replications=1)
    assert len(table) == 3 * 2 * 2
    knee = knees(table).set_index(["speed", "devices"])["knee_seats_per_arm"]
    assert knee[(1.0, 1)] <= knee[(1.0, 8)]
    # More devices never judge fewer.
    for (n, speed), rows in table.groupby(["seats_per_arm", "speed"]):
        counts = rows.sort_values("devices")["evaluations"].tolist()
        assert counts[0] <= counts[-1] * 1.05, (n, speed, counts)


def test_the_counterfactuals_are_one_change_each():
    run = read_run(DEMO)
    named = dict(scenarios(run))
    assert named["as recorded"] == JudgeSetup(policy="fair")
    assert named["judge 2x faster"].speed == 2.0 and named["2 devices"].devices == 2
    assert named["fifo"].policy == "fifo"
    table = replay_table(run)
    faster = table[(table["scenario"] == "judge 2x faster") & (table["arm"] == "all")].iloc[0]
    own = table[(table["scenario"] == "as recorded") & (table["arm"] == "all")].iloc[0]
    assert faster["utilisation"] == pytest.approx(own["utilisation"] / 2, rel=0.05)
    assert faster["mean_wait_s"] < own["mean_wait_s"]
    sooner = table[(table["scenario"] == "judge 2x faster") & (table["arm"] != "all")]
    assert (sooner["sooner_s"].astype(float) > 0).all()


# -- seeds and power -------------------------------------------------------------------------


def _sweep(root: Path, values: dict[str, list[float]]) -> Path:
    """A sweep of copies of the recorded run, seed i's PASSes of each arm scaled so that its
    best (and re-judged best) x_baseline is ``values[arm][i]``."""
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    arms = load_run(DEMO, git=False).arms.set_index("arm")
    for i in range(len(next(iter(values.values())))):
        job = root / f"seed={i}"
        shutil.copytree(DEMO, job)
        with closing(sqlite3.connect(job / "events.sqlite")) as db, db:
            db.execute("UPDATE meta SET value = ? WHERE key = 'run_id'", (f'"plan-{i}"',))
            db.execute("UPDATE meta SET value = ? WHERE key = 'seed'", (str(i),))
            for arm, wanted in values.items():
                scale = wanted[i] / float(arms.loc[arm, "rejudged_x_baseline"])
                db.execute(
                    "UPDATE evaluations SET metrics = json_set(metrics, '$.x_baseline',"
                    " json_extract(metrics, '$.x_baseline') * ?) WHERE arm = ? AND"
                    " agent != 'baseline' AND verdict = 'PASS'",
                    (scale, arm),
                )
    return root


def test_power_grows_with_seeds_and_a_clear_gap_needs_few(tmp_path: Path):
    sweep = _sweep(
        tmp_path / "sweep",
        {"swarm": [4.0, 4.2, 3.9, 4.1], "solo": [4.0, 4.1, 3.8, 4.2]},
    )
    runs = [read_run(d, multi=True) for d in run_dirs([sweep])]
    assert len(runs) == 4
    p = pilot(runs)
    spread = p.spread().set_index("arm")
    assert spread.loc["swarm", "seeds"] == 4
    assert spread.loc["swarm", "median"] == pytest.approx(4.05, abs=1e-6)
    # The compared value is the re-judged best: its spread is the values' own.
    assert spread.loc["swarm", "rejudged_x_sd"] == pytest.approx(spread.loc["swarm", "sd"])
    assert spread.loc["swarm", "best_x_sd"] > 0
    low = power_at(p, 3, 0.20, draws=40)
    high = power_at(p, 8, 0.20, draws=40)
    assert low == 0.0  # 3 vs 3 seeds: the report's test cannot reach p < 0.05
    assert high >= 0.8
    table = power_table(p, (0.01, 0.20), max_seeds=6, draws=40).set_index("difference")
    needed = table.loc[0.20, "seeds_per_arm"]
    assert 4 <= needed <= 6
    per_seed_hours = p.values.groupby("arm")["judge_hours"].median().sum()
    assert table.loc[0.20, "judge_hours"] == pytest.approx(per_seed_hours * needed)
    # 1% against a between-seed sd of about 3%: not within 6 seeds, and its cost unknown.
    assert pd.isna(table.loc[0.01, "seeds_per_arm"]) and pd.isna(table.loc[0.01, "judge_hours"])
    early = early_signal(runs).set_index("fraction")
    assert early.loc[0.5, "pairs"] == 8


def test_the_cli_prints_and_writes_the_plan(tmp_path: Path, capsys):
    out = tmp_path / "plan"
    assert (
        main(
            [
                str(DEMO),
                "--out",
                str(out),
                "--quick",
                "--seats",
                "1,2",
                "--speeds",
                "1,0.5",
                "--minutes",
                "5",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "Planner (simulation)" in printed and "The knee (simulation)" in printed
    assert "Counterfactual replay (simulation)" in printed
    assert "One seed per arm" in printed  # no power table from one seed
    for name in ("team.csv", "knees.csv", "replay.csv", "self_replay.csv", "plan.md"):
        assert (out / name).is_file(), name
    assert (out / "plan.png").read_bytes()[:4] == b"\x89PNG"
    team = pd.read_csv(out / "team.csv")
    assert sorted(team["seats_per_arm"].unique()) == [1, 2]
    assert sorted(team["speed"].unique()) == [0.5, 1.0]
    assert len(team) == 2 * 2 * 4


def test_a_sweep_plan_carries_the_power_table(tmp_path: Path):
    sweep = _sweep(tmp_path / "sweep", {"swarm": [4.0, 4.4, 4.2], "solo": [3.0, 3.2, 3.1]})
    plan = make_plan([sweep], seats=(1,), speeds=(1.0,), devices=(1,), replications=1,
                     max_seeds=4, draws=20)  # fmt: skip
    assert plan.power is not None and len(plan.replays) == 3
    text = render(plan, figure=None)
    assert "Seeds and power (simulation)" in text and "shared one judge" in text


def test_an_evaluation_budget_ends_the_simulated_run_when_it_is_judged():
    fit = fit_runs([read_run(DEMO)])
    out = simulate(fit, {"swarm": 4, "solo": 1}, JudgeSetup(policy="fair"), 3600.0,
                   evaluations_per_arm=12)  # fmt: skip
    assert out.per_arm == {"swarm": 12, "solo": 12}
    # The run ends with its last verdict, long before the hour: its length is the prediction.
    assert out.horizon_s < 600 and out.utilisation > 0.5


def test_the_fitted_model_predicts_the_run_it_was_fitted_on():
    """The closed loop (fitted pace, drawn outcomes, the run's 12-evaluation budget per arm)
    gives back the run's length, utilisation and mean wait within 10%; with a judge half as
    fast it predicts a longer run, and says so."""
    run = read_run(DEMO)
    assert run.evaluations_per_arm == 12
    fit = fit_runs([run])
    same = predict_run(fit, run)
    for name in ("evaluations", "utilisation", "mean_queue_wait_s", "phase_s"):
        assert same[name]["relative_error"] < 0.10, (name, same[name])
    slower = predict_run(fit, run, speed=0.5)
    assert slower["phase_s"]["simulated"] > 1.5 * same["phase_s"]["simulated"]
    assert slower["phase_s"]["relative_error"] > 0.3


def test_the_report_ends_with_the_planners_section_when_asked(tmp_path: Path):
    from analysis.report.build import build_report

    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    plain = build_report(run).path.read_text()
    assert "Planner (simulation)" not in plain
    text = build_report(run, plan=True).path.read_text()
    assert text.startswith(plain.rstrip("\n"))  # the report itself is unchanged
    assert (
        "## Planner (simulation)" in text
        and "![Team size x judge (simulation)](plan/plan.png)" in text
    )
    assert (run / "analysis" / "plan" / "plan.png").is_file()


def test_a_submission_never_judged_is_replayed_at_its_arms_median(tmp_path: Path):
    run_dir = tmp_path / "run"
    shutil.copytree(DEMO, run_dir)
    with closing(sqlite3.connect(run_dir / "events.sqlite")) as db, db:
        db.execute("DELETE FROM evaluations WHERE job_id = 88")  # withdrawn at the deadline
    run = read_run(run_dir)
    [never] = [j for j in run.jobs if not j.judged]
    solo = pd.Series([j.service_s for j in run.jobs if j.arm == "solo" and j.judged])
    assert never.arm == "solo" and never.outcome == "not evaluated"
    assert never.service_s == pytest.approx(solo.median())
    assert len(run.jobs) == 24


def test_a_closed_loop_of_fixed_times_gives_the_arithmetic():
    """One arm, every evaluation 10 s, a seat waits 5 s after each verdict: one seat keeps a
    judge busy 10 s in 15; two seats saturate one device; a second device serves them both."""
    from analysis.plan.fit import ArmPace, Fit

    pace = ArmPace("a", seats=1, submissions=1, per_seat_hour=0.0, think_s=[5.0],
                   first_s=[0.0], mix={"PASS": 1.0}, service={"PASS": [(0.0, 10.0)]})  # fmt: skip
    fit = Fit(runs=[], arms={"a": pace}, duplicate_s=0.05)
    one = simulate(fit, 1, JudgeSetup(), 1500.0)
    assert one.evaluations == 100 and one.utilisation == pytest.approx(1000 / 1500, abs=0.01)
    two = simulate(fit, 2, JudgeSetup(), 1500.0)
    assert two.evaluations == 150 and two.utilisation == pytest.approx(1.0)
    # Each seat's next submission waits behind the other's evaluation: 5 s each time.
    assert two.mean_wait_s == pytest.approx(5.0, abs=0.2)
    wide = simulate(fit, 2, JudgeSetup(devices=2), 1500.0)
    assert wide.evaluations == 200 and wide.mean_wait_s == 0.0


FIFO = Path(__file__).parent / "fixtures" / "plan_fifo"


def test_a_second_real_run_replays_itself_and_is_predicted_from_the_first():
    """plan_fifo: the same demo with judge.queue_policy=fifo, run on this machine under load
    from other work (its judge 8.6x slower than the demo's: median PASS 89.6 s against 10.4 s)
    and interrupted after 1411 s with 21 of its 24 evaluations judged. Its self-replay is
    within 10%; predicted from the demo alone, its judge's speed is what the planner cannot
    know: at the demo's speed the wait is an order of magnitude short, at the measured speed
    the judge's utilisation comes back within 10% (docs/plan.md records every error)."""
    fifo = read_run(FIFO)
    assert fifo.policy == "fifo" and fifo.ended_by == "interrupted"
    errors = self_replay_error(fifo)
    for name in ("evaluations", "utilisation", "mean_queue_wait_s"):
        assert errors[name]["relative_error"] < 0.10, (name, errors[name])
    demo = read_run(DEMO)

    def median_pass(run):
        return pd.Series([j.service_s for j in run.jobs if j.outcome == "PASS"]).median()

    speed = median_pass(demo) / median_pass(fifo)
    assert 0.1 < speed < 0.13
    fit = fit_runs([demo])
    naive = predict_run(fit, fifo)
    assert naive["mean_queue_wait_s"]["simulated"] < fifo.measured["mean_queue_wait_s"] / 5
    corrected = predict_run(fit, fifo, speed=speed)
    assert corrected["utilisation"]["relative_error"] < 0.10
    assert corrected["mean_queue_wait_s"]["relative_error"] < 0.5


def test_a_run_whose_judge_judged_nothing_gives_no_plan(tmp_path: Path):
    from analysis.report.build import build_report

    run = tmp_path / "run"
    shutil.copytree(DEMO, run)
    with closing(sqlite3.connect(run / "events.sqlite")) as db, db:
        db.execute("DELETE FROM evaluations")
    with pytest.raises(ValueError, match="judged nothing"):
        make_plan([run])
    assert main([str(run), "--out", str(tmp_path / "out")]) == 2
    assert "No plan: the judge judged nothing" in build_report(run, plan=True).path.read_text()
