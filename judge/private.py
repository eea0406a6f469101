"""The judge's private folder: baseline build, hidden seeds and inputs, reference outputs,
queue database. Nothing here is ever mounted into an agent's container.

Setup runs once per task version: it copies the task's template as the frozen baseline,
draws the hidden seed, makes every hidden prompt set, and runs the baseline in the sandbox to
record reference tokens, top-2 margins and its own request times (for timeouts).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from judge.integrity import zone_hashes
from judge.sandbox import Sandbox
from tasks.schema import PROJECT_ROOT, task_root

JUDGE_VERSION = "1"
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class InputSet:
    """One hidden prompt set and how many tokens to decode for it."""

    name: str
    prompts: list[list[int]]
    new_tokens: int

    @property
    def batch(self) -> int:
        return len(self.prompts)


def load_callable(spec: str) -> Callable:
    """Import ``"module:function"`` on first use."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def task_fingerprint(cfg: DictConfig) -> str:
    """Changes whenever anything that shapes the references changes: the template's files,
    the task config, the sandbox's interpreter and numpy."""
    digest = hashlib.sha256()
    template = task_root(cfg.task) / cfg.task.template
    for file in sorted(
        p for p in template.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ):
        digest.update(file.relative_to(template).as_posix().encode() + b"\0" + file.read_bytes())
    digest.update(
        json.dumps(OmegaConf.to_container(cfg.task, resolve=True), sort_keys=True).encode()
    )
    sandbox = cfg.judge.sandbox
    digest.update(
        f"{JUDGE_VERSION}|{sandbox.image}|{sandbox.python}|{sys.version}|{np.__version__}".encode()
    )
    return digest.hexdigest()


def plan_inputs(cfg: DictConfig, hidden_seed: int) -> list[InputSet]:
    """Every hidden set an evaluation uses; no prompt set is used twice in one evaluation, so
    an engine that remembers answers gains nothing."""
    task = cfg.task
    make = load_callable(task.inputs)

    def derive(name: str) -> int:
        return (
            int.from_bytes(hashlib.sha256(f"{hidden_seed}:{name}".encode()).digest()[:8], "big")
            >> 1
        )

    def make_set(name: str, batch: int, prompt_len, new_tokens: int) -> InputSet:
        prompts = make(derive(name), batch, tuple(prompt_len), task.vocab)
        return InputSet(name, [list(map(int, p)) for p in prompts], int(new_tokens))

    sets = []
    for case in task.cases:
        sets.append(make_set(f"case:{case.name}", case.batch, case.prompt_len, case.new_tokens))
        sets.append(make_set(f"confirm:{case.name}", case.batch, case.prompt_len, case.new_tokens))
    alt = task.alternating
    for r in range(alt.rounds):
        sets.append(make_set(f"alt:{r}:batched", alt.batch, alt.prompt_len, alt.new_tokens))
        sets.append(make_set(f"alt:{r}:single", 1, alt.prompt_len, alt.new_tokens))
    timing = task.timing
    for i in range(max(timing.runs, timing.baseline_runs)):
        sets.append(make_set(f"timing:{i}", timing.batch, timing.prompt_len, timing.new_tokens))
    for i in range(max(task.b1.max_pairs, task.b1.pairs)):
        sets.append(make_set(f"b1:{i}", 1, task.b1.prompt_len, task.b1.new_tokens))
    return sets


@dataclass
class Reference:
    tokens: np.ndarray
    margins: np.ndarray
    prefill_s: float
    decode_s: float


class JudgeHome:
    """A set-up private folder for one task version."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.baseline = root / "baseline"
        self.evals = root / "evals"
        self.queue_path = root / "queue.sqlite"
        manifest = json.loads((root / "setup.json").read_text())
        self.manifest = manifest
        self.frozen_hashes: dict[str, str] = manifest["frozen_hashes"]
        raw = json.loads((root / "hidden" / "inputs.json").read_text())
        self.inputs = {
            name: InputSet(name, d["prompts"], d["new_tokens"]) for name, d in raw.items()
        }
        refs = np.load(root / "hidden" / "references.npz")
        times = manifest["baseline_times"]
        self.references = {
            name: Reference(refs[f"tokens/{name}"], refs[f"margins/{name}"], *times[name])
            for name in self.inputs
        }

    @property
    def owner(self) -> str:
        """A short id that labels this judge's sandboxes."""
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:12]


def home_path(cfg: DictConfig) -> Path:
    base = Path(cfg.judge.private_dir)
    if not base.is_absolute():
        base = Path.cwd() / base
    return base / f"{cfg.task.name}-{task_fingerprint(cfg)[:12]}"


def setup(cfg: DictConfig, progress: Progress = _quiet) -> JudgeHome:
    """Return the judge's private folder for this task, creating it if needed."""
    root = home_path(cfg)
    if (root / "setup.json").exists():
        return JudgeHome(root)
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
    sets = plan_inputs(cfg, hidden_seed)
    (staging / "hidden" / "inputs.json").write_text(
        json.dumps({s.name: {"prompts": s.prompts, "new_tokens": s.new_tokens} for s in sets})
    )
    arrays, times = _run_baseline(cfg, staging / "baseline", sets, progress)
    np.savez(staging / "hidden" / "references.npz", **arrays)
    manifest = {
        "task": cfg.task.name,
        "fingerprint": task_fingerprint(cfg),
        "judge_version": JUDGE_VERSION,
        "created_at": time.time(),
        "frozen_hashes": zone_hashes(staging / "baseline", list(cfg.task.frozen)),
        "baseline_times": times,
        "project_root": str(PROJECT_ROOT),
    }
    (staging / "setup.json").write_text(json.dumps(manifest, indent=1))
    staging.rename(root)
    progress(f"judge setup done: {len(sets)} hidden sets")
    return JudgeHome(root)


def _run_baseline(
    cfg: DictConfig, baseline: Path, sets: list[InputSet], progress: Progress
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
    sandbox = Sandbox(
        cfg.judge.sandbox, cfg.judge.device, owner="setup", tag=f"setup-{secrets.token_hex(4)}"
    )
    arrays: dict[str, np.ndarray] = {}
    times: dict[str, tuple[float, float]] = {}
    try:
        box = sandbox.container("baseline", baseline)
        engine = box.engine(sandbox.serve_argv(list(cfg.task.serve)), "reference")
        engine.request({"op": "load"}, cfg.judge.load_timeout_s)
        for i, s in enumerate(sets):
            _, prefill_s = engine.request({"op": "prefill", "prompts": s.prompts}, 600)
            reply, decode_s = engine.request(
                {"op": "decode", "steps": s.new_tokens, "margins": True}, 600
            )
            engine.request({"op": "reset"}, 60)
            arrays[f"tokens/{s.name}"] = np.asarray(reply["tokens"], dtype=np.int64)
            arrays[f"margins/{s.name}"] = np.asarray(reply["margins"], dtype=np.float64)
            times[s.name] = (prefill_s, decode_s)
            if i % 8 == 7 or i == len(sets) - 1:
                progress(f"  references {i + 1}/{len(sets)}")
    finally:
        sandbox.close()
    return arrays, times
