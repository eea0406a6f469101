"""Structured configs of the runner (``python -m runner``): typos and bad types are rejected
with Hydra's own messages."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

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
    (``arms/directions.py``)."""

    name: str
    seats: list[SeatConfig] = field(default_factory=list)
    start: str = "master"
    task_directions: bool = False


@dataclass
class AgentConfig:
    """The seat adapter every agent of the experiment uses (the same in every arm)."""

    kind: str = "scripted"
    # True for programs with no model: every table marks the arm as scripted.
    scripted: bool = True
    # argv run in the agent's container; {python} {role} {direction} {seed} {deadline} {agent}
    # are filled in per seat.
    command: list[str] = field(default_factory=list)
    image: str = "swarmlab-base:1"
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


@dataclass
class BudgetConfig:
    """The deadline ends the run, not the agents' opinion."""

    minutes: float = 60.0
    # Optional cap on submissions per agent (the seed's "turn cap"); null: none.
    max_submissions_per_agent: int | None = None
    # Judge evaluations per arm (its agents' submissions; the runner's re-judgements aside):
    # submissions beyond it are refused, and the run ends once every arm's were all judged,
    # or at the deadline, whichever comes first. null: no such budget.
    evaluations: int | None = None
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
    # arm=continuation: the run directory whose champion every agent starts from.
    from_run: str | None = None
    # Seconds between progress lines; 0: none.
    progress_every_s: float = 10.0
    # Serve the live view (python -m analysis.view) beside the run; its address printed first.
    view: bool = False


def _arm_names(arms: object) -> str:
    return "_".join(arms) if arms else "none"  # type: ignore[arg-type]


def _job_minutes(minutes: float, drain_minutes: float, margin: float = 30) -> int:
    """A cluster job's time limit: the budget, the drain, and a margin for the judge's setup
    and preflight (the first time on a node) and the summary."""
    return math.ceil(float(minutes) + float(drain_minutes) + float(margin))


# Paths given as they are: a folder's name may hold characters Hydra's lexer refuses (~ ^ ...).
VERBATIM_KEYS = ("from_run",)


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
    """Schemas into Hydra's ConfigStore, and the ``arm_names`` and ``job_minutes`` resolvers
    (idempotent)."""
    register_judge_configs()
    if not OmegaConf.has_resolver("arm_names"):
        OmegaConf.register_new_resolver("arm_names", _arm_names)
    if not OmegaConf.has_resolver("job_minutes"):
        OmegaConf.register_new_resolver("job_minutes", _job_minutes)
    cs = ConfigStore.instance()
    cs.store(name="runner_schema", node=RunnerConfig)
    cs.store(group="schema", name="arm", node=ArmConfig)
    cs.store(group="schema", name="agent", node=AgentConfig)
    cs.store(group="schema", name="isolation", node=IsolationConfig)
