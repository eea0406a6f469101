"""The scripted agent knows its task only from its card and its move library: the card is made
from the task's config (``agents.scripted.card``), directions come from the task
(``arms.directions``), and a task without a move library cannot seat ``agent=scripted``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from agents.scripted.card import ENV, TaskCard, make_card
from agents.scripted.library import Library
from arms.directions import direction_problems, direction_texts, seat_directions
from judge.integrity import in_zone
from runner.seats import scripted_problem, task_moves

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = ROOT / "agents" / "scripted"
TASKS = ROOT / "tasks"


def _task(name: str = "decode_cpu") -> dict:
    config = yaml.safe_load((TASKS / name / "task.yaml").read_text())
    config.pop("defaults", None)
    config["root"] = str(TASKS / name)
    return config


def test_the_card_carries_the_task_and_reads_the_frozen_zone_as_the_judge() -> None:
    task = _task()
    data = make_card(task, "/usr/bin/python3", {"name": "tok_s", "unit": "tok/s", "label": "x"})
    card = TaskCard.from_json(json.loads(json.dumps(data)))
    assert card.name == "decode_cpu" and card.vocab == task["vocab"] and card.unit == "tok/s"
    assert card.serve[0] == "/usr/bin/python3" and "{python}" not in " ".join(card.serve)
    assert card.direction_names() == [d["name"] for d in task["directions"]]
    assert all(d.text for d in card.directions)
    for path in ("harness/serve.py", "harness/x/y.py", "engine/config.py", "engine/model.py",
                 "harnessy.py", "engine/config.pyc", "README.md"):  # fmt: skip
        assert card.is_frozen(path) == in_zone(path, task["frozen"]), path
    assert card.argv(("{build}/serve", "-x"), Path("/build/t1")) == ["/build/t1/serve", "-x"]


def test_a_compiled_tasks_card_keeps_build_for_the_agent_to_fill() -> None:
    task = {"name": "t", "build": ["cc", "-o", "{build}/serve", "a.c"], "serve": ["{build}/serve"]}
    card = TaskCard.from_json(make_card(task, "/py"))
    assert card.build == ("cc", "-o", "{build}/serve", "a.c")
    assert card.argv(card.serve, Path("/b")) == ["/b/serve"]
    assert card.directions == () and card.frozen == () and card.unit == ""


def test_a_card_is_required_and_versioned() -> None:
    with pytest.raises(ValueError, match=ENV):
        TaskCard.from_environ({})
    with pytest.raises(ValueError, match="version"):
        TaskCard.from_json({"version": 99, "name": "t"})


def test_the_probe_is_the_librarys_and_decode_cpus_is_unchanged() -> None:
    library = Library.load(TASKS / "decode_cpu" / "moves")
    assert library.check is not None and library.probe is not None
    # The prompts the critic probed decode_cpu with before they came from its library.
    assert library.probe.prompts(4096) == [
        [(37 * i + 11) % 4096 for i in range(40)],
        [(53 * i + 5) % 4096 for i in range(9)],
    ]
    assert library.probe.steps == 100
    assert all(t < 3000 for p in library.probe.prompts(3000) for t in p)


def _run_cli(direction: str, card: dict) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), ENV: json.dumps(card)}
    argv = [sys.executable, "-I", str(SCRIPTED), "--role", "worker", "--direction", direction,
            "--moves", str(TASKS / "decode_cpu" / "moves"), "--deadline", "0"]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_the_agent_takes_only_its_tasks_directions() -> None:
    card = make_card(_task(), sys.executable)
    done = _run_cli("ffn", card)  # decode_c's direction, not decode_cpu's
    assert done.returncode == 2
    assert "--direction ffn: task decode_cpu has directions projections, moe" in done.stderr
    done = _run_cli("ffn", {**card, "directions": [{"name": "ffn", "text": ""}]})
    assert "--direction" not in done.stderr  # accepted (it then fails on the missing clone)


def _arm(seats: list[dict], task_directions: bool) -> object:
    return OmegaConf.create({"name": "a", "seats": seats, "task_directions": task_directions})


def test_workers_take_the_tasks_directions_in_order() -> None:
    task = OmegaConf.create(_task())
    names = [d["name"] for d in _task()["directions"]]
    workers = [{"name": f"w{i}", "role": "worker", "direction": None} for i in range(1, 6)]
    critic = {"name": "c", "role": "critic", "direction": None}
    got = seat_directions(task, _arm([*workers, critic], True))
    assert got == [*names, None, None]  # a fifth worker: none left; the critic: never one
    # A seat naming one keeps it; the others take the rest in order.
    workers[0]["direction"] = names[2]
    got = seat_directions(task, _arm(workers[:4], True))
    assert got == [names[2], names[0], names[1], names[3]]
    # Solo: no direction at all.
    assert seat_directions(task, _arm(workers[1:2], False)) == [None]
    assert direction_texts(task)[names[0]] == _task()["directions"][0]["text"]


def test_a_seat_naming_a_direction_the_task_lacks_is_refused() -> None:
    cfg = OmegaConf.create({
        "task": _task("decode_c"),
        "arms": {"swarm": _arm([{"name": "w1", "role": "worker", "direction": "moe"}], True)},
    })  # fmt: skip
    (problem,) = direction_problems(cfg)
    assert problem.startswith("arms.swarm.seats.w1.direction=moe: task decode_c has directions")
    cfg.arms.swarm.seats[0].direction = "ffn"
    assert direction_problems(cfg) == []


def test_scripted_on_a_task_without_a_move_library_is_refused(tmp_path) -> None:
    cfg = OmegaConf.create({
        "agent": {"kind": "scripted", "command": yaml.safe_load(
            (ROOT / "conf" / "agent" / "scripted.yaml").read_text())["command"]},
        "task": {"name": "bare", "root": str(tmp_path), "moves": "moves"},
    })  # fmt: skip
    problem = scripted_problem(cfg)
    assert problem is not None and "task bare has none" in problem
    assert str(tmp_path / "moves" / "moves.json") in problem and "\n" not in problem
    # A command of one's own that does not play the library (a test's shell script) is fine.
    assert scripted_problem(OmegaConf.merge(cfg, {"agent": {"command": ["sh", "-c", "x"]}})) is None
    cfg.agent.kind = "claude_code"  # a real agent needs no library
    assert scripted_problem(cfg) is None
    cfg.agent.kind = "scripted"
    (tmp_path / "moves").mkdir()
    (tmp_path / "moves" / "moves.json").write_text('{"moves": []}')
    assert scripted_problem(cfg) is None and task_moves(cfg.task) == tmp_path / "moves"


# A compiled engine's stand-in: the build writes an executable into {build}; serve runs it.
ENGINE = r"""#!{python}
import json, sys
rows = []
for line in sys.stdin:
    m = json.loads(line)
    if m["op"] == "prefill":
        rows = [list(p) for p in m["prompts"]]
    if m["op"] == "decode":
        out = [[(sum(r) + i) % 7 for i in range(m["steps"])] for r in rows]
        print(json.dumps({"ok": True, "tokens": out}), flush=True)
        continue
    print(json.dumps({"ok": True}), flush=True)
