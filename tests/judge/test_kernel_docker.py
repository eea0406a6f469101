"""The kernel kind for real: the bundled ``kernel_numpy`` task's preflight in Docker (every
generated mutant gets its verdict, the baseline passes), and the reference solution, judged
through the queue like any candidate, scores x > 1."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

import judge.kinds.kernel  # noqa: F401  (registers the kind: nothing else names it yet)
from judge import compose_judge_config
from judge.preflight import format_table, passed_preflight, run_preflight
from judge.private import setup
from judge.service import queue_for, run_until_done
from judge.verdict import Verdict


@pytest.mark.docker
def test_kernel_numpy_preflight_passes_and_a_faster_candidate_scores_above_one(
    tmp_path: Path, base_image
) -> None:
    # One evaluation at a time: two sandboxes on a loaded 2-CPU machine only add noise.
    cfg = compose_judge_config(
        [
            "task=kernel_numpy",
            f"judge.private_dir={tmp_path / 'judge'}",
            "judge.preflight_parallel=1",
        ]
    )
    home = setup(cfg)
    report = run_preflight(cfg, home)
    table = format_table(report.rows)
    assert report.ok, table
    rows = {r.mutant: r for r in report.rows}
    generated = {name for name, r in rows.items() if r.source == "generated"}
    assert {"baseline", "gen_cache_identity", "gen_alias", "gen_late_thread"} <= generated
    # The red team's cheats: work after the clock fitted to a commitment sent ahead (late),
    # malformed replies from the candidate's process (protocol, charged: never ERROR).
    red_team = {
        "gen_defer_to_get_fold_fit": {"WRONG (late)"},
        "gen_late_thread_fold_fit": {"WRONG (late)", "WRONG (mismatch)"},
        "gen_reply_field_types": {"WRONG (protocol)"},
        "gen_shape_overflow": {"WRONG (protocol)"},
        "gen_short_read": {"WRONG (protocol)"},
        # A second red team's: replies that made an uncharged judge fault on demand, and an
        # engine that stopped reading stdin (the judge hung for good).
        "gen_huge_shape": {"WRONG (protocol)"},
        "gen_get_type_flip": {"WRONG (protocol)"},
        "gen_error_on_demand": {"WRONG (protocol)", "WRONG (mismatch)"},
        "gen_stop_reading_stdin": {"WRONG (timeout)"},
    }
    for name, verdicts in red_team.items():
        assert any(rows[name].got.startswith(v) for v in verdicts), table
    assert all(r.status == "ok" for r in report.rows), table
    assert passed_preflight(cfg, home)

    # The reference solution (the preflight's own mutant repository keeps it on a branch),
    # judged afresh through the queue like an agent's commit (rejudge: not the preflight's
    # verdict on the same tree reused).
    queue = queue_for(cfg, home)
    repo = home.root / "mutants"
    record = json.loads((home.root / "preflight.json").read_text())
    assert {r["mutant"] for r in record["rows"]} == set(rows)
    commit = git.Repo(repo).rev_parse("mutant/reference").hexsha
    job = queue.enqueue(
        arm="test", agent="a", repo=str(repo), commit=commit, label="faster", rejudge=True
    )
    (evaluation,) = run_until_done(cfg, home, [job])
    assert evaluation.verdict is Verdict.PASS, evaluation.detail
    assert evaluation.metric["name"] == "call_ms" and not evaluation.metric["higher_is_better"]
    metrics = evaluation.metrics
    assert metrics["x_baseline"] > 1.0, metrics
    assert metrics["score"] < metrics["baseline_score"] and metrics["calls"] == 5
    # The judge's own measure of the hash each timed call includes (reported, not subtracted).
    assert 0 < metrics["commit_ms"] < metrics["score"], metrics
