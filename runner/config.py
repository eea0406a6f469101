"""Structured configs of the runner (``python -m runner``): typos and bad types are rejected
with Hydra's own messages."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from isolation.images import base_tag
from judge import JudgeConfig
from judge import register_configs as register_judge_configs
from tasks.schema import TaskConfig


@dataclass
class SeatConfig:
    """One seat of an arm: a worker (submits) on a starting direction, or a critic."""

    name: str
    role: str = "worker"
    direction: str | None = None


@dataclass
class ArmConfig:
    """A team setting. ``start``: ``master`` (the task template) or ``champion`` (the best
    PASS of ``from_run``, for a round-two continuation). ``task_directions``: its workers
    without a direction of their own take the task's ``directions``, in order
    (``arms/directions.py``). ``visibility``: ``shared`` (the seats share one board and
    submission repository) or ``private`` (each seat has its own, as if it were a solo arm;
    the arm is still one arm for budgets, the judge's fair queue and the report)."""

    name: str
    seats: list[SeatConfig] = field(default_factory=list)
    start: str = "master"
    task_directions: bool = False
    visibility: str = "shared"


@dataclass
class AgentConfig:
    """The seat adapter every agent of the experiment uses (the same in every arm)."""

    kind: str = "scripted"
    # True for programs with no model: every table marks the arm as scripted.
    scripted: bool = True
    # argv run in the agent's container; {python} {role} {direction} {seed} {deadline} {agent}
    # are filled in per seat.
    command: list[str] = field(default_factory=list)
    # The offline base image (isolation/images.py): $SWARMLAB_BASE_IMAGE, else swarmlab-base:1.
    image: str = field(default_factory=base_tag)
    network: str = "none"
    # A vendor's CLI from agents.clients (claude_code, codex, gemini) in every seat, with the seat's
    # rendered prompt from arms.prompts; null: ``command`` (the scripted agent).
    client: str | None = None
    # The model the CLI asks for; null: the client's default.
    model: str | None = None
    # An early exit is resumed with the CLI's own session resume (false: started afresh).
    resume: bool = True
    # The container's memory for a CLI seat; null: isolation.memory.
    memory: str | None = None
    # network=proxy: forward requests declaring tools the vendor runs itself (web search and
    # fetch, code execution, remote MCP): they reach the network outside the seats' (default no).
    server_tools: bool = False


@dataclass
class FairUseConfig:
    """Per-seat limits at the model proxy (isolation/fair_use.py): one vendor account is shared
    by every seat of the run, both arms, so none can use up the account's rate limit. null:
    none. A seat's own limit, when set, wins over its equal share of the account's."""

    account_rpm: float | None = None
    account_concurrency: int | None = None
    seat_rpm: float | None = None
    seat_concurrency: int | None = None
    # A request over its seat's limit waits this long at most, then gets the vendor's 429.
    max_wait_s: float = 60.0


@dataclass
class IsolationConfig:
    """Where agents run. ``docker`` isolates; ``local`` is for development and isolates nothing."""

    backend: str = "docker"
    # "auto": every CPU but the judge's.
    cpuset: str = "auto"
    memory: str = "1g"
    pids_limit: int = 256
    # What one seat may write (its clone, notes and outbox together), in MiB; null: no quota.
    # Enforced as root with a loop-mounted filesystem per seat (isolation/quota.py).
    disk_quota_mb: int | None = 2048
    fair_use: FairUseConfig = field(default_factory=FairUseConfig)


@dataclass
class BudgetScopeConfig:
    """Whether each budget is an arm's pool its seats share (``per_arm``) or each seat's own
    (``per_seat``). ``match=NAME`` forces NAME's to ``per_arm``."""

    output_tokens: str = "per_arm"
    input_tokens: str = "per_arm"
    cost_usd: str = "per_arm"
    evaluations: str = "per_arm"


@dataclass
class BudgetConfig:
    """The deadline ends the run, not the agents' opinion."""

    minutes: float = 60.0
    # Optional cap on submissions per agent (the seed's "turn cap"); null: none.
    max_submissions_per_agent: int | None = None
    # Judge evaluations per arm, or per submitting seat with scope.evaluations=per_seat (its
    # agents' submissions; the runner's re-judgements aside): submissions beyond it are
    # refused, and an arm is done once its were all judged (runner/gateway.py arms_ended).
    # The run ends when every arm is done, by this budget or its seats' token budgets, or at
    # the deadline, whichever comes first. null: no such budget.
    evaluations: int | None = None
    # Tokens and estimated cost, counted at the model proxy from the vendor's own usage
    # (isolation/spending.py): a seat over its budget gets the vendor's quota error and is
    # not restarted; the run ends once every seat's is spent. null: no such budget.
    output_tokens: int | None = None
    input_tokens: int | None = None
    cost_usd: float | None = None
    scope: BudgetScopeConfig = field(default_factory=BudgetScopeConfig)
    # Model name (or a prefix of dated releases) -> {input, output, cache_read?, cache_write?}
    # in USD per million tokens (an estimate); `default` prices any other model. Checked by
    # runner/settings.py (a typed node would refuse `+budget.prices.MODEL={...}`).
    prices: dict[str, Any] = field(default_factory=dict)
    # After the deadline, evaluations already queued may finish for this long; the rest are
    # cancelled and counted as not evaluated.
    drain_minutes: float = 3.0


@dataclass
class RejudgeConfig:
    """After the deadline the runner judges each arm's best PASS ``runs`` times and the starting
    commit ``baseline_runs`` times (runner/rejudge.py): the best is reported as re-measured, not
    as the luckiest of many noisy numbers, and the starting commit's spread is the judge's noise.
    The phase ends after ``max_minutes``; what is not judged by then is withdrawn."""

    runs: int = 3
    baseline_runs: int = 2
    max_minutes: float = 10.0


@dataclass
class RunnerConfig:
    experiment: str = "single"
    seed: int = 0
    task: TaskConfig = field(default_factory=TaskConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    isolation: IsolationConfig = field(default_factory=IsolationConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    # Re-judging after the deadline (runs saved before the word was settled call it `confirm`:
    # resuming one reads that key).
    rejudge: RejudgeConfig = field(default_factory=RejudgeConfig)
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    # One budget every arm gets the same total of (output_tokens, input_tokens, cost_usd or
    # evaluations): its scope is forced to per_arm. null: none.
    match: str | None = None
    # arm=continuation: the run directory whose champion every agent starts from.
    from_run: str | None = None
    # Seconds between progress lines; 0: none.
    progress_every_s: float = 10.0
    # Serve the live view (python -m analysis.view) beside the run; its address printed first.
    view: bool = False
    # plan=DIR: finished runs or a sweep (a pilot) to plan this run from; the planner's
    # recommendation (analysis.plan.launch, a simulation) is printed before anything starts.
    plan: str | None = None


#: The budgets that can be per arm or per seat, and matched between arms.
BUDGET_NAMES = ("output_tokens", "input_tokens", "cost_usd", "evaluations")


def budget_scope(cfg: DictConfig, name: str) -> str:
    """The scope of budget ``name``: ``per_arm`` when ``match`` names it, else its setting."""
    if cfg.get("match") == name:
        return "per_arm"
    scope = cfg.budget.get("scope") or {}
    return str(scope.get(name) or "per_arm")


def evaluations_budget(cfg: DictConfig, scope: str) -> int | None:
    """``budget.evaluations`` where its scope is ``scope`` (per_arm or per_seat), else None."""
    limit = cfg.budget.get("evaluations")
    if limit is None or budget_scope(cfg, "evaluations") != scope:
        return None
    return int(limit)


def budgets_meta(cfg: DictConfig) -> dict[str, Any]:
    """What the run's meta records as ``budgets``: the minutes, each budget set (its limit and
    scope), ``match``, and ``prices_estimate`` when a cost budget is set."""
    budget = cfg.budget
    out: dict[str, Any] = {"minutes": budget.minutes}
    for name in BUDGET_NAMES:
        if budget.get(name) is not None:
            out[name] = {"limit": budget[name], "scope": budget_scope(cfg, name)}
    out["match"] = cfg.get("match")
    if budget.get("cost_usd") is not None:
        out["prices_estimate"] = True
    return out


def _arm_names(arms: object) -> str:
    return "_".join(arms) if arms else "none"  # type: ignore[arg-type]


def _job_minutes(
    minutes: float, drain_minutes: float, rejudge_minutes: float = 0, margin: float = 30
) -> int:
    """A cluster job's time limit: the budget, the drain, the re-judging phase, and a margin
    for the judge's setup and preflight (the first time on a node) and the summary."""
    return math.ceil(float(minutes) + float(drain_minutes) + float(rejudge_minutes) + margin)


def _slurm_gres(device: str) -> str | None:
    """The SLURM generic resource a job asks for to give its judge ``device``: one GPU for
    ``cuda:N`` / ``gpu:N`` (SLURM picks which; the job sees it as its own), none for ``cpu``."""
    return "gpu:1" if str(device).startswith(("cuda", "gpu")) else None


# Paths given as they are: a folder's name may hold characters Hydra's lexer refuses (~ ^ ...).
VERBATIM_KEYS = ("from_run", "plan")


def quote_verbatim(overrides: list[str]) -> list[str]:
    """``overrides`` with each ``from_run=`` value that Hydra's override lexer would refuse
    quoted, so any path can be given as it is (values it parses, sweeps included, stay)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for item in overrides:
        key, eq, value = item.partition("=")
        if eq and key in VERBATIM_KEYS:
            try:
                parser.parse_overrides([item])
            except HydraException:
                quote = "'" if "'" not in value else '"'
                if quote not in value:
                    item = f"{key}={quote}{value}{quote}"
        out.append(item)
    return out


def register_configs() -> None:
    """Schemas into Hydra's ConfigStore, and the ``arm_names``, ``job_minutes`` and
    ``slurm_gres`` resolvers (idempotent)."""
    register_judge_configs()
    if not OmegaConf.has_resolver("arm_names"):
        OmegaConf.register_new_resolver("arm_names", _arm_names)
    if not OmegaConf.has_resolver("job_minutes"):
        OmegaConf.register_new_resolver("job_minutes", _job_minutes)
    if not OmegaConf.has_resolver("slurm_gres"):
        OmegaConf.register_new_resolver("slurm_gres", _slurm_gres)
    cs = ConfigStore.instance()
    cs.store(name="runner_schema", node=RunnerConfig)
    cs.store(group="schema", name="arm", node=ArmConfig)
    cs.store(group="schema", name="agent", node=AgentConfig)
    cs.store(group="schema", name="isolation", node=IsolationConfig)
