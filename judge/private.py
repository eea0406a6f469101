"""The judge's private folder: baseline build, hidden seeds and inputs, reference outputs,
queue database. Nothing here is ever mounted into an agent's container.

Setup runs once per task version: it copies the task's template as the frozen baseline and
draws the hidden secret. The stored correctness sets are made per ``judge.sets_seed`` (the
runner passes the run's seed, so a sweep over seeds draws new sets while the arms of one run
share theirs): their prompts come from the secret and that seed, and the baseline is run over
them in the sandbox to record reference tokens, top-2 margins and its own request times (for
timeouts). Timing, B=1 and re-check prompts are not stored at all: every evaluation draws its
own (see ``judge/kinds/decode/evaluator.py`` and docs/judge.md).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from omegaconf import DictConfig, OmegaConf

from isolation.taskenv import (
    TaskEnvironmentError,
    TaskRuntime,
    asset_digests,
    task_runtime,
    toolchain_outputs,
)
from judge.integrity import zone_hashes
from judge.sandbox import (
    InfrastructureFault,
    Sandbox,
    SandboxContainer,
    sandbox_python,
)
from tasks.schema import PROJECT_ROOT, task_root

if TYPE_CHECKING:
    from judge.kinds.base import TaskKind

# 2: per-sets_seed stored sets; timing, B=1 and re-check prompts drawn per evaluation.
# 3: a transition set more per batch size (the walk takes same-size transitions too).
JUDGE_VERSION = "3"
# Under judge.private_dir: assets' sha256 by path, size and mtime (a large file is read once).
ASSET_HASH_CACHE = "asset-sha256.json"
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class InputSet:
    """One hidden prompt set and how many tokens to decode for it."""

    name: str
    prompts: list[list[int]]  # a server task's generator may yield texts (str) instead
    new_tokens: int

    @property
    def batch(self) -> int:
        return len(self.prompts)


class TaskInputError(ValueError):
    """The task's input generator failed or answered the wrong shape (one line: file, fix)."""


def load_callable(spec: str, root: Path) -> Callable:
    """The function ``"FILE.py:FUNCTION"`` of the task folder ``root``, loaded from that file
    (never imported by module name, so it needs nothing on ``sys.path``: the judge service, whose
    ``PYTHONPATH`` is the project's, loads it the same way as ``python -m judge``).

    Raises:
        TaskInputError: see :func:`tasks.folder.load_task_callable`.
    """
    from tasks.folder import TaskFolderError, load_task_callable

    module, colon, name = spec.partition(":")
    if colon and not module.endswith(".py") and root == PROJECT_ROOT:
        # A config saved before task folders ("tasks.decode_cpu.inputs:make_prompts", a root
        # inside the project): the same file, still loaded by path.
        legacy = PROJECT_ROOT.joinpath(*module.split(".")).with_suffix(".py")
        if legacy.is_file():
            spec, root = f"{legacy.name}:{name}", legacy.parent
    try:
        return load_task_callable(spec, root)
    except TaskFolderError as exc:
        raise TaskInputError(str(exc)) from None


