"""The baseline is built as every candidate is: a task whose build writes into the tree (or
fails) stops set-up with one line and exit 2, leaving no stored sets half made."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml

from tasks.schema import PROJECT_ROOT

pytestmark = pytest.mark.docker


def test_a_build_writing_into_the_tree_stops_setup_in_one_line(tmp_path):
    folder = tmp_path / "task"
    shutil.copytree(
        PROJECT_ROOT / "tasks" / "decode_cpu",
        folder,
        ignore=shutil.ignore_patterns("__pycache__", "moves"),
    )
    spec = yaml.safe_load((folder / "task.yaml").read_text())
    spec["name"] = "writes_tree"
    spec["build"] = ["{python}", "-I", "-c", "open('engine/built.bin', 'w').write('x')"]
    (folder / "task.yaml").write_text(yaml.safe_dump(spec))
    private = tmp_path / "judge"
    done = subprocess.run(
        [sys.executable, "-m", "judge", "setup", f"task={folder}", f"judge.private_dir={private}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("judge:")]
    assert "the task's build exited with 1 on the baseline" in line
    assert "$SWARMLAB_BUILD" in line and "read-only" in line.lower()
    assert not list(private.glob("*/hidden/sets-*")), "stored sets left half made"


def test_a_baseline_that_fails_to_build_in_an_evaluation_is_error_not_wrong(
    judge_private_dir, base_image, tmp_path, monkeypatch
):
    from isolation.gitutil import template_repo
    from judge import compose_judge_config
    from judge.kinds.decode import evaluator as evaluation
    from judge.private import BaselineBuildFailed, setup
    from judge.queue import JudgeQueue
    from judge.service import run_until_done
    from judge.verdict import Verdict

    cfg = compose_judge_config(["task=decode_cpu", f"judge.private_dir={judge_private_dir}"])
    home = setup(cfg)
    repo, commit = template_repo(
        PROJECT_ROOT / "tasks" / "decode_cpu" / "template", tmp_path / "cand.git"
    )
    built = []

    def failing(sandbox, box, build, timeout):
        built.append(box.name)
        raise BaselineBuildFailed("the task's build exited with 1 on the baseline (template/)")

    monkeypatch.setattr(evaluation, "build_baseline", failing)
    job = JudgeQueue(home.queue_path).enqueue(arm="build", agent="w", repo=str(repo), commit=commit)
    [result] = run_until_done(cfg, home, [job])
    assert (result.verdict, result.reason) == (Verdict.ERROR, "infrastructure"), result.detail
    assert "on the baseline" in result.detail
    assert built and all(name.endswith("-baseline") for name in built)
