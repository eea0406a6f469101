"""Sweeps (``python -m runner -m experiment=swarm_vs_solo seed=1,2,3``): one experiment per
Hydra job, each in ``<sweep dir>/<override_dirname>/``, then an aggregate across jobs.

Every job records its outcome in ``job.json`` in its own folder, whatever happens: ``running``
when it starts, then ``ok``, ``failed`` (with the error text) or ``interrupted``. The task
function never lets an ``Exception`` out: Hydra's basic sweeper re-raises a failed job's
exception after the batch, which would skip ``on_multirun_end`` and so the aggregate. A job
killed outright (a launcher's worker killed, a node lost) leaves ``running`` behind and shows
as ``incomplete``. Under SLURM the record names the job's SLURM id and node (``slurm``).

A job run again in its own folder (SLURM requeued it: preempted, or submitit's checkpoint on
USR2 at the time limit) finds its unfinished run there and resumes it (``resume=DIR``) instead
of starting over; the earlier records of that job are kept in ``attempts``.

:class:`AggregateSweep` (``hydra.callbacks`` in ``conf/runner.yaml``) writes the aggregate at
the end of the sweep, in the launching process; ``runner.__main__`` also writes it when the
sweep itself ended in an error, so the jobs that did finish are never left unaggregated.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from judge import stop_services
from runner.config import register_configs
from runner.events import EventLog
from runner.experiment import PREEMPTED_STATUS, REFUSED, Run, resume_experiment, say

JOB_FILE = "job.json"
# What SLURM tells a job about itself (sbatch's output environment), as job.json's ``slurm``.
SLURM_VARS = {
    "job_id": "SLURM_JOB_ID",
    "node": "SLURMD_NODENAME",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
    "partition": "SLURM_JOB_PARTITION",
    "restart_count": "SLURM_RESTART_COUNT",
}
# The jobs of this process that a signal interrupted.
_INTERRUPTED: list[Path] = []

# Launcher workers (joblib's loky processes, submitit's nodes) unpickle this module with the
# callback before a job's config is resolved: the runner's resolvers must exist there too.
register_configs()


def _write_job(run_dir: Path, record: dict[str, Any]) -> None:
    path = run_dir / JOB_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def slurm_record(env: dict[str, str] | None = None) -> dict[str, str] | None:
    """The SLURM job this process runs in (id, node, array ids, restarts), or None outside
    SLURM."""
    env = os.environ if env is None else env  # type: ignore[assignment]
    found = {key: env[var] for key, var in SLURM_VARS.items() if env.get(var)}
    return found or None


def _read_job(run_dir: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((run_dir / JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def run_state(run_dir: Path) -> str | None:
    """The status of the run ``run_dir`` holds (``running``: it started its agents and never
    ended, killed or stopped by submitit's checkpoint, and ``resume=run_dir`` continues it;
    ``finished``, ``interrupted``: it ended), or None when no run started there."""
    db = run_dir / "events.sqlite"
    if not db.is_file():
        return None
    meta = EventLog(db).meta()
    return str(meta.get("status")) if meta.get("run_id") else None


def run_job(cfg: DictConfig, run_dir: Path) -> int:
    """One sweep job: the experiment in ``run_dir``, its outcome in ``run_dir/job.json``.

    Returns the exit status (0 finished, 1 failed, 2 refused, 130 interrupted); an exception
    becomes a ``failed`` record and status 1, never an exception out of the job."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hydra = HydraConfig.get() if HydraConfig.initialized() else None
    previous = _read_job(run_dir)
    state = run_state(run_dir)
    resume = state == "running"
    record: dict[str, Any] = {
        "status": "running",
        "seed": cfg.get("seed"),
        "overrides": list(hydra.overrides.task) if hydra else [],
        "job_num": hydra.job.get("num") if hydra else None,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "slurm": slurm_record(),
        "started_at": time.time(),
        "resumed": resume,
    }
    if previous:
        # This job ran here before (a requeued SLURM job): what became of each earlier attempt.
        earlier = previous.pop("attempts", [])
        record["attempts"] = [*earlier, previous]
    if _INTERRUPTED:
        # Ctrl-C stopped a job of this process (the basic launcher runs them one after
        # another): the rest of the sweep is not started either.
        record.update(
            status="interrupted",
            exit_status=130,
            error="not started: the sweep was interrupted",
            ended_at=time.time(),
        )
        _write_job(run_dir, record)
        return 130
    if state is not None and not resume:
        # The job ran again after its run ended (SLURM requeued it after a SIGTERM stop, or
        # after it finished): that run is its result, never a new one started over it.
        status = 0 if state == "finished" else 130
        record.update(
            status="ok" if status == 0 else "interrupted",
            exit_status=status,
            error=None if status == 0 else f"the run here ended {state}; not started again",
            ended_at=time.time(),
        )
        _write_job(run_dir, record)
        return status
    _write_job(run_dir, record)
    error = None
    try:
        if resume:
            say(f"sweep: {run_dir} holds this job's unfinished run: resuming it")
            status = resume_experiment(run_dir)
        else:
            status = Run(cfg, run_dir).start()
    except REFUSED as exc:
        say(f"runner: {exc}")
        status, error = 2, f"refused: {exc}"
    except Exception as exc:
        traceback.print_exc()
        status = 1
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-8)}"
    except BaseException as exc:  # KeyboardInterrupt, SystemExit: recorded, then let through
        record.update(
            status="interrupted",
            exit_status=130,
            error=f"{type(exc).__name__} in the job",
            ended_at=time.time(),
        )
        _write_job(run_dir, record)
        raise
    if status == 0:
        outcome = "ok"
    elif status == 130:
        _INTERRUPTED.append(run_dir)
        outcome = "interrupted"
        error = "interrupted (SIGINT/SIGTERM): the summary holds the results until then"
    elif status == PREEMPTED_STATUS:
        outcome = "interrupted"
        error = (
            "stopped by SLURM (SIGTERM: preempted, cancelled or at its limit): the run is left"
            " unfinished; the requeued job, or `python -m runner resume=DIR`, continues it"
        )
    else:
        outcome = "failed"
        error = error or f"exit status {status}"
    record.update(status=outcome, exit_status=status, error=error, ended_at=time.time())
    _write_job(run_dir, record)
    return status