def task_fingerprint(cfg: DictConfig) -> str:
    """Changes whenever anything that shapes the references changes: the template's files,
    the task config, the sandbox's interpreter and numpy, the task's image (its id), the
    outputs of its ``toolchain`` commands run in that image (a compiler upgrade re-runs set-up
    instead of turning every evaluation into ERROR) and its assets' sha256.

    Raises:
        TaskEnvironmentError: a missing asset, an image that is missing or fails to build, a
            toolchain command that cannot start.
    """
    digest = hashlib.sha256()
    runtime = task_runtime(cfg.task, task_root(cfg.task))
    cache = Path(cfg.judge.private_dir)
    cache = (cache if cache.is_absolute() else Path.cwd() / cache) / ASSET_HASH_CACHE
    environment = {
        "image_id": runtime.image_id,
        "assets": asset_digests(runtime.assets, cache),
        "toolchain": toolchain_outputs(
            [
                [str(a).replace("{python}", sandbox_python(cfg.judge.sandbox)) for a in argv]
                for argv in cfg.task.get("toolchain") or []
            ],
            runtime.image_id or cfg.judge.sandbox.image,
            bool(cfg.judge.sandbox.mount_host_python),
            runtime,
        ),
    }
    if any(environment.values()):  # a task with none of them keeps its fingerprint of before
        digest.update(json.dumps(environment, sort_keys=True).encode())
    template = task_root(cfg.task) / cfg.task.template
    for file in sorted(
        p for p in template.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ):
        digest.update(file.relative_to(template).as_posix().encode() + b"\0" + file.read_bytes())
    settings = OmegaConf.to_container(cfg.task, resolve=True)
    assert isinstance(settings, dict)
    # Where the folder lies is not what it is: a copied task or a moved project keeps its
    # judge folder. What the input generator draws is: its file joins the hash.
    settings.pop("root", None)
    # Before kinds owned their task nodes every task config held ``server: null`` (the one
    # schema held every kind's node): kept in the hash, so no judge folder of before is
    # orphaned and no set-up re-run (an old run directory's jobs keep their settings hash).
    settings.setdefault("server", None)
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for inputs in _kind(cfg.task).inputs_files(cfg.task):
        digest.update(b"inputs\0" + inputs.read_bytes())
    sandbox = cfg.judge.sandbox
    digest.update(
        f"{JUDGE_VERSION}|{sandbox.image}|{sandbox.python}|{sys.version}|{np.__version__}".encode()
    )
    return digest.hexdigest()


def derive_seed(seed: int, name: str) -> int:
    """A 62-bit seed for ``name`` from ``seed``: distinct names give unrelated streams."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big") >> 2


def draw_set(task: DictConfig, seed: int, name: str, batch: int, prompt_len, new_tokens: int):
    """The prompt set ``name`` drawn from ``seed`` with the task's prompt generator.

    Raises:
        TaskInputError: the generator raised, or answered anything but ``batch`` prompts of
            token ids in ``[0, vocab)`` with lengths in ``prompt_len``.
    """
    root = task_root(task)
    # A relative root: a config saved before task folders, whose inputs name a module.
    make = load_callable(task.inputs, root if Path(task.root).is_absolute() else PROJECT_ROOT)
    file = root / str(task.inputs).partition(":")[0]
    lo, hi = (int(n) for n in prompt_len)
    try:
        prompts = make(derive_seed(seed, name), int(batch), (lo, hi), int(task.vocab))
    except Exception as exc:  # the task's code: any failure is the task's to fix
        raise TaskInputError(
            f"{file}: {task.inputs} raised {type(exc).__name__} "
            f"({' '.join(str(exc).split())}) for batch={batch}, prompt_len=[{lo}, {hi}],"
            f" vocab={task.vocab}: fix the generator"
        ) from None
    # A kind may let the generator yield text prompts (str), sent as they are (the server
    # kind's ``text_prompts``; docs/tasks.md).
    from judge.kinds import kind_of

    try:
        text_ok = bool(getattr(kind_of(task), "text_prompts", False))
    except KeyError:  # no such kind: composing the task says so (judge.compose.task_problems)
        text_ok = False
    problem = _shape_problem(prompts, int(batch), lo, hi, int(task.vocab), text_ok)
    if problem:
        raise TaskInputError(
            f"{file}: {task.inputs} returned {problem} for batch={batch}, "
            f"prompt_len=[{lo}, {hi}], vocab={task.vocab}: it must return a list of `batch` "
            "lists of token ids in [0, vocab), each of a length in prompt_len"
        )
    rows = [p if isinstance(p, str) else [int(t) for t in p] for p in prompts]
    return InputSet(name, rows, int(new_tokens))


def _shape_problem(
    prompts, batch: int, lo: int, hi: int, vocab: int, text_ok: bool = False
) -> str | None:
    try:
        rows = list(prompts)
    except TypeError:
        return f"a {type(prompts).__name__}, not a list"
    if len(rows) != batch:
        return f"{len(rows)} prompts, not {batch}"
    for i, row in enumerate(rows):
        if isinstance(row, str):
            if not text_ok:
                return f"prompt {i} as text, which only a server task may send"
            if not row:
                return f"prompt {i} as an empty text"
            continue  # a text's length in tokens is the server's tokenizer's
        try:
            ids = list(row)
        except TypeError:
            return f"prompt {i} as a {type(row).__name__}, not a list of ids"
        if not lo <= len(ids) <= hi:
            return f"prompt {i} of length {len(ids)}"
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 <= t < vocab:
                return f"prompt {i} holding {t!r}"
    return None


def check_inputs(task: DictConfig) -> str | None:
    """Why the task's inputs are unusable (its kind's ``check_inputs``: a prompt kind tries its
    generator on a tiny draw), or None; None too for a task of no known kind (composing it says
    so). Run when a config is composed, before any folder is made."""
    from judge.kinds import kind_of

    try:
        kind = kind_of(task)
    except KeyError:
        return None
    return kind.check_inputs(task)


def check_prompt_inputs(task: DictConfig) -> str | None:
    """Why a prompt task's input generator is unusable, tried on a tiny draw (two prompts in
    the first case's lengths), or None (``judge.kinds.prompt.PromptKind.check_inputs``)."""
    prompt_len = task.cases[0].prompt_len if task.cases else [1, 4]
    try:
        draw_set(task, 0, "check", 2, prompt_len, 1)
    except TaskInputError as exc:
        return str(exc)
    return None


