"""Task folders anywhere (docs/tasks.md): ``task=NAME`` or ``task=PATH``, composed under the
same schema in ``python -m judge`` and ``python -m runner``; the input generator is loaded from
the folder's own file (no ``sys.path``); a bad folder is one line naming the file and the fix,
exit status 2, and no judge folder or run folder afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from judge import compose_judge_config, load_judge_config, save_judge_config
from judge.checkout import BadInput
from runner.config import quote_verbatim, register_configs
from tasks.folder import load_task_callable, resolve_task_overrides
from tasks.schema import PROJECT_ROOT

BUNDLED = PROJECT_ROOT / "tasks" / "decode_cpu"
# The copy's generator differs from the bundled one: stored prompts show which file was loaded.
OWN_SEED = "rng = np.random.default_rng(seed + 7919)"


def _copy_task(where: Path) -> Path:
    """decode_cpu's folder copied to ``where``, outside the project, with its own generator."""
    shutil.copytree(BUNDLED, where, ignore=shutil.ignore_patterns("__pycache__"))
    inputs = where / "inputs.py"
    text = inputs.read_text()
    assert "rng = np.random.default_rng(seed)" in text
    inputs.write_text(text.replace("rng = np.random.default_rng(seed)", OWN_SEED))
    return where


@pytest.fixture
def folder(tmp_path) -> Path:
    return _copy_task(tmp_path / "elsewhere" / "mytask")


def _run(module: str, *args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_a_folder_outside_the_project_composes_with_its_absolute_root(folder, monkeypatch):
    cfg = compose_judge_config([f"task={folder}"])
    assert Path(cfg.task.root) == folder.resolve()
    assert (cfg.task.name, cfg.task.kind) == ("decode_cpu", "decode")
    # Relative to the working directory as well.
    monkeypatch.chdir(folder.parent.parent)
    cfg = compose_judge_config(["task=elsewhere/mytask"])
    assert Path(cfg.task.root) == folder.resolve()
    # A bundled name is its folder in the project.
    assert Path(compose_judge_config(["task=decode_cpu"]).task.root) == BUNDLED


def test_the_generator_is_the_folders_own_file(folder):
    own = load_task_callable("inputs.py:make_prompts", folder)
    bundled = load_task_callable("inputs.py:make_prompts", BUNDLED)
    assert own(1, 2, (8, 24), 4096) != bundled(1, 2, (8, 24), 4096)
    assert own.__module__ != bundled.__module__
    assert "inputs" not in sys.modules or sys.modules["inputs"].__file__ != str(folder)


def test_a_saved_config_loads_the_generator_without_the_project_on_the_path(folder, tmp_path):
    """The judge service's way: a saved config, PYTHONPATH replaced, another working folder."""
    cfg = compose_judge_config([f"task={folder}"])
    saved = save_judge_config(cfg.task, cfg.judge, tmp_path / "judge.yaml")
    assert Path(load_judge_config(saved).task.root) == folder.resolve()
    script = (
        "import sys, json; from pathlib import Path\n"
        "from judge import load_judge_config\n"
        "from judge.private import draw_set\n"
        f"cfg = load_judge_config(Path({str(saved)!r}))\n"
        "s = draw_set(cfg.task, 5, 'x', 3, [8, 24], 4)\n"
        "print(json.dumps(s.prompts))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("SWARMLAB_TASK_FOLDERS", None)
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(PROJECT_ROOT)!r})\n"
         + script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    from judge.private import derive_seed

    own = load_task_callable("inputs.py:make_prompts", folder)
    assert json.loads(result.stdout) == own(derive_seed(5, "x"), 3, (8, 24), 4096)


def _compose_runner(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="runner", overrides=list(overrides))


def test_a_sweep_over_task_names_and_folders_composes_job_by_job(folder):
    [sweep] = resolve_task_overrides([f"task=decode_cpu,decode_c,{folder}"])
    [parsed] = OverridesParser.create().parse_overrides([sweep])
    assert parsed.is_sweep_override()
    options = list(parsed.sweep_string_iterator())
    assert options[:2] == ["decode_cpu", "decode_c"] and len(options) == 3
    roots = [Path(_compose_runner(f"task={o}", "arm=solo").task.root) for o in options]
    assert roots == [BUNDLED, PROJECT_ROOT / "tasks" / "decode_c", folder.resolve()]


def test_the_runner_takes_a_task_folder(folder, tmp_path):
    result = _run("runner", f"task={folder}", "arm=solo", "--cfg", "job", cwd=PROJECT_ROOT)
    assert result.returncode == 0, result.stderr
    assert f"root: {folder.resolve()}" in result.stdout


def test_a_continuation_takes_a_run_folder_whatever_its_name(tmp_path):
    """Hydra's lexer refuses ``~`` and ``^``: the runner quotes such a path for it, so the
    settings check (not the lexer) answers, naming the path as it was given."""
    odd = tmp_path / "run~1^2"
    odd.mkdir()
    result = _run(
        "runner",
        "arm=continuation",
        f"from_run={odd}",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"judge.private_dir={tmp_path / 'judge'}",
        cwd=PROJECT_ROOT,
    )
    assert result.returncode == 2, result.stderr
    assert f"from_run={odd} is not a run directory" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