"""


def test_the_probe_builds_the_tree_into_its_own_folder_and_runs_what_it_built(tmp_path) -> None:
    from agents.scripted.library import ProbeSpec
    from agents.scripted.probe import probe

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "engine.txt").write_text(ENGINE.replace("{python}", sys.executable))
    make = (
        "import os, shutil, sys; d = sys.argv[1]; shutil.copy('engine.txt', d + '/serve');"
        " os.chmod(d + '/serve', 0o755)"
    )
    task = {"name": "compiled", "build": ["{python}", "-c", make, "{build}"],
            "serve": ["{build}/serve"], "vocab": 50}  # fmt: skip
    card = TaskCard.from_json(make_card(task, sys.executable))
    spec = ProbeSpec((3, 2), 4)
    outcome, tokens = probe(card, spec, tree, tmp_path / "build-a", timeout=60)
    assert outcome == "ok", outcome
    assert (tmp_path / "build-a" / "serve").is_file() and not (tree / "serve").exists()
    prompts = spec.prompts(50)
    assert tokens == [[(sum(p) + i) % 7 for i in range(4)] for p in prompts]
    # A build that fails is the probe's outcome, and nothing is served.
    broken = TaskCard.from_json(
        make_card({**task, "build": ["{python}", "-c", "raise SystemExit(3)"]}, sys.executable)
    )
    outcome, tokens = probe(broken, spec, tree, tmp_path / "build-b", timeout=60)
    assert outcome.startswith("build failed (3)") and tokens is None


def test_the_runner_refuses_scripted_seats_on_a_task_without_a_library(tmp_path) -> None:
    """A task folder outside the project with no ``moves/``: one line, exit 2, no run folder."""
    import shutil

    task = tmp_path / "nomoves"
    task.mkdir()
    shutil.copytree(TASKS / "decode_cpu" / "template", task / "template")
    shutil.copy(TASKS / "decode_cpu" / "inputs.py", task / "inputs.py")
    spec = (TASKS / "decode_cpu" / "task.yaml").read_text()
    (task / "task.yaml").write_text(spec.replace("name: decode_cpu", "name: nomoves", 1))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "runner", "arm=solo", f"task={task}", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = done.stderr.strip().splitlines()
    assert "agent=scripted plays the task's move library, and task nomoves has none" in line
    assert str(task / "moves" / "moves.json") in line and not run_dir.exists()


def test_the_critic_reads_a_c_diff_with_the_tasks_frozen_zone(tmp_path, monkeypatch) -> None:
    """On a C task the critic names a static buffer (state that outlives reset) and an edit of
    the task's frozen zone, from the card's zone, not decode_cpu's."""
    import argparse

    from agents.scripted.critic import Critic
    from isolation.gitutil import git

    repo = tmp_path / "repo"
    (repo / "engine").mkdir(parents=True)
    (repo / "engine" / "model.c").write_text("static int add(int a, int b);\nint x;\n")
    (repo / "engine" / "config.h").write_text("#define LAYERS 4\n")
    git("init", "-q", "-b", "master", str(repo))
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    git("add", "-A", cwd=repo)
    git(*ident, "commit", "-qm", "base", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo)
    (repo / "engine" / "model.c").write_text(
        "static int add(int a, int b);\nint x;\nstatic float kv_cache[4096];\n"
    )
    (repo / "engine" / "config.h").write_text("#define LAYERS 2\n")
    git(*ident, "commit", "-qam", "faster", cwd=repo)
    commit = git("rev-parse", "HEAD", cwd=repo)
    card = make_card({**_task("decode_c"), "frozen": ["engine/config.h"]}, sys.executable)
    monkeypatch.setenv(ENV, json.dumps(card))
    monkeypatch.setenv("SWARMLAB_REPO", str(repo))
    monkeypatch.setenv("SWARMLAB_NOTES", str(tmp_path / "notes"))
    moves = TASKS / "decode_cpu" / "moves"  # any library: inspect() reads none of it
    args = argparse.Namespace(role="critic", direction="any", seed=0, deadline=0, moves=moves)
    found, _ = Critic(args).inspect(base, commit, repo)
    assert "edits the frozen zone: engine/config.h" in found, found
    assert "static variables (C: state that survives reset)" in found, found
    assert len(found) == 2, found