# The sweep of this process: its folder once it started, its exit status once aggregated.
_SWEEP: dict[str, Any] = {}


def stop_sweep_judges(sweep_dir: Path) -> list[int]:
    """Stop the judge services that jobs of this sweep started and left running.

    Jobs run in parallel share one judge service: the job that started it stops it at its end
    only if nothing waits, so when another job still had evaluations queued, the service
    outlives the job that started it, and no later job stops it (it did not start it). At the
    end of the sweep every job is over, so a service whose config lies in this sweep gets
    SIGTERM: it finishes the evaluation in progress, if any, and exits; a run elsewhere that
    still needs a judge starts its own (``judge.JudgeService.ensure_running``). Returns the pids
    signalled."""
    from analysis.sweep import find_jobs, read_meta

    homes = [read_meta(job / "events.sqlite").get("judge_home") for job in find_jobs(sweep_dir)]
    return stop_services([h for h in homes if h], sweep_dir)


def finish_sweep(sweep_dir: Path) -> int:
    """Aggregate ``sweep_dir`` (once per sweep), print it; 0 when every job finished, else 1."""
    if _SWEEP.get("status") is not None:
        return int(_SWEEP["status"])
    from analysis.sweep import AGGREGATE, STATS, aggregate_with_stats, format_jobs, format_stats

    try:
        stopped = stop_sweep_judges(sweep_dir)
        if stopped:
            say(f"sweep: stopped {len(stopped)} judge service(s) its jobs left running")
    except Exception as exc:
        say(f"sweep: could not check for judge services left running: {exc}")
    try:
        frame, stats = aggregate_with_stats(sweep_dir)
    except Exception as exc:  # the aggregate must never hide the jobs' own results
        say(f"sweep: could not aggregate {sweep_dir}: {type(exc).__name__}: {exc}")
        _SWEEP["status"] = 1
        return 1
    print(format_jobs(frame))
    print(format_stats(stats))
    jobs = frame.drop_duplicates("job_dir")
    bad = jobs[jobs["status"] != "ok"]
    print(
        f"sweep: {len(jobs)} job(s), {len(jobs) - len(bad)} ok, {len(bad)} failed or incomplete;"
        f" {sweep_dir / AGGREGATE}, {sweep_dir / STATS}"
    )
    sys.stdout.flush()
    _SWEEP["status"] = 1 if len(bad) or not len(jobs) else 0
    return int(_SWEEP["status"])


def pending_sweep_status() -> int | None:
    """After ``main()``: the sweep's exit status, aggregating first if its end callback never
    ran (the sweep ended in an error); None when this process ran no sweep."""
    sweep_dir = _SWEEP.get("dir")
    if sweep_dir is None:
        return None
    if _SWEEP.get("status") is None and Path(sweep_dir).is_dir():
        return finish_sweep(Path(sweep_dir))
    return _SWEEP.get("status", 1)


class AggregateSweep(Callback):
    """Hydra callback: note the sweep folder at the start, aggregate it at the end."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra's ${now:...} is cached on this config, and jobs copy that cache: this is the
        # folder every job writes under.
        _SWEEP.clear()
        _SWEEP["dir"] = str(Path(OmegaConf.select(config, "hydra.sweep.dir")).resolve())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = _SWEEP.get("dir") or OmegaConf.select(config, "hydra.sweep.dir")
        finish_sweep(Path(sweep_dir).resolve())