def batch_sizes(task: DictConfig) -> list[int]:
    """Every batch size an evaluation uses: the cases', the timing batch and 1."""
    return sorted({1, int(task.timing.batch), *(int(c.batch) for c in task.cases)})


def transition_visits(task: DictConfig) -> int:
    """How many runs of each batch size the transition check needs at most: each round is a
    closed walk over every ordered pair of the k sizes, same size included, entering each size
    k times, and the walk's start is visited once more at the very beginning."""
    return len(batch_sizes(task)) * int(task.alternating.rounds) + 1


def plan_inputs(cfg: DictConfig, sets_seed: int) -> list[InputSet]:
    """The stored sets: correctness cases, their confirmation sets, the batch-transition sets
    and one set per timed shape (its baseline times size the timeouts of the fresh prompts
    each evaluation draws). No set is used twice in one evaluation, so an engine that
    remembers answers gains nothing."""
    task = cfg.task

    def make_set(name: str, batch: int, prompt_len, new_tokens: int) -> InputSet:
        return draw_set(task, sets_seed, name, batch, prompt_len, new_tokens)

    sets = []
    for case in task.cases:
        sets.append(make_set(f"case:{case.name}", case.batch, case.prompt_len, case.new_tokens))
        sets.append(make_set(f"confirm:{case.name}", case.batch, case.prompt_len, case.new_tokens))
    alt = task.alternating
    for size in batch_sizes(task):
        for j in range(transition_visits(task)):
            sets.append(make_set(f"alt:{size}:{j}", size, alt.prompt_len, alt.new_tokens))
    timing = task.timing
    sets.append(make_set("shape:timing", timing.batch, timing.prompt_len, timing.new_tokens))
    sets.append(make_set("shape:b1", 1, task.b1.prompt_len, task.b1.new_tokens))
    return sets


@dataclass
class Reference:
    """The baseline's answer to one set: tokens, top-2 margins, and its request times. For a
    set drawn during an evaluation the margins are measured only when a candidate differs."""

    tokens: np.ndarray
    margins: np.ndarray | None
    prefill_s: float
    decode_s: float


