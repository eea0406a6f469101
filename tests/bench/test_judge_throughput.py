"""bench/judge_throughput.py without the judge: its workload, its bench repository (real git),
its report's verdict comparison and last line. The judge itself runs only in the bench."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from judge import Evaluation, Verdict, compose_judge_config
from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "judge_throughput.py"


@pytest.fixture(scope="module")
def bench():
    return load_bench("judge_throughput")


def test_help_runs_without_a_judge():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True
    )
    assert "--quick" in out.stdout and "--private-dir" in out.stdout


def test_the_full_workload_covers_every_kind_of_submission(bench):
    items = bench.workload(quick=False, baselines_per_round=3, b1=True)
    expects = {i.expect for i in items}
    checks = ("mismatch", "alternating", "prefill_cap", "protocol", "timeout", "b1_regression")
    for reason in checks:
        assert f"WRONG ({reason})" in expects
    assert "REJECT (frozen_zone)" in expects
    assert len({i.label for i in items}) == len(items)
    assert sum(i.noise for i in items) == 3
    assert all(i.source == "baseline" for i in items if i.rejudge)
    # A duplicate comes after its original, under a commit of its own.
    labels = [i.label for i in items]
    for dup in (i for i in items if i.kind == "duplicate"):
        first = next(j for j in items if j.source == dup.source and j.kind != "duplicate")
        assert labels.index(first.label) < labels.index(dup.label)
        assert dup.commit != first.commit
    assert "b1_slow_2x" not in [i.label for i in bench.workload(False, 3)]


def test_quick_is_a_subset_with_one_rejudgement(bench):
    quick = bench.workload(quick=True, baselines_per_round=2)
    assert [i.label for i in quick if i.rejudge] == ["baseline_rejudge1"]
    assert {i.kind for i in quick} == {"pass", "wrong", "reject", "duplicate", "rejudge"}


def test_a_duplicate_is_the_same_tree_under_another_commit(bench, tmp_path):
    from judge.preflight import build_mutant_repo

    cfg = compose_judge_config(["task=decode_cpu", f"judge.private_dir={tmp_path}"])
    items = bench.workload(quick=False, baselines_per_round=1)
    assert bench.move_closure("moe_group_by_expert", bench._moves(cfg)[1]) == [
        "step_rows_together",
        "moe_cache_experts",
        "moe_group_by_expert",
    ]

    class Home:  # build_mutant_repo needs only the judge folder's root
        root = tmp_path

    repo, shas = build_mutant_repo(cfg, Home(), bench.bench_mutants(cfg, items))

    def tree(sha: str) -> str:
        return subprocess.run(
            ["git", "rev-parse", f"{sha}^{{tree}}"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()

    assert set(shas) >= {i.commit for i in items}
    for dup in (i for i in items if i.kind == "duplicate"):
        original = dup.commit.removesuffix("_dup")
        assert shas[dup.commit] != shas[original]
        assert tree(shas[dup.commit]) == tree(shas[original])
    assert tree(shas["head_cache"]) != tree(shas["baseline"])  # the move's patch applied


def _evaluation(verdict: str, reason: str = "", x: float | None = None) -> Evaluation:
    metrics = {"x_baseline": x} if x is not None else {}
    return Evaluation(
        job_id=1,
        arm="a",
        agent="b",
        commit="c",
        verdict=Verdict(verdict),
        reason=reason,
        metrics=metrics,
        stages={"total": 10.0},
    )


def test_the_report_says_whether_verdicts_agree(bench):
    items = [
        bench.Item("baseline", "baseline", "pass", "PASS"),
        bench.Item("row_shift", "gen_row_shift", "wrong", "WRONG (mismatch)"),
        bench.Item("baseline_rejudge1", "baseline", "rejudge", "PASS"),
    ]

    def side(name: str, wall: float, second: Evaluation, xs: tuple[float, float]):
        s = bench.Side(name, cfg=None, wall_s=wall)
        s.results = [[_evaluation("PASS", x=xs[0]), second, _evaluation("PASS", x=xs[1])]]
        return s

    same = {
        "naive": side("naive", 36.0, _evaluation("WRONG", "mismatch"), (1.0, 1.2)),
        "staged": side("staged", 18.0, _evaluation("WRONG", "mismatch"), (1.0, 1.1)),
    }
    last = bench.report(same, items)[-1]
    assert last == (
        "judge throughput: naive 300.0/h, staged 600.0/h, ratio 2.00,"
        " identical verdicts: yes, noise old 0.14 new 0.07"
    )
    differ = dict(same, staged=side("staged", 18.0, _evaluation("WRONG", "alternating"), (1, 1)))
    lines = bench.report(differ, items)
    assert lines[-1].split(", ")[3] == "identical verdicts: no"
    assert any("row_shift: naive WRONG (mismatch), staged WRONG (alternating)" in x for x in lines)


def test_an_interrupted_runs_queued_jobs_are_withdrawn(bench, tmp_path):
    from judge import JudgeQueue

    queue = JudgeQueue(tmp_path / "queue.sqlite")
    left = queue.enqueue(arm="bench-abc-naive-r1", agent="bench", repo="r", commit="c" * 40)
    other = queue.enqueue(arm="swarm", agent="w0", repo="r", commit="c" * 40)

    class Home:
        queue_path = tmp_path / "queue.sqlite"

    assert bench.cancel_leftovers(Home()) == [left]
    assert (queue.state(left), queue.state(other)) == ("cancelled", "queued")
