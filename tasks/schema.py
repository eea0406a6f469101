"""Structured config for tasks (Hydra group ``task``): typos and bad types are rejected."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import MISSING

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class CaseConfig:
    """One correctness set: ``batch`` hidden prompts, each decoded for ``new_tokens`` steps."""

    name: str
    batch: int
    prompt_len: list[int] = field(default_factory=lambda: [8, 24])
    new_tokens: int = 48


@dataclass
class AlternatingConfig:
    """Batch-size transitions in one engine process (state that leaks between requests).

    Each round is one closed walk through every ordered pair of the batch sizes the task uses
    (the cases', the timing batch and 1), in an order drawn per evaluation; every row of every
    run is checked. ``rounds: 0`` switches the check off.
    """

    # Short on purpose: a leak shows in the first tokens after the transition, and the
    # largest batch's runs are most of this check's cost.
    new_tokens: int = 8
    rounds: int = 1
    prompt_len: list[int] = field(default_factory=lambda: [2, 8])


@dataclass
class TimingConfig:
    """B-row aggregate throughput (tokens over prefill + decode + reset time): each run is a
    pair, candidate and baseline on the same prompts drawn for this evaluation, the order
    alternating."""

    batch: int = 16
    new_tokens: int = 64
    runs: int = 3
    prompt_len: list[int] = field(default_factory=lambda: [8, 24])


@dataclass
class B1Config:
    """Single-sequence speed where traffic meets it (``judge/b1.py``): lone requests in
    process pairs (decode: a fresh candidate and baseline process each; server: the two
    servers) that also serve a batch of a size the task uses, each request at a prompt and
    output length drawn across the ranges of the cases, the timing batch and this block,
    candidate and baseline back to back on the same prompt, timed over prefill + decode +
    reset.

    ``pairs`` lone pairs are run first, ``per_process`` in each process pair; while the
    slowdown is over the limit but not proven, as many again, up to ``max_pairs`` (and never
    fewer process pairs than the test needs to reach ``judge.b1_alpha``).
    """

    pairs: int = 12
    max_pairs: int = 64
    per_process: int = 4
    new_tokens: int = 64
    prompt_len: list[int] = field(default_factory=lambda: [8, 24])


@dataclass
class SpecConfig:
    """The task's three-line spec, as numbers."""

    target_x_baseline: float = 2.0
    b1_max_regression: float = 0.02


@dataclass
class DirectionConfig:
    """One line of work a swarm worker starts on (the arm's seats take them in order)."""

    name: str
    text: str = ""


@dataclass
class TaskConfig:
    """A task: where its files are and what the judge runs on it (docs/tasks.md).

    A task is a folder holding ``task.yaml``; ``root`` is that folder's absolute path, set by
    the loader (``tasks.folder``), never written in the file. Other paths are relative to it.
    ``build`` is an argv list run inside the sandbox from the candidate's tree; ``{python}``
    stands for the sandbox's interpreter.

    Fields set to ``MISSING`` are required: a task that leaves one out is refused with one line
    (no field silently falls back to another task's value).

    These are the fields every kind has; a task is validated against its kind's node, a
    subclass of this one holding the kind's own fields (``TaskKind.task_node``, stored as
    ``/schema/kind/<kind>``; ``tasks.folder`` composes a task folder under it).
    """

    name: str = MISSING
    root: str = MISSING
    # The task kind (judge.kinds registry): its stages, checks, metric and generated mutants.
    kind: str = MISSING
    template: str = MISSING
    mutants: str = "mutants.yaml"
    reference: str = "reference/solution.patch"
    # Large read-only inputs (weights): name -> path (relative to the task folder); hashed,
    # mounted read-only at /assets/<name> in sandboxes and agent containers, never copied.
    assets: dict[str, str] = field(default_factory=dict)
    # The image the judge's sandbox and the arm's agent containers run; null: the task's
    # image/Dockerfile if it has one, else the judge's sandbox image.
    image: str | None = None
    # Commands (argv) run in the task's image whose output joins the task's fingerprint
    # (a compiler upgrade re-runs set-up instead of turning every evaluation into ERROR).
    toolchain: list[list[str]] = field(default_factory=list)
    # What a swarm's workers start on (scripted and real agents alike).
    directions: list[DirectionConfig] = field(default_factory=list)
    # The scripted agents' move library (a folder of the task), if it has one.
    moves: str | None = "moves"
    # Any byte changed, file added or removed here is a REJECT: say `frozen: []` to have none.
    frozen: list[str] = MISSING
    package_names: list[str] = field(default_factory=list)
    build: list[str] | None = None
    spec: SpecConfig = field(default_factory=SpecConfig)


@dataclass
class PromptTaskConfig(TaskConfig):
    """The fields of a task whose hidden inputs are sets of prompts (the stored correctness
    sets of ``judge.private``, the B=1 test of ``judge.b1``): a kind whose evaluation sends
    prompts builds its node on this one (``TaskKind.task_node``) and its kind on
    ``judge.kinds.prompt.PromptKind`` (set-up's stored sets, the generator's check)."""

    # "FILE.py:FUNCTION" of the task folder, loaded from that file (never imported by name):
    # f(seed, batch, prompt_len, vocab) -> list of `batch` lists of token ids.
    inputs: str = MISSING
    # The argv that starts the candidate's program in the sandbox (``{python}``: the sandbox's
    # interpreter), run from the candidate's tree.
    serve: list[str] = MISSING
    # Token ids lie in [0, vocab) (the prompts' ids, and the ids an engine returns).
    vocab: int = MISSING
    cases: list[CaseConfig] = MISSING
    alternating: AlternatingConfig = field(default_factory=AlternatingConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    b1: B1Config = field(default_factory=B1Config)


def task_root(task: TaskConfig) -> Path:
    """The task's folder as an absolute path (a relative root, in configs saved before task
    folders, is taken from the project)."""
    root = Path(task.root)
    return root if root.is_absolute() else PROJECT_ROOT / root
