"""Generated decode mutants, the catalogue rule and the ``new-task`` scaffold.

The wrapper tests run the scaffold's real engine behind the wrapper as real subprocesses; the
docker test makes a task outside the project and runs preflight and evaluate on it for real.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from judge import compose_judge_config
from judge.kinds.decode.mutants import WRAPPER
from judge.kinds.decode.scaffold import write_decode_task
from judge.preflight import catalogue, catalogue_problem, expectation, load_mutants, matches
from judge.verdict import Evaluation, Verdict
from tasks.schema import PROJECT_ROOT

FASTER = """
    def decode(self, steps, margins=False):
        h = np.stack(self.hidden)  # every row at once: one read of the head per step
        tokens = np.empty((len(h), steps), dtype=np.int64)
        for step in range(steps):
            choice = (h @ self.head).argmax(axis=1)
            tokens[:, step] = choice
            h = self._wrap(3.0 * h + self.embed[choice])
        return tokens.tolist(), None
"""


@pytest.fixture
def task(tmp_path: Path) -> Path:
    return write_decode_task(tmp_path / "toy")


def _cfg(task: Path, tmp_path: Path):
    return compose_judge_config([f"task={task}", f"judge.private_dir={tmp_path / 'judge'}"])


def test_scaffold_catalogue_is_generated_only_and_complete(task: Path, tmp_path: Path) -> None:
    cfg = _cfg(task, tmp_path)
    assert load_mutants(cfg) == []  # no mutants.yaml at all
    mutants = catalogue(cfg)
    assert {m.source for m in mutants} == {"generated"}
    assert len(mutants) >= 13
    assert catalogue_problem(cfg, mutants) is None
    assert "no mutants at all" in (catalogue_problem(cfg, []) or "")
    # Without its hang, the catalogue has no WRONG (timeout): refused, and said so.
    problem = catalogue_problem(cfg, [m for m in mutants if m.reason != "timeout"]) or ""
    assert "WRONG (timeout)" in problem and "\n" not in problem
    problem = catalogue_problem(cfg, [m for m in mutants if m.name != "baseline"]) or ""
    assert "unmodified" in problem


def test_an_empty_mutants_file_does_not_pass_alone_and_bad_keys_are_refused(
    task: Path, tmp_path: Path
) -> None:
    cfg = _cfg(task, tmp_path)
    (task / "mutants.yaml").write_text("[]\n")
    assert catalogue_problem(cfg, load_mutants(cfg)) is not None
    (task / "mutants.yaml").write_text("- {name: x, patch: null, expect: PASS, tree: evil}\n")
    with pytest.raises(ValueError, match="unknown keys tree"):
        load_mutants(cfg)


def test_also_accept_names_other_right_verdicts_and_nothing_else(
    task: Path, tmp_path: Path
) -> None:
    cfg = _cfg(task, tmp_path)
    (task / "mutants.yaml").write_text(
        "- {name: relay, patch: null, expect: PASS, max_x_baseline: 2.0,"
        " also_accept: ['WRONG (b1_regression)']}\n"
    )
    [relay] = load_mutants(cfg)
    assert expectation(relay) == "PASS x<=2 or WRONG (b1_regression)"

    def judged(verdict: str, reason: str = "", x: float | None = None) -> Evaluation:
        metrics = {} if x is None else {"x_baseline": x}
        return Evaluation(0, "a", "b", "c", Verdict(verdict), reason, metrics=metrics)

    assert matches(relay, judged("PASS", x=1.0))
    assert matches(relay, judged("WRONG", "b1_regression"))
    assert not matches(relay, judged("PASS", x=3.0))  # the gain bound still holds for a PASS
    assert not matches(relay, judged("WRONG", "mismatch"))
    assert not matches(relay, judged("ERROR", "infrastructure"))
    (task / "mutants.yaml").write_text(
        "- {name: relay, patch: null, expect: PASS, also_accept: 'WRONG'}\n"
    )
    with pytest.raises(ValueError, match="also_accept must be a list"):
        load_mutants(cfg)
    (task / "mutants.yaml").write_text(
        "- {name: relay, patch: null, expect: PASS, also_accept: ['FINE']}\n"
    )
    with pytest.raises(ValueError, match="also_accept must be a list"):
        load_mutants(cfg)


def test_a_task_entry_replaces_the_generated_one_of_its_name(task: Path, tmp_path: Path) -> None:
    cfg = _cfg(task, tmp_path)
    (task / "mutants.yaml").write_text(
        "- {name: gen_hang, patch: null, expect: PASS, why: restated}\n"
    )
    [hang] = [m for m in catalogue(cfg) if m.name == "gen_hang"]
    assert hang.source == "task" and hang.expect == "PASS"


class Wrapped:
    """The scaffold's harness run behind the wrapper in ``mode`` (a real subprocess)."""

    def __init__(self, tree: Path, mode: str | None, **extra: object) -> None:
        argv = [sys.executable, "-I", "-B", "harness/serve.py"]
        if mode:
            (tree / "w").mkdir(exist_ok=True)
            (tree / "w" / "wrap.py").write_bytes(WRAPPER.read_bytes())
            (tree / "w" / "mutant.json").write_text(
                json.dumps({"mode": mode, "vocab": 2048, **extra})
            )
            argv = [sys.executable, "-I", "-B", "w/wrap.py", *argv]
        self.proc = subprocess.Popen(
            argv, cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.ask({"op": "load"})["ok"]

    def ask(self, request: dict) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def run(self, prompts: list[list[int]], steps: int) -> list[list[int]]:
        self.ask({"op": "prefill", "prompts": prompts})
        tokens = self.ask({"op": "decode", "steps": steps})["tokens"]
        self.ask({"op": "reset"})
        return tokens

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


PROMPTS = [[5, 6, 7], [100, 2, 3, 4], [9], [2047, 0, 11]]


def test_the_wrapper_cheats_behind_the_protocol(task: Path) -> None:
    tree = task / "template"
    honest = Wrapped(tree, None)
    truth = honest.run(PROMPTS, 12)
    single = honest.run(PROMPTS[:1], 12)
    honest.close()
    assert single == truth[:1]

    shifted = Wrapped(tree, "row_shift")
    assert shifted.run(PROMPTS, 12) == truth[1:] + truth[:1]
    assert shifted.run(PROMPTS[:1], 12) == truth[:1]
    shifted.close()

    early = Wrapped(tree, "early_stop")
    assert early.run(PROMPTS, 12) == [row[:9] + [0] * 3 for row in truth]
    early.close()

    stale = Wrapped(tree, "stale_state")
    assert stale.run(PROMPTS[:1], 12) == truth[:1]  # a fresh process: honest
    assert stale.run(PROMPTS, 12) == truth
    assert stale.run(PROMPTS[:1], 12) != truth[:1]  # B=1 after a batch: stale
    stale.close()

    ahead = Wrapped(tree, "decode_in_prefill", ahead=20)
    assert ahead.run(PROMPTS, 12) == truth  # right answers, the work done in prefill
    ahead.close()

    repeat = Wrapped(tree, "lone_repeat_leak")
    assert repeat.run(PROMPTS[:1], 12) == truth[:1]
    assert repeat.run(PROMPTS, 12) == truth  # a batch, then a lone request: honest
    assert repeat.run(PROMPTS[:1], 12) == truth[:1]
    assert repeat.run(PROMPTS[:1], 12) != truth[:1]  # lone after lone: the kept row leaks
    repeat.close()

    # The slow ones answer right: only the judge's clock can tell them.
    for mode, extra in (
        ("pad_after_batch", {}),
        ("pad_after_small_batch", {"largest": 8}),
        ("b1_random_slow", {}),
        ("b1_slow_untimed", {"timed_steps": 12, "timed_prompt_len": [1, 4]}),
    ):
        slow = Wrapped(tree, mode, **extra)
        assert slow.run(PROMPTS, 12) == truth
        assert [slow.run(PROMPTS[:1], 12) for _ in range(3)] == [truth[:1]] * 3
        assert slow.run(PROMPTS[2:3], 7) == [truth[2][:7]]
        slow.close()


@pytest.mark.docker
def test_new_task_outside_the_project_passes_preflight_and_scores_a_faster_candidate(
    tmp_path: Path, base_image
) -> None:
    status_before = subprocess.run(
        ["git", "status", "--porcelain"], cwd=PROJECT_ROOT, capture_output=True, text=True
    ).stdout

    def judge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "judge", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1200,
        )

    made = judge("new-task", str(tmp_path / "toy"), "--kind", "decode")
    assert made.returncode == 0, made.stderr
    task = Path(made.stdout.strip())
    again = judge("new-task", str(task), "--kind", "decode")
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1
    private = f"judge.private_dir={tmp_path / 'judge'}"
    # One evaluation at a time: two sandboxes on a loaded 2-CPU machine made runc's pause fail.
    pre = judge("preflight", f"task={task}", private, "judge.preflight_parallel=1")
    assert pre.returncode == 0, pre.stdout + pre.stderr[-3000:]
    rows = [line.split() for line in pre.stdout.splitlines()[2:] if line.startswith(("gen", "b"))]
    assert len(rows) >= 13 and {row[1] for row in rows} == {"generated"}, pre.stdout

    cand = tmp_path / "cand"
    subprocess.run(["cp", "-r", str(task / "template"), str(cand)], check=True)
    engine = cand / "engine.py"
    text = engine.read_text()
    start, end = text.index("    def decode("), text.index("    def reset(")
    engine.write_text(text[:start] + FASTER.lstrip("\n") + "\n" + text[end:])
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "batched decode"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cand, check=True
        )
    scored = judge("evaluate", f"task={task}", f"candidate={cand}", private)
    assert scored.returncode == 0, scored.stdout + scored.stderr[-3000:]
    evaluation = json.loads(scored.stdout.strip().splitlines()[-1])
    assert evaluation["verdict"] == "PASS" and evaluation["metrics"]["x_baseline"] > 1.0
    status_after = subprocess.run(
        ["git", "status", "--porcelain"], cwd=PROJECT_ROOT, capture_output=True, text=True
    ).stdout
    # Others may change the shared tree meanwhile: only what this test could have written counts.
    new = set(status_after.splitlines()) - set(status_before.splitlines())
    assert not [line for line in new if "results" in line or "toy" in line], new


@pytest.mark.parametrize("task", ["decode_cpu", "decode_c", "serve_cpu"])
def test_every_bundled_catalogue_names_each_mutant_once_with_issue_24s_families(task: str) -> None:
    from judge import compose_judge_config

    names = [m.name for m in catalogue(compose_judge_config([f"task={task}"]))]
    assert len(names) == len(set(names))
    families = {"gen_b1_slow_untimed", "gen_b1_random_slow", "gen_lone_repeat_leak"}
    if task == "serve_cpu":
        families |= {"gen_b1_slow_after_burst", "gen_odd_chunks", "gen_status_leak"}
    else:
        families |= {"gen_b1_pad_after_batch", "gen_b1_pad_after_small_batch"}
    assert families <= set(names)