def test_from_run_takes_any_path():
    assert quote_verbatim(["from_run=/r/a~1^2", "from_run=A,B", "seed=1"]) == [
        "from_run='/r/a~1^2'",
        "from_run=A,B",
        "seed=1",
    ]


def _break(folder: Path, case: str) -> None:
    """Make ``folder`` bad in the way ``case`` names."""
    task = folder / "task.yaml"
    text = task.read_text()
    if case == "no task.yaml":
        task.unlink()
    elif case == "bad yaml":
        task.write_text(text + "\ncases: [unclosed\n")
    elif case == "unknown kind":
        task.write_text(text.replace("kind: decode", "kind: decodee"))
    elif case == "missing template":
        shutil.rmtree(folder / "template")
    elif case == "missing field":
        task.write_text(text.replace("vocab: 4096\n", ""))
    elif case == "typo":
        task.write_text(text + "\nvocabb: 12\n")
    elif case == "wrong type":
        task.write_text(text.replace("vocab: 4096", "vocab: lots"))
    elif case == "module spec":
        task.write_text(text.replace('"inputs.py:make_prompts"', "tasks.decode_cpu.inputs:x"))
    elif case == "generator raises":
        (folder / "inputs.py").write_text(
            "def make_prompts(seed, batch, prompt_len, vocab):\n    raise RuntimeError('boom')\n"
        )
    elif case == "wrong shape":
        (folder / "inputs.py").write_text(
            "def make_prompts(seed, batch, prompt_len, vocab):\n    return [[1, 2, 3]]\n"
        )
    elif case == "ids out of range":
        (folder / "inputs.py").write_text(
            "def make_prompts(seed, batch, prompt_len, vocab):\n"
            "    return [[vocab] * prompt_len[0] for _ in range(batch)]\n"
        )
    elif case == "generator does not load":
        (folder / "inputs.py").write_text("def make_prompts(:\n")
    else:
        raise AssertionError(case)


# Each bad folder, the words its one line must hold, and the file it must name.
BAD = [
    ("no task.yaml", "holds no task.yaml", ""),
    ("bad yaml", "not valid YAML at line", "task.yaml"),
    ("unknown kind", "kind='decodee' is no task kind: use one of decode", "task.yaml"),
    ("missing template", "template='template': no folder", "task.yaml"),
    ("missing field", "required field(s) missing: vocab", "task.yaml"),
    ("typo", "Key 'vocabb' not in 'DecodeTaskConfig'", "task.yaml"),
    ("wrong type", "Value 'lots' of type 'str' could not be converted to Integer", "task.yaml"),
    ("module spec", "name a Python file of the task folder", "task.yaml"),
    ("generator raises", "raised RuntimeError (boom)", "inputs.py"),
    ("wrong shape", "returned 1 prompts, not 2", "inputs.py"),
    ("ids out of range", "holding 4096", "inputs.py"),
    ("generator does not load", "failed to load (SyntaxError", "inputs.py"),
]


