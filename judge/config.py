"""Structured configs of the judge (Hydra groups ``judge`` and ``schema``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from isolation.images import base_tag
from tasks.schema import TaskConfig


@dataclass
class SandboxConfig:
    """The evaluation container.

    ``python: auto`` runs the judge's own interpreter inside the offline base image, with the
    virtual environment and its base installation mounted read-only at the same paths. With a
    normal image (say ``python:3.12-slim`` plus numpy) set ``image``, ``python: python3`` and
    ``mount_host_python: false``.
    """

    # Which implementation runs the containers (judge.sandbox.base.open_sandbox): a name
    # registered with @sandbox_backend, or a module judge.sandbox.<name> that registers it.
    backend: str = "docker"
    # The offline base image (isolation/images.py): $SWARMLAB_BASE_IMAGE, else swarmlab-base:1.
    image: str = field(default_factory=base_tag)
    python: str = "auto"
    mount_host_python: bool = True
    # "auto": the last CPU of the machine; agents get the others.
    cpuset: str = "auto"
    memory: str = "2g"
    pids_limit: int = 256
    # Size of /build, the sandbox's one writable, executable folder (a tmpfs; docs/tasks.md).
    scratch_mb: int = 512
    env: dict[str, str] = field(
        default_factory=lambda: {
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HOME": "/tmp",
        }
    )


@dataclass
class JudgeConfig:
    """How the judge scores. Every machine-dependent limit is relative to the same evaluation's
    baseline for the same case; the floors below only absorb timer noise on tiny durations."""

    # Hidden seeds, references, the baseline build and the queue live here; never mounted
    # into an agent's container. The task's content hash is appended, so a changed task never
    # reuses references made from an older template.
    private_dir: str = "results/judge"
    device: str = "cpu"
    queue_policy: str = "fifo"
    # null: drawn from the OS at judge setup and kept in the private folder.
    hidden_seed: int | None = None
    preflight: str = "required"
    # Preflight runs before any agent: it may use this many CPUs at once, one evaluation each.
    preflight_parallel: int = 2
    # Which stored correctness sets (drawn from the secret and this): the runner passes the
    # run's seed, so a sweep over seeds meets new sets while one run's arms share theirs.
    sets_seed: int = 0
    prefill_cap_factor: float = 1.5
    # A prefill over the cap (on both hidden sets of a case, or in 2 of the timing runs) is
    # measured this many more times on fresh prompts and charged only if over it every time.
    prefill_recheck_runs: int = 3
    prefill_cap_slack_ms: float = 25.0
    # A first divergence where the reference's top-2 margin is below this is tagged near_tie.
    near_tie_margin: float = 0.01
    # "wrong": the spec demands token equality, near ties included (tagged). "pass": tolerate.
    near_tie_policy: str = "wrong"
    # A request may take this many times the baseline's time for the same request, plus the floor.
    timeout_factor: float = 6.0
    timeout_floor_s: float = 5.0
    # The judge's own baseline requests may take this many times their set-up time (every
    # baseline limit is the candidate's for the same request times this / timeout_factor, the
    # floor and load included): a baseline timeout convicts nothing but costs the evaluation.
    baseline_timeout_factor: float = 24.0
    load_timeout_s: float = 60.0
    build_timeout_s: float = 120.0
    # A timing-based failure is measured again (on fresh hidden sets) before it is charged; a
    # request timeout is charged only if a retry (decode: in a fresh process; server: on the
    # same server) also exceeds a limit made from the baseline's time on that request measured
    # then (else ERROR, re-queued).
    confirm_timing_failures: bool = True
    # B=1 regression is charged only when a one-sided sign-flip test over whole units (judge.b1)
    # rejects "geometric mean ratio <= 1 + the spec's limit" at one of its looks, each at an
    # equal share of this level: innocent code is convicted with probability below b1_alpha
    # whatever the machine's noise. On a noisy machine small regressions then go unresolved
    # (flagged b1_unresolved) rather than convicting. With confirm_timing_failures off the B=1
    # stage has one look (the first of the three) at the whole of this level.
    b1_alpha: float = 0.001
    # Preflight, for mutants whose verdict needs a finer B=1 resolution than this machine gives:
    # "warn" reports them as UNRESOLVED and still exits 0; "fail" counts them as mismatches.
    b1_unresolved: str = "warn"
    # An infrastructure fault re-queues the evaluation; after this many tries it stays ERROR.
    max_attempts: int = 3
    max_tree_mb: int = 64
    # "staged": cheapest discriminating checks first, the baseline started only when needed and
    # kept warm across evaluations. "naive": the original pipeline, kept for bench comparison.
    pipeline: str = "staged"
    # Identical trees (same git tree id, same settings) reuse an earlier evaluation, marked
    # duplicate_of: "arm": within the same arm of the same run only; "all": across arms and
    # runs of this queue too (arms then share one noisy sample: the report must say so);
    # "off": every submission is judged. A re-judgement (rejudge=True) is never deduplicated.
    duplicates: str = "arm"
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


def task_node(task: Any) -> type[TaskConfig]:
    """The dataclass ``task`` (a task config's mapping) is validated against: its kind's node
    (``TaskKind.task_node``), or the fields every kind has for a task of no known kind."""
    from judge.kinds import kind_of

    try:
        kind = kind_of(task)
    except KeyError:  # composing the task says so (judge.compose.task_problems)
        return TaskConfig
    return getattr(kind, "task_node", TaskConfig)


def typed_app_config(task: Any) -> DictConfig:
    """An empty :class:`JudgeAppConfig` whose ``task`` node is typed by ``task``'s kind: a
    saved config (plain YAML) merged into it is checked against the kind's fields."""
    return OmegaConf.merge(  # type: ignore[return-value]
        OmegaConf.structured(JudgeAppConfig), {"task": OmegaConf.structured(task_node(task))}
    )


@dataclass
class JudgeAppConfig:
    """Top-level config of ``python -m judge``."""

    task: TaskConfig = field(default_factory=TaskConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    # `evaluate`: PATH (HEAD), PATH@REF, or REF inside `repo`.
    candidate: str | None = None
    repo: str | None = None
    # `evaluate`: who the submission is charged to.
    arm: str = "manual"
    agent: str = "cli"
    # `preflight`: run only these mutants (empty: all).
    only: list[str] = field(default_factory=list)


# Settings whose value must be one of a few words (typos would otherwise silently mean the default).
_CHOICES = {
    "queue_policy": ("fifo", "fair"),
    "preflight": ("required", "skip"),
    "near_tie_policy": ("wrong", "pass"),
    "b1_unresolved": ("warn", "fail"),
    "pipeline": ("naive", "staged"),
    "duplicates": ("arm", "all", "off"),
}


def judge_problems(judge: Any) -> list[str]:
    """What is wrong with a judge config's values (types are the schema's job): one line each.

    Args:
        judge: The ``judge`` node of a composed config.

    Returns:
        An empty list when every value is usable.
    """
    problems = [
        f"judge.{key}={judge[key]!r}: use one of {', '.join(choices)}"
        for key, choices in _CHOICES.items()
        if judge[key] not in choices
    ]
    if not 0.0 < judge.b1_alpha < 0.5:
        problems.append(f"judge.b1_alpha={judge.b1_alpha}: must lie in (0, 0.5)")
    for key in ("prefill_cap_factor", "timeout_factor"):
        if judge[key] <= 1.0:
            problems.append(f"judge.{key}={judge[key]}: must be above 1")
    if judge.baseline_timeout_factor < judge.timeout_factor:
        problems.append(
            f"judge.baseline_timeout_factor={judge.baseline_timeout_factor}: must be at least"
            f" judge.timeout_factor ({judge.timeout_factor})"
        )
    for key in ("max_attempts", "preflight_parallel", "prefill_recheck_runs"):
        if judge[key] < 1:
            problems.append(f"judge.{key}={judge[key]}: must be at least 1")
    return problems


def register_configs() -> None:
    """Put the schemas, and the bundled task folders as ``task`` options, in Hydra's
    ConfigStore (idempotent)."""
    from judge.kinds import get_kind, kind_names
    from tasks.folder import KIND_SCHEMA_GROUP, register_task_folders

    cs = ConfigStore.instance()
    cs.store(group="schema", name="task", node=TaskConfig)
    # Each kind's node, before any task folder: a folder is composed under its kind's.
    for name in kind_names():
        cs.store(
            group=KIND_SCHEMA_GROUP,
            name=name,
            node=getattr(get_kind(name), "task_node", TaskConfig),
        )
    register_task_folders()
    cs.store(group="schema", name="judge", node=JudgeConfig)
    cs.store(name="judge_app_schema", node=JudgeAppConfig)
