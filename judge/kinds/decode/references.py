"""The decode kind's set-up references: the baseline engine run over the stored sets through the
JSON-lines engine protocol (``judge.private.setup`` calls it through the kind)."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from isolation.taskenv import task_runtime
from judge.private import InputSet, Progress, build_baseline
from judge.sandbox import open_sandbox
from tasks.schema import task_root


def baseline_references(
    cfg: DictConfig, baseline: Path, sets: list[InputSet], progress: Progress
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
    """Set-up's references: the baseline engine, built as every candidate is, runs each stored
    set (prefill, decode with margins, reset); its tokens, top-2 margins and request times are
    kept by set name (``tokens/<set>``, ``margins/<set>``)."""
    sandbox = open_sandbox(
        cfg.judge.sandbox,
        cfg.judge.device,
        owner="setup",
        tag=f"setup-{secrets.token_hex(4)}",
        runtime=task_runtime(cfg.task, task_root(cfg.task)),
    )
    arrays: dict[str, np.ndarray] = {}
    times: dict[str, tuple[float, float]] = {}
    try:
        box = sandbox.container("baseline", baseline)
        if cfg.task.build:  # the baseline is built exactly as every candidate is
            build_baseline(sandbox, box, list(cfg.task.build), cfg.judge.build_timeout_s)
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
