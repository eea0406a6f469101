"""Config composition for the judge (Hydra's compose API, no output folders)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from judge.checkout import BadInput
from judge.config import JudgeAppConfig, judge_problems, register_configs
from tasks.schema import PROJECT_ROOT

CONF_DIR = PROJECT_ROOT / "conf"


def compose_judge_config(overrides: list[str]) -> DictConfig:
    """The judge's config with ``overrides`` applied; Hydra's own message on a bad one.

    Raises:
        BadInput: an unknown group option, key, or a value of the wrong type.
    """
    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="judge_app", overrides=overrides)
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as exc:
        message = " ".join(str(exc).split())
        cause = exc.__cause__
        if cause is not None and str(cause) not in message:
            message += ": " + " ".join(str(cause).split())
        raise BadInput(message) from None
    _check(cfg)
    return cfg


def _check(cfg: DictConfig) -> None:
    problems = judge_problems(cfg.judge)
    if problems:
        raise BadInput("; ".join(problems))


def load_judge_config(path: Path) -> DictConfig:
    """A judge config saved by the runner (``save_judge_config``), checked against the schema.

    Raises:
        BadInput: the file is missing or does not fit the schema.
    """
    if not path.is_file():
        raise BadInput(f"judge config {path} does not exist")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(JudgeAppConfig), OmegaConf.load(path))
    except OmegaConfBaseException as exc:
        raise BadInput(f"judge config {path}: {' '.join(str(exc).split())}") from None
    _check(cfg)  # type: ignore[arg-type]
    return cfg  # type: ignore[return-value]


def save_judge_config(task: DictConfig, judge: DictConfig, path: Path) -> Path:
    """Write the exact task and judge settings a judge service process must use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({"task": task, "judge": judge}), path, resolve=True)
    return path