@pytest.mark.parametrize(("case", "words", "file"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_folder_is_refused_at_composition(folder, case, words, file):
    _break(folder, case)
    with pytest.raises(BadInput) as info:
        compose_judge_config([f"task={folder}"])
    message = str(info.value)
    assert words in message and "\n" not in message, message
    assert str(folder / file) in message, message


@pytest.mark.parametrize("case", ["no task.yaml", "generator raises", "unknown kind"])
def test_judge_setup_of_a_bad_folder_is_one_line_exit_2_and_no_judge_folder(tmp_path, case):
    folder = _copy_task(tmp_path / "mytask")
    _break(folder, case)
    private = tmp_path / "judge"
    result = _run("judge", "setup", f"task={folder}", f"judge.private_dir={private}", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert str(folder) in result.stderr
    assert not private.exists()


@pytest.mark.parametrize("case", ["no task.yaml", "missing template", "typo"])
def test_runner_with_a_bad_folder_is_one_line_exit_2_and_no_run_folder(tmp_path, case):
    folder = _copy_task(tmp_path / "mytask")
    _break(folder, case)
    run_dir, private = tmp_path / "run", tmp_path / "judge"
    result = _run(
        "runner",
        f"task={folder}",
        "arm=solo",
        f"hydra.run.dir={run_dir}",
        f"judge.private_dir={private}",
        cwd=PROJECT_ROOT,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("runner: bad settings:") and str(folder) in line
    assert not run_dir.exists() and not private.exists()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args],
        check=True,
        capture_output=True,
    )


@pytest.mark.docker
def test_judge_setup_and_evaluate_of_a_folder_outside_the_project(tmp_path, base_image):
    """A real ``python -m judge setup task=FOLDER`` from a working folder outside the project:
    the baseline is the folder's template and the stored prompts are its own generator's; then
    ``evaluate task=FOLDER candidate=REPO@HEAD~1`` judges that revision (HEAD edits the frozen
    harness and would be a REJECT)."""
    folder = _copy_task(tmp_path / "elsewhere" / "mytask")
    private = tmp_path / "judge"
    result = _run(
        "judge",
        "setup",
        "task=elsewhere/mytask",
        f"judge.private_dir={private}",
        "judge.hidden_seed=11",
        cwd=tmp_path,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    home = Path(result.stdout.strip().splitlines()[-1])
    assert home.parent == private and home.name.startswith("decode_cpu-")
    baseline = home / "baseline" / "engine" / "model.py"
    assert baseline.read_bytes() == (folder / "template" / "engine" / "model.py").read_bytes()
    stored = json.loads((home / "hidden" / "sets-0" / "inputs.json").read_text())
    own = load_task_callable("inputs.py:make_prompts", folder)
    bundled = load_task_callable("inputs.py:make_prompts", BUNDLED)
    from judge.private import derive_seed

    secret = derive_seed(11, "sets:0")
    first = stored["case:b2"]["prompts"]
    assert first == own(derive_seed(secret, "case:b2"), 2, (8, 24), 4096)
    assert first != bundled(derive_seed(secret, "case:b2"), 2, (8, 24), 4096)

    repo = tmp_path / "cand"
    shutil.copytree(folder / "template", repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "the template")
    (repo / "harness" / "serve.py").write_text("raise SystemExit(1)\n")
    _git(repo, "commit", "-qam", "an edit of the frozen zone")
    result = _run(
        "judge",
        "evaluate",
        "task=elsewhere/mytask",
        f"candidate={repo}@HEAD~1",
        f"judge.private_dir={private}",
        "judge.hidden_seed=11",
        cwd=tmp_path,
        timeout=900,
    )
    evaluation = json.loads(result.stdout.strip().splitlines()[-1])
    assert (evaluation["verdict"], evaluation["label"]) == ("PASS", "HEAD~1"), result.stderr
    assert result.returncode == 0


def test_a_config_saved_before_task_folders_still_loads_and_draws(tmp_path):
    """A run's judge.yaml from before task folders and kinds: a relative root, a module spec for
    the inputs, no kind. It reads as a decode task and draws from the same file."""
    import yaml

    from judge.private import derive_seed, draw_set

    task = yaml.safe_load((BUNDLED / "task.yaml").read_text())
    task.pop("kind")
    task.update(root="tasks/decode_cpu", inputs="tasks.decode_cpu.inputs:make_prompts")
    saved = tmp_path / "judge.yaml"
    saved.write_text(yaml.safe_dump({"task": task, "judge": {}}))
    cfg = load_judge_config(saved)
    assert cfg.task.kind == "decode"
    drawn = draw_set(cfg.task, 9, "x", 2, [8, 24], 4).prompts
    bundled = load_task_callable("inputs.py:make_prompts", BUNDLED)
    assert drawn == bundled(derive_seed(9, "x"), 2, (8, 24), 4096)


@pytest.mark.docker
def test_the_judge_service_draws_from_the_folders_generator(tmp_path, base_image, monkeypatch):
    """The runner's way: ``python -m judge serve --config judge.yaml`` started by
    ``start_service`` (its PYTHONPATH replaced by the project's), working folder outside the
    project; the stored sets it makes are the folder's own generator's."""
    import time

    from judge.private import derive_seed, home_path
    from judge.service import start_service

    folder = _copy_task(tmp_path / "elsewhere" / "mytask")
    cfg = compose_judge_config(
        [f"task={folder}", f"judge.private_dir={tmp_path / 'judge'}", "judge.hidden_seed=13"]
    )
    saved = save_judge_config(cfg.task, cfg.judge, tmp_path / "run" / "judge.yaml")
    monkeypatch.chdir(tmp_path)
    stored = home_path(load_judge_config(saved)) / "hidden" / "sets-0" / "inputs.json"
    service = start_service(saved, tmp_path / "run" / "judge-service.log")
    try:
        # A bound on the wait, not a timing assertion: setup runs the baseline over every set.
        deadline = time.monotonic() + 600
        while not stored.exists() and service.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        log = (tmp_path / "run" / "judge-service.log").read_text()
        assert stored.exists(), log
    finally:
        service.terminate()
        service.wait(timeout=120)
    prompts = json.loads(stored.read_text())["case:b4"]["prompts"]
    own = load_task_callable("inputs.py:make_prompts", folder)
    secret = derive_seed(13, "sets:0")
    assert prompts == own(derive_seed(secret, "case:b4"), 4, (8, 24), 4096)


def test_another_process_finds_a_folder_by_its_option_through_the_environment(folder, tmp_path):
    """A launcher's job composes the rewritten ``task=OPTION`` again in another process: the
    folder comes from SWARMLAB_TASK_FOLDERS (the runner sets it; children inherit it)."""
    from tasks.folder import ENV_FOLDERS, option_name

    script = (
        "from judge import compose_judge_config\n"
        f"print(compose_judge_config(['task={option_name(folder)}']).task.root)\n"
    )
    env = {**os.environ, ENV_FOLDERS: str(folder)}
    found = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(folder.resolve())
    env.pop(ENV_FOLDERS)
    lost = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True
    )
    assert lost.returncode != 0 and "no bundled task of that name" in lost.stderr
