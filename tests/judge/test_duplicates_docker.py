"""A duplicate on the real judge (Docker): the unmodified baseline submitted twice in one arm,
under two commits with one tree, is evaluated once; the second takes the first's verdict with
no sandbox run and no evaluation folder."""

from __future__ import annotations

import pytest

from isolation.gitutil import git, git_env, template_repo
from judge import compose_judge_config
from judge.private import setup
from judge.queue import JudgeQueue
from judge.service import describe, run_until_done
from judge.verdict import Verdict
from tasks.schema import task_root

pytestmark = pytest.mark.docker


def test_the_same_tree_is_evaluated_once(judge_private_dir, base_image, tmp_path):
    cfg = compose_judge_config(["task=decode_cpu", f"judge.private_dir={judge_private_dir}"])
    home = setup(cfg)
    repo, first = template_repo(task_root(cfg.task) / cfg.task.template, tmp_path / "agent")
    env = git_env(
        GIT_AUTHOR_NAME="other",
        GIT_AUTHOR_EMAIL="o@x",
        GIT_COMMITTER_NAME="other",
        GIT_COMMITTER_EMAIL="o@x",
    )
    git("commit", "-q", "--allow-empty", "-m", "the same files again", cwd=repo, env=env)
    again = git("rev-parse", "HEAD", cwd=repo)
    assert again != first
    queue = JudgeQueue(home.queue_path)
    jobs = [
        queue.enqueue(arm="dup-docker", agent="w", repo=str(repo), commit=sha)
        for sha in (first, again)
    ]
    judged, reused = run_until_done(cfg, home, jobs)
    assert judged.verdict is Verdict.PASS and judged.duplicate_of is None, judged.detail
    assert judged.stages["total"] > 0
    assert (reused.verdict, reused.duplicate_of, reused.commit) == (Verdict.PASS, jobs[0], again)
    assert reused.metrics == judged.metrics and reused.stages == {}
    assert reused.tree == judged.tree == git("rev-parse", f"{first}^{{tree}}", cwd=repo)
    assert f"duplicate of job {jobs[0]}" in describe(reused)
    # The sandbox never ran for it: no evaluation folder, no stage.
    assert list(home.evals.glob(f"{jobs[0]}-*")) and not list(home.evals.glob(f"{jobs[1]}-*"))
