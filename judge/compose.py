"""Config composition for the judge (Hydra's compose API, no output folders): compose, load and
save the judge's settings, and say what makes a task unusable."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from judge.checkout import BadInput
from judge.config import judge_problems, register_configs, typed_app_config
from tasks.folder import (
    TASK_FILE,
    TaskFolderError,
    name_task_files,
    resolve_task_overrides,
    task_name_problem,
)
from tasks.schema import PROJECT_ROOT, task_root

CONF_DIR = PROJECT_ROOT / "conf"


def compose_judge_config(overrides: list[str], check: bool = True) -> DictConfig:
    """The judge's config with ``overrides`` applied; Hydra's own message on a bad one.

    ``task=`` takes a bundled task's name or a task folder's path (``tasks.folder``).
    ``check=False``: the schema's checks only (not :func:`task_problems` and the judge's values).

    Raises:
        BadInput: an unknown group option, key, or a value of the wrong type; a task folder
            that cannot be used (one line naming its file and the fix).
    """
    register_configs()
    try:
        overrides = resolve_task_overrides(overrides)
    except TaskFolderError as exc:
        raise BadInput(str(exc)) from None
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="judge_app", overrides=overrides)
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        message = " ".join(str(exc).split())
        cause = exc.__cause__
        if cause is not None and str(cause) not in message:
            message += ": " + " ".join(str(cause).split())
        raise BadInput(name_task_files(message)) from None
    if check:
        _check(cfg)
    return cfg


def _check(cfg: DictConfig) -> None:
    problems = task_problems(cfg.task) or judge_problems(cfg.judge)
    if problems:
        raise BadInput("; ".join(problems))


def task_problems(task: DictConfig) -> list[str]:
    """What makes a composed task unusable, one line each naming its file and the fix: a
    required field left out, an unknown kind, a missing template, a bad task name, and an
    input generator that fails or returns the wrong shape on a tiny draw (types and unknown
    keys are the schema's job). Cheap: nothing is written, no container started.

    Args:
        task: The ``task`` node of a composed config.

    Returns:
        An empty list when the task can be set up.
    """
    from judge.kinds import kind_names
    from judge.private import check_inputs

    where = f"{task_root(task) / TASK_FILE}" if not OmegaConf.is_missing(task, "root") else "task"
    missing = sorted(k for k in task if OmegaConf.is_missing(task, k))
    if missing:
        return [
            f"{where}: required field(s) missing: {', '.join(missing)}: add them (docs/tasks.md)"
        ]
    problems = []
    name = task_name_problem(task.name)
    if name:
        problems.append(f"{where}: {name}")
    if task.kind not in kind_names():
        problems.append(
            f"{where}: kind={task.kind!r} is no task kind: use one of {', '.join(kind_names())}"
        )
    template = task_root(task) / task.template
    if not template.is_dir():
        problems.append(f"{where}: template={task.template!r}: no folder {template}")
    if problems:
        return problems
    inputs = check_inputs(task)
    return [inputs] if inputs else []


def load_judge_config(path: Path) -> DictConfig:
    """A judge config saved by the runner (``save_judge_config``), checked against the schema.

    Raises:
        BadInput: the file is missing or does not fit the schema.
    """
    if not path.is_file():
        raise BadInput(f"judge config {path} does not exist")
    try:
        saved = OmegaConf.load(path)
        task = saved.get("task") if isinstance(saved, DictConfig) else None
        if (
            task is not None
            and "kind" not in task
            and not Path(str(task.get("root"))).is_absolute()
        ):
            # Saved before task kinds and task folders: every such task was a decode task.
            from judge.kinds import DEFAULT_KIND

            task.kind = DEFAULT_KIND
        cfg = OmegaConf.merge(typed_app_config(task or {}), saved)
    except OmegaConfBaseException as exc:
        raise BadInput(f"judge config {path}: {' '.join(str(exc).split())}") from None
    _check(cfg)  # type: ignore[arg-type]
    return cfg  # type: ignore[return-value]


def save_judge_config(task: DictConfig, judge: DictConfig, path: Path) -> Path:
    """Write the exact task and judge settings a judge service process must use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({"task": task, "judge": judge}), path, resolve=True)
    return path
