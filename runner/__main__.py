"""``python -m runner`` — see README.md. A thin Hydra entry point over plain functions.

python -m runner arm=swarm | arm=solo | experiment=swarm_vs_solo [budget.minutes=N] [seed=S]
python -m runner arm=continuation from_run=DIR
python -m runner task=decode_cpu | task=PATH/TO/TASK_FOLDER   (a folder holding task.yaml)
python -m runner -m experiment=swarm_vs_solo task=decode_cpu,decode_c
python -m runner -m experiment=swarm_vs_solo seed=1,2,3
python -m runner resume=DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from runner.config import quote_verbatim, register_configs
from runner.experiment import resume_experiment, start_experiment
from runner.settings import refuse
from runner.sweep import pending_sweep_status, run_job
from tasks.folder import TaskFolderError, resolve_task_overrides

register_configs()
# Hydra's main returns nothing in a single run: the job's exit status is kept here.
_status: list[int] = []


@hydra.main(config_path="../conf", config_name="runner", version_base="1.3")
def main(cfg: DictConfig) -> int:
    job = HydraConfig.get()
    run_dir = Path(job.runtime.output_dir)
    if job.mode == RunMode.MULTIRUN:
        # A sweep job records its outcome in job.json and never raises (runner/sweep.py).
        status = run_job(cfg, run_dir)
    else:
        status = start_experiment(cfg, run_dir)
    _status.append(status)
    return status


def _check_task_files(overrides: list[str]) -> None:
    """Each task asked for, through the task schema alone, before Hydra's own run: a typo or a
    wrong type in a task.yaml is one line naming that file, exit 2 (Hydra's own error would
    name only the task's option). The rest of a task's checks run with the run's overrides
    applied (runner/settings.py)."""
    from judge import BadInput, compose_judge_config

    for item in overrides:
        key, eq, value = item.partition("=")
        if not eq or key.lstrip("+") != "task" or "(" in value:
            continue
        for option in value.split(","):
            try:
                compose_judge_config([f"task={option}"], check=False)
            except BadInput as exc:
                refuse([str(exc)])


def entry(argv: list[str]) -> int:
    resume = [a for a in argv if a.startswith("resume=")]
    if resume:
        return resume_experiment(Path(resume[0].split("=", 1)[1]).resolve())
    # task=PATH: the folder's task.yaml becomes a `task` option before Hydra parses the
    # command line (tasks/folder.py); a folder that cannot be used is one line, exit 2.
    try:
        sys.argv[1:] = quote_verbatim(resolve_task_overrides(argv))
    except TaskFolderError as exc:
        refuse([str(exc)])
    _check_task_files(sys.argv[1:])
    try:
        main()
    finally:
        # A sweep: its aggregate is written even when the sweep itself ended in an error.
        sweep = pending_sweep_status()
    if sweep is not None:
        return sweep
    return max(_status, default=0)


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