class JudgeHome:
    """A set-up private folder for one task version, with the stored sets of one sets seed."""

    def __init__(self, root: Path, sets_seed: int = 0) -> None:
        self.root = root
        self.baseline = root / "baseline"
        self.evals = root / "evals"
        self.queue_path = root / "queue.sqlite"
        manifest = json.loads((root / "setup.json").read_text())
        self.manifest = manifest
        self.frozen_hashes: dict[str, str] = manifest["frozen_hashes"]
        self.sets_seed = sets_seed
        sets = sets_dir(root, sets_seed)
        raw = json.loads((sets / "inputs.json").read_text())
        self.inputs = {
            name: InputSet(name, d["prompts"], d["new_tokens"]) for name, d in raw.items()
        }
        refs = np.load(sets / "references.npz")
        times = json.loads((sets / "times.json").read_text())
        self.references = {
            name: Reference(refs[f"tokens/{name}"], refs[f"margins/{name}"], *times[name])
            for name in self.inputs
        }

    @property
    def owner(self) -> str:
        """A short id that labels this judge's sandboxes."""
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:12]


def sets_dir(root: Path, sets_seed: int) -> Path:
    """Where the stored sets of ``sets_seed`` live inside a judge home."""
    return root / "hidden" / f"sets-{int(sets_seed)}"


def _secret(root: Path) -> int:
    return int(json.loads((root / "hidden" / "seeds.json").read_text())["hidden_seed"])


def home_path(cfg: DictConfig) -> Path:
    """The private folder of this task version: ``<private_dir>/<task name>-<fingerprint>``.

    Raises:
        TaskInputError: a task name that is not one path component (it would leave the folder).
    """
    from tasks.folder import task_name_problem

    problem = task_name_problem(cfg.task.name)
    if problem:
        raise TaskInputError(f"{task_root(cfg.task) / 'task.yaml'}: {problem}")
    base = Path(cfg.judge.private_dir)
    if not base.is_absolute():
        base = Path.cwd() / base
    return base / f"{cfg.task.name}-{task_fingerprint(cfg)[:12]}"


def setup(cfg: DictConfig, progress: Progress = _quiet) -> JudgeHome:
    """Return the judge's private folder for this task, creating it if needed, with the
    stored sets of ``cfg.judge.sets_seed`` (made on first use: the baseline run over them).

    What is stored is the task's kind's: its ``stored_sets`` (a prompt kind's correctness
    sets; none for a kind that draws every input per evaluation) and its
    ``baseline_references`` to them."""
    root = home_path(cfg)
    sets_seed = int(cfg.judge.get("sets_seed") or 0)
    problem = check_inputs(cfg.task)  # before anything is made (a saved config skips compose)
    if problem:
        raise TaskInputError(problem)
    if not (root / "setup.json").exists():
        _setup_home(cfg, root, progress)
    target = sets_dir(root, sets_seed)
    if not target.exists():
        progress(f"judge setup: stored sets for sets_seed={sets_seed}")
        # The secret and the sets seed together: knowing the run's seed alone reveals nothing.
        # Drawn before any folder is made: a failing generator leaves nothing half made.
        sets = _kind(cfg.task).stored_sets(cfg, derive_seed(_secret(root), f"sets:{sets_seed}"))
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        (staging / "inputs.json").write_text(
            json.dumps({s.name: {"prompts": s.prompts, "new_tokens": s.new_tokens} for s in sets})
        )
        try:
            arrays, times = _references_runner(cfg)(cfg, root / "baseline", sets, progress)
        except BaselineBuildFailed:
            shutil.rmtree(staging, ignore_errors=True)  # nothing half made is left behind
            raise
        np.savez(staging / "references.npz", **arrays)
        (staging / "times.json").write_text(json.dumps(times))
        staging.rename(target)
        progress(f"judge setup done: {len(sets)} stored sets")
    return JudgeHome(root, sets_seed)


