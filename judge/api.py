"""Config composition for the judge (Hydra's compose API, no output folders)."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from judge.checkout import BadInput
from judge.config import register_configs
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
    return cfg
