"""Every setting of ``python -m runner`` checked before anything is created.

Types and unknown keys are the structured configs' job (Hydra's own messages, at composition).
What a type cannot say — a word that must be one of a few, a number that must be positive, a
size Docker must parse — is checked here, all at once: :func:`settings_problems` lists every
problem, one line each. :class:`CheckSettings` (a Hydra callback in ``conf/runner.yaml``) runs
it right after composition, before Hydra makes the run folder or writes its ``.hydra`` files,
and before the judge, any image or any container: a bad setting is one line on stderr and exit
status 2, and nothing exists afterwards. It also refuses a ``hydra.run.dir`` that already holds
files: Hydra would otherwise overwrite that run's ``.hydra/config.yaml``, which
``resume=DIR`` reads.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from judge import judge_problems, task_problems

EXIT_BAD_SETTINGS = 2
ARM_STARTS = ("master", "champion")
_CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _positive(problems: list[str], key: str, value: Any) -> None:
    v = _number(value)
    if not (math.isfinite(v) and v > 0):
        problems.append(f"{key}={value}: must be a number above 0")


def _not_negative(problems: list[str], key: str, value: Any) -> None:
    v = _number(value)
    if not (math.isfinite(v) and v >= 0):
        problems.append(f"{key}={value}: must be a number of at least 0")


def _at_least_one(problems: list[str], key: str, value: Any, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not (isinstance(value, int) and value >= 1):
        problems.append(f"{key}={value}: must be a whole number of at least 1")


def _size(problems: list[str], key: str, value: Any, optional: bool = False) -> None:
    """A memory size as Docker parses it (``512m``, ``1g``, bytes). Docker's own minimum
    (6 MiB today, engine-dependent) is left to Docker: a size under it fails that run."""
    if optional and value is None:
        return
    from docker.errors import DockerException
    from docker.utils import parse_bytes

    try:
        size = parse_bytes(str(value).strip())
    except (DockerException, ValueError, KeyError, IndexError):
        size = None
    if size is None or size <= 0:
        problems.append(f"{key}={value!r}: not a memory size Docker takes (say 512m or 2g)")


def _cpuset(problems: list[str], key: str, value: Any) -> None:
    if value != "auto" and not _CPUSET.match(str(value)):
        problems.append(f"{key}={value!r}: use auto or CPU numbers (say 0-2,4)")


def judge_value_problems(judge: Any) -> list[str]:
    """The judge's settings: :func:`judge.config.judge_problems` plus the limits and sizes a
    type does not check."""
    problems = judge_problems(judge)
    for key in ("timeout_floor_s", "load_timeout_s", "build_timeout_s"):
        _positive(problems, f"judge.{key}", judge[key])
    for key in ("near_tie_margin", "prefill_cap_slack_ms"):
        _not_negative(problems, f"judge.{key}", judge[key])
    _at_least_one(problems, "judge.max_tree_mb", judge.max_tree_mb)
    if not str(judge.device).strip():
        problems.append("judge.device='': name the judge's device (say cpu)")
    sandbox = judge.sandbox
    _size(problems, "judge.sandbox.memory", sandbox.memory)
    _cpuset(problems, "judge.sandbox.cpuset", sandbox.cpuset)
    _at_least_one(problems, "judge.sandbox.pids_limit", sandbox.pids_limit)
    _at_least_one(problems, "judge.sandbox.scratch_mb", sandbox.scratch_mb)
    return problems


def _arm_problems(cfg: DictConfig) -> list[str]:
    from arms.prompts import ROLES
    from isolation.workspace import VISIBILITIES

    if not cfg.arms:
        return ["no arm selected: arm=swarm, arm=solo or experiment=swarm_vs_solo"]
    problems = []
    for key, arm in cfg.arms.items():
        where = f"arms.{key}"
        if arm.start not in ARM_STARTS:
            problems.append(f"{where}.start={arm.start!r}: use one of {', '.join(ARM_STARTS)}")
        if not arm.seats:
            problems.append(f"{where}.seats: an arm needs at least one seat")
        names = [s.name for s in arm.seats]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            problems.append(f"{where}.seats: seat name(s) used twice: {', '.join(twice)}")
        for seat in arm.seats:
            if seat.role not in ROLES:
                problems.append(
                    f"{where}.seats.{seat.name}.role={seat.role!r}: use one of {', '.join(ROLES)}"
                )
        visibility = arm.get("visibility") or "shared"
        if visibility not in VISIBILITIES:
            problems.append(
                f"{where}.visibility={visibility!r}: use one of {', '.join(VISIBILITIES)}"
            )
        critics = [s.name for s in arm.seats if s.role == "critic"]
        if visibility == "private" and critics:
            problems.append(
                f"{where}.seats.{critics[0]}: a critic has nothing to review in a private arm"
                " (each seat sees only its own submissions): drop it or use visibility=shared"
            )
    if any(a.start == "champion" for a in cfg.arms.values()):
        if not cfg.from_run:
            problems.append("a continuation needs from_run=DIR (a finished run's directory)")
        elif not (Path(cfg.from_run).expanduser() / "events.sqlite").is_file():
            problems.append(f"from_run={cfg.from_run} is not a run directory (no events.sqlite)")
    plan = cfg.get("plan")
    if plan:
        from analysis.tables import is_run_dir, is_sweep_dir

        where = Path(str(plan)).expanduser()
        if not (is_run_dir(where) or is_sweep_dir(where)):
            problems.append(f"plan={plan} is neither a finished run nor a sweep to plan from")
    return problems


def budget_problems(cfg: DictConfig) -> list[str]:
    """The token, cost and matched budgets (``budget.output_tokens`` ... ``budget.scope``,
    ``budget.prices``, ``match``), one line each; nothing for a config without them (a run
    saved before they existed)."""
    from isolation.spending import DEFAULT_PRICE, SCOPES, TOKEN_BUDGETS
    from runner.config import BUDGET_NAMES

    budget = cfg.budget
    if "output_tokens" not in budget:
        return []
    problems: list[str] = []
    for key in ("output_tokens", "input_tokens"):
        _at_least_one(problems, f"budget.{key}", budget[key], True)
    if budget.cost_usd is not None:
        _positive(problems, "budget.cost_usd", budget.cost_usd)
    for key, scope in (budget.get("scope") or {}).items():
        if scope not in SCOPES:
            problems.append(f"budget.scope.{key}={scope!r}: use one of {', '.join(SCOPES)}")
    for model, price in (budget.get("prices") or {}).items():
        where = f"budget.prices.{model}"
        if not isinstance(price, DictConfig | dict):
            problems.append(f"{where}={price!r}: give {{input: USD, output: USD}} per million")
            continue
        unknown = sorted(set(price) - {"input", "output", "cache_read", "cache_write"})
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(unknown)}")
        for part in ("input", "output", "cache_read", "cache_write"):
            if part in ("input", "output") or price.get(part) is not None:
                _not_negative(problems, f"{where}.{part}", price.get(part))
    if budget.cost_usd is not None and DEFAULT_PRICE not in (budget.get("prices") or {}):
        problems.append(
            f"budget.cost_usd needs budget.prices.{DEFAULT_PRICE}: the price of a model the"
            " table does not name"
        )
    tokens = [k for k in TOKEN_BUDGETS if budget[k] is not None]
    if tokens and not (cfg.agent.get("client") and cfg.agent.get("network") == "proxy"):
        problems.append(
            f"budget.{tokens[0]} is counted at the model proxy: it needs a vendor's CLI in the"
            f" seats with agent.network=proxy (agent={cfg.agent.get('kind')},"
            f" agent.network={cfg.agent.get('network')})"
        )
    match = cfg.get("match")
    if match is not None:
        if match not in BUDGET_NAMES:
            problems.append(f"match={match!r}: use one of {', '.join(BUDGET_NAMES)}")
        elif budget.get(match) is None:
            problems.append(f"match={match} needs budget.{match}=N: the total every arm gets of it")
        if len(cfg.get("arms") or {}) < 2:
            problems.append(
                f"match={match}: one arm has nothing to be matched with"
                " (experiment=swarm_vs_solo runs two)"
            )
    return problems


def settings_problems(cfg: DictConfig) -> list[str]:
    """What is wrong with a composed runner config's values, one line each (cheap: no engine,
    no network, nothing written).

    Args:
        cfg: The composed config of ``python -m runner`` (with or without its ``hydra`` node).

    Returns:
        An empty list when every value is usable.
    """
    from isolation.backends import backend_names
    from isolation.quota import quota_setting_problem

    problems = _arm_problems(cfg)
    budget = cfg.budget
    _positive(problems, "budget.minutes", budget.minutes)
    _not_negative(problems, "budget.drain_minutes", budget.drain_minutes)
    _at_least_one(
        problems, "budget.max_submissions_per_agent", budget.max_submissions_per_agent, True
    )
    if "evaluations" in budget:  # the judge budget, where this version has one
        _at_least_one(problems, "budget.evaluations", budget.evaluations, True)
    problems += budget_problems(cfg)
    for key in ("runs", "baseline_runs"):
        if not (isinstance(cfg.rejudge[key], int) and cfg.rejudge[key] >= 0):
            problems.append(f"rejudge.{key}={cfg.rejudge[key]}: must be a whole number >= 0")
    _not_negative(problems, "rejudge.max_minutes", cfg.rejudge.max_minutes)
    _not_negative(problems, "progress_every_s", cfg.progress_every_s)
    if not (isinstance(cfg.seed, int) and cfg.seed >= 0):
        problems.append(f"seed={cfg.seed}: must be a whole number >= 0")
    iso = cfg.isolation
    backends = backend_names()
    if iso.backend not in backends:
        problems.append(f"isolation.backend={iso.backend!r}: use one of {', '.join(backends)}")
    _size(problems, "isolation.memory", iso.memory)
    _cpuset(problems, "isolation.cpuset", iso.cpuset)
    _at_least_one(problems, "isolation.pids_limit", iso.pids_limit)
    quota = quota_setting_problem(iso.get("disk_quota_mb"))
    if quota:
        problems.append(quota)
    from isolation.fair_use import fair_use_problem
    from runner.seats import run_seats

    problems += [p for p in [fair_use_problem(iso.get("fair_use"), run_seats(cfg))] if p]
    _size(problems, "agent.memory", cfg.agent.memory, optional=True)
    if not str(cfg.agent.image).strip():
        problems.append("agent.image='': name the agents' image")
    problems += judge_value_problems(cfg.judge)
    # The task folder: required fields, its kind, template and input generator (a tiny draw).
    problems += task_problems(cfg.task)
    # Seats naming a direction the task lacks; agent=scripted on a task with no move library.
    from arms.directions import direction_problems
    from runner.seats import scripted_problem

    problems += direction_problems(cfg)
    problems += [p for p in [scripted_problem(cfg)] if p]
    return problems


def run_dir_problem(run_dir: Path) -> str | None:
    """Why a new run cannot be made in ``run_dir``: it already holds files (another run's,
    which Hydra would overwrite in part), or None."""
    if not run_dir.exists():
        return None
    if not run_dir.is_dir():
        return f"hydra.run.dir={run_dir} is a file, not a folder"
    if (run_dir / "events.sqlite").exists() or (run_dir / ".hydra").exists():
        return (
            f"hydra.run.dir={run_dir} already holds a run: resume={run_dir} continues it;"
            " a new run needs a new folder"
        )
    if any(run_dir.iterdir()):
        return f"hydra.run.dir={run_dir} is not empty: a new run needs a new or empty folder"
    return None


def refuse(problems: list[str]) -> None:
    """One line on stderr and exit status 2."""
    print(f"runner: bad settings: {'; '.join(problems)}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_BAD_SETTINGS)


def ensure_images(cfg: DictConfig) -> None:
    """The Docker engine and every image the run will start, before Hydra makes the run folder:
    the base image is made when missing and a task's ``image/Dockerfile`` built (one progress
    line each, never pulled); no engine, or an image swarmlab cannot make, is one line on
    stderr and exit status 2, nothing created."""
    from isolation import DockerUnavailable, ImageMissing, docker_client, ensure_image
    from isolation.taskenv import TaskEnvironmentError, task_runtime
    from runner.seats import seat_problem
    from tasks.schema import task_root

    if seat_problem(cfg):
        return  # a missing key or CLI is said first, by the run itself (Run.start)
    try:
        client = docker_client()
    except DockerUnavailable as exc:
        print(
            f"runner: {exc} The judge always scores in containers, so it needs the engine"
            " whatever the isolation; isolation=local only takes the agents out of containers"
            " (development only).",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(EXIT_BAD_SETTINGS) from None
    try:
        wanted = [str(cfg.judge.sandbox.image)]  # the judge scores in containers, always
        if str(OmegaConf.select(cfg, "isolation.backend")) == "docker":
            wanted.append(str(cfg.agent.image))
        for tag in dict.fromkeys(wanted):
            ensure_image(client, tag)
        task_runtime(cfg.task, task_root(cfg.task), client)  # a task's own image: built now
    except (ImageMissing, TaskEnvironmentError) as exc:
        print(f"runner: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_SETTINGS) from None
    finally:
        client.close()


# Where a run's images come from: the judge's sandbox, the agents' image and isolation, the task.
IMAGE_KEYS = ("judge", "agent", "isolation", "task")


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The overrides of each job of the sweep ``config`` starts, as Hydra's basic sweeper
    splits them (the joblib and SLURM launchers run its jobs)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = list(OmegaConf.select(config, "hydra.overrides.task") or [])
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def ensure_sweep_images(config: DictConfig) -> None:
    """:func:`ensure_images` for every job of a sweep over the judge's, the agents',
    the isolation's or the task's settings, before the sweep folder exists: the engine is
    asked once, and each distinct set of images (a job's judge sandbox, agent image when in
    containers, and task) is made or refused once, as a single run's would be."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    seen: set[str] = set()
    for job in sweep_jobs(config):
        try:
            cfg = loader.load_sweep_config(config, job)
        except Exception:
            # A job that does not compose is refused by Hydra in that job, with its values.
            continue
        docker = str(OmegaConf.select(cfg, "isolation.backend")) == "docker"
        key = repr(
            (
                str(cfg.judge.sandbox.image),
                str(cfg.agent.image) if docker else None,
                OmegaConf.to_container(cfg.task),
            )
        )
        if key not in seen:
            seen.add(key)
            ensure_images(cfg)


