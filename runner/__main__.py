"""``python -m runner`` — see README.md. A thin Hydra entry point over plain functions.

python -m runner arm=swarm | arm=solo | experiment=swarm_vs_solo [budget.minutes=N] [seed=S]
python -m runner arm=continuation from_run=DIR
python -m runner -m experiment=swarm_vs_solo seed=1,2,3
python -m runner resume=DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from runner.config import register_configs
from runner.experiment import resume_experiment, start_experiment

register_configs()
# Hydra's main returns nothing in a single run: the job's exit status is kept here.
_status: list[int] = []


@hydra.main(config_path="../conf", config_name="runner", version_base="1.3")
def main(cfg: DictConfig) -> int:
    status = start_experiment(cfg, Path(HydraConfig.get().runtime.output_dir))
    _status.append(status)
    return status


def entry(argv: list[str]) -> int:
    resume = [a for a in argv if a.startswith("resume=")]
    if resume:
        return resume_experiment(Path(resume[0].split("=", 1)[1]).resolve())
    main()
    return max(_status, default=0)


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
