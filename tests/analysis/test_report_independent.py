"""A run and a sweep with a private arm (issue 28): the report compares the three arms (the
board's effect, more seats' effect, the best of N independent), says relays are impossible in
the private arm, and its audit lists every difference between the arms and nothing else. The
fixture run (swarm: w1 projections, w2 moe and a critic; solo: w1) gets a third arm,
``independent``: the swarm's two workers on the same directions, private, with its own
submissions and verdicts in the real event log."""

from __future__ import annotations

from pathlib import Path

from analysis.report import main
from analysis.report.independent import audit_section, pairs, seat_bests, visibility_of
from analysis.tables import build_tables
from judge.verdict import Evaluation, Verdict
from runner.events import EventLog
from tests.analysis.conftest import T0, _last_id, _metrics, _stamp, copy_run

# independent's seats: (agent, tok/s of each PASS); w2 also had a WRONG.
INDEPENDENT = {"w1": [118.0, 131.0], "w2": [125.0]}


def add_independent(path: Path) -> None:
    """The fixture run with a third, private arm of the swarm's two workers."""
    events = EventLog(path / "events.sqlite")
    meta = events.meta()
    config = meta["config"]
    config["experiment"] = "swarm_vs_independent_vs_solo"
    seats = [["w1", "worker", "projections"], ["w2", "worker", "moe"]]
    config["arms"]["independent"] = {
        "name": "independent",
        "start": "master",
        "visibility": "private",
        "task_directions": True,
        "seats": [{"name": n, "role": r, "direction": d} for n, r, d in seats],
    }
    for arm in ("swarm", "solo"):
        config["arms"][arm]["visibility"] = "shared"
        config["arms"][arm]["task_directions"] = arm == "swarm"
    events.set_meta(
        experiment="swarm_vs_independent_vs_solo",
        arms=["swarm", "independent", "solo"],
        seats={**meta["seats"], "independent": seats},
        visibility={"swarm": "shared", "independent": "private", "solo": "shared"},
        config=config,
    )
    for name, _role, _direction in seats:
        events.lifecycle("independent", name, "started", restarts=0)
        _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 0.2)
    job = 500
    plan = [(a, s, Verdict.PASS) for a, scores in INDEPENDENT.items() for s in scores]
    for i, (agent, tok_s, verdict) in enumerate([*plan, ("w2", None, Verdict.WRONG)]):
        sha = f"{i + 1:040x}"
        sid, _ = events.add_submission("independent", agent, f"independent/{agent}/{i}", sha, "m")
        _stamp(events, "submissions", sid, T0 + 5 + i)
        job += 1
        events.set_job(sid, job)
        events.add_evaluation(
            sid,
            Evaluation(
                job_id=job, arm="independent", agent=agent, commit=sha, verdict=verdict,
                metrics={} if tok_s is None else _metrics(tok_s, 100.0),
                enqueued_at=T0 + 5 + i, started_at=T0 + 6 + i, finished_at=T0 + 8 + i,
            ),
        )  # fmt: skip


def test_the_report_compares_three_arms_and_audits_their_differences(run_factory):
    run = run_factory()
    add_independent(run.path)
    tables = build_tables(run.path, git=False)
    info = tables.runs[0]
    assert visibility_of(info) == {"swarm": "shared", "independent": "private", "solo": "shared"}
    assert [(p.a, p.b, p.measures) for p in pairs(info)] == [
        ("swarm", "independent", "the board's effect"),
        ("independent", "solo", "the effect of more seats"),
    ]
    assert seat_bests(tables, info, "independent") == {"w1": 131.0, "w2": 125.0}
    audit = "\n".join(audit_section(tables, info))
    # Seats, directions and visibility differ; the rest is one config (start is the same).
    rows = [line.split("|")[1].strip() for line in audit.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["seats", "directions", "visibility"], audit
    assert "2 worker(s), 1 critic(s)" in audit and "projections, moe" in audit

    assert main([str(run.path)]) == 0
    text = (run.path / "analysis" / "report.md").read_text()
    three = text.split("## Three arms")[1].split("\n## ")[0]
    assert "**swarm vs independent** (the board's effect)" in three
    assert "**independent vs solo** (the effect of more seats)" in three
    assert "**Best of 2 independent**" in three and "w1 131.0, w2 125.0" in three
    assert "## What differs between the arms" in text
    relays = text.split("## Relay graph")[1].split("\n## ")[0]
    assert "Relays are impossible in independent (a private arm)" in relays
    # Visibility is the design, not a flaw: only the audit names it.
    assert "Arms differ in `visibility`" not in text
    assert "Arms started at different times" not in text
    # How the directions were chosen is no other difference: the audit lists the directions.
    assert "task_directions" not in text


def test_a_sweep_gives_the_named_comparisons_with_the_tie_rule(tmp_path, template_run):
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    for seed in (1, 2, 3):
        add_independent(copy_run(template_run, root / f"seed={seed}", seed=seed).path)
    assert main([str(root)]) == 0
    text = (root / "analysis" / "report.md").read_text()
    part = text.split("## Three arms, across seeds")[1].split("\n## ")[0]
    board, seats = [line for line in part.splitlines() if line.startswith("- ")]
    # The same numbers in every seed: the shift is exact, and three seeds cannot tell.
    assert board.startswith("- **swarm vs independent** (the board's effect, 3 seed(s), score)")
    assert "difference 29.0 [29.0, 29.0]" in board and ": cannot_tell." in board
    assert seats.startswith("- **independent vs solo** (the effect of more seats, 3 seed(s)")
    assert "difference -9.0 [-9.0, -9.0]" in seats and ": cannot_tell." in seats


def test_a_run_without_a_private_arm_gets_no_three_arm_sections(run_factory):
    run = run_factory()
    assert main([str(run.path)]) == 0
    text = (run.path / "analysis" / "report.md").read_text()
    assert "## Three arms" not in text and "## What differs between the arms" not in text
    assert "impossible" not in text