class CheckSettings(Callback):
    """Hydra callback: refuse bad settings, and a run folder already in use, before Hydra
    creates or writes anything. A sweep's shared settings are checked before its folder exists;
    a value swept over is checked in its job (``Run.start``), which is then refused."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        problems = settings_problems(config)
        where = run_dir_problem(Path(str(OmegaConf.select(config, "hydra.run.dir"))).absolute())
        if where:
            problems.append(where)
        if problems:
            refuse(problems)
        ensure_images(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        swept = swept_keys(list(OmegaConf.select(config, "hydra.overrides.task") or []))
        # With a config group swept over (another group per job), each job checks its own
        # settings.
        if not any(_is_group(key) for key in swept):
            # Here the config holds none of the swept values: a problem naming a swept key is
            # the job's to find, with its own value (a continuation swept over from_run=A,B).
            problems = [p for p in settings_problems(config) if not any(k in p for k in swept)]
            if problems:
                refuse(problems)
        if any(_is_group(k) or k.lstrip("+~").split(".")[0] in IMAGE_KEYS for k in swept):
            ensure_sweep_images(config)  # each job's images may differ: each composition's
        else:
            ensure_images(config)


def swept_keys(overrides: list[str]) -> set[str]:
    """The keys (or config groups) that ``overrides`` sweep over (``seed=1,2``, ``range``...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return {o.key_or_group for o in parsed if o.is_sweep_override()}


def _is_group(key: str) -> bool:
    from tasks.folder import GROUP
    from tasks.schema import PROJECT_ROOT

    # The task group's options are task folders (tasks/folder.py), not files under conf/.
    return key.lstrip("+~") == GROUP or (PROJECT_ROOT / "conf" / key).is_dir()