def _setup_home(cfg: DictConfig, root: Path, progress: Progress) -> None:
    """The baseline build, the secret and the manifest (no sets yet)."""
    progress(f"judge setup: {root}")
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "hidden").mkdir(parents=True)
    # Containers see bind mounts whatever the host folders' modes: keep it root's alone.
    staging.chmod(0o700)
    template = task_root(cfg.task) / cfg.task.template
    shutil.copytree(template, staging / "baseline", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [staging / "baseline", *(staging / "baseline").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    seed = cfg.judge.hidden_seed
    hidden_seed = int(seed) if seed is not None else secrets.randbits(62)
    (staging / "hidden" / "seeds.json").write_text(json.dumps({"hidden_seed": hidden_seed}))
    manifest = {
        "task": cfg.task.name,
        "fingerprint": task_fingerprint(cfg),
        "judge_version": JUDGE_VERSION,
        "created_at": time.time(),
        "frozen_hashes": zone_hashes(staging / "baseline", list(cfg.task.frozen)),
        "project_root": str(PROJECT_ROOT),
        # The image the references are made in: an evaluation in another one is refused.
        "image_id": task_runtime(cfg.task, task_root(cfg.task)).image_id,
    }
    (staging / "setup.json").write_text(json.dumps(manifest, indent=1))
    staging.rename(root)


def sandbox_runtime(task: DictConfig, home: JudgeHome | None = None) -> TaskRuntime:
    """The task's image and assets for an evaluation's sandbox (checked at setup: a change
    since is the infrastructure's fault, ERROR and re-queued).

    Raises:
        InfrastructureFault: the image or an asset is gone, or the image is not the one
            ``home``'s references were made in (retagged since set-up).
    """
    try:
        runtime = task_runtime(task, task_root(task))
    except TaskEnvironmentError as exc:
        raise InfrastructureFault(str(exc)) from None
    made_in = (home.manifest if home is not None else {}).get("image_id")
    if made_in and runtime.image_id != made_in:
        raise InfrastructureFault(
            f"the task's image {runtime.image} is {runtime.image_id}, not {made_in} as at"
            " set-up: restart the judge (a new image makes a new judge folder)"
        )
    return runtime


class BaselineBuildFailed(TaskEnvironmentError):
    """The task's own baseline does not build: the task's fault (exit 2 at setup), and in an
    evaluation an infrastructure fault (ERROR), never the candidate's WRONG."""


def build_baseline(
    sandbox: Sandbox, box: SandboxContainer, build: list[str], timeout: float
) -> None:
    """Run the task's ``build`` over the baseline in ``box``, as a candidate's is run.

    Raises:
        BaselineBuildFailed: it timed out or exited non-zero (one line with the output's tail).
    """
    code, output = sandbox.build(box, build, timeout)
    if code == 0:
        return
    said = " | ".join(line.strip() for line in output.strip().splitlines()[-4:] if line.strip())
    what = f"did not finish within {timeout:.0f} s" if code is None else f"exited with {code}"
    raise BaselineBuildFailed(
        f"the task's build {what} on the baseline (template/): {said or 'no output'}"
        " — fix task.yaml's build or the template (a build writes only to $SWARMLAB_BUILD)"
    )


def _kind(task: DictConfig) -> TaskKind:
    """The task's kind (composing a task refuses an unknown one; a saved config's is checked
    when it is loaded)."""
    from judge.kinds import kind_of

    return kind_of(task)


def _references_runner(cfg: DictConfig) -> Callable:
    """How set-up records the baseline's references: the task's kind's ``baseline_references``
    (the decode kind's speaks the engine protocol; the server kind's, HTTP).

    Raises:
        TaskInputError: the kind records none (it cannot be set up by this folder).
    """
    from judge.kinds import kind_of

    kind = kind_of(cfg.task)
    runner = getattr(kind, "baseline_references", None)
    if runner is None:
        raise TaskInputError(f"task kind {kind.name!r} has no baseline_references for set-up")
    return runner
