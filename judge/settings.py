"""The settings hash: the one name of every judge setting that can change a verdict.

It lives beside neither the schema (``judge.config``) nor the private folder
(``judge.private``, whose task fingerprint it takes in), so that the schema imports nothing of
the judge: the sandbox and the private folder both import the schema.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from omegaconf import OmegaConf

from judge.config import typed_app_config
from judge.private import task_fingerprint

# Judge settings that change no verdict, left out of the settings hash: where the private folder
# lives (the queue lives in it, so all jobs of one queue share it anyway), the queue's order,
# preflight itself, and which device or CPU times an evaluation (every comparison stays inside
# one evaluation on one device; preflight spreads its mutants over several CPUs under one hash).
NON_VERDICT_SETTINGS = ("private_dir", "queue_policy", "preflight", "preflight_parallel", "device")


def settings_hash(cfg: Any) -> str:
    """The hash of everything in a judge config that can change a verdict: the task's
    fingerprint (template, task config, sandbox interpreter) and the judge settings, less
    ``NON_VERDICT_SETTINGS`` and the sandbox's CPU set.

    A job carries the hash it must be judged under and a worker claims only jobs of its own
    hash, so a run is never judged with another run's settings. The config is normalised by the
    schema first: the runner (its own composed config) and the service (the saved file) agree
    on the hash of the same settings.

    Args:
        cfg: A config with ``task`` and ``judge`` nodes (a judge app or runner config).

    Returns:
        16 hex digits.
    """
    typed = OmegaConf.merge(typed_app_config(cfg.task), {"task": cfg.task, "judge": cfg.judge})
    judge: dict[str, Any] = OmegaConf.to_container(typed.judge, resolve=True)  # type: ignore[assignment]
    for name in NON_VERDICT_SETTINGS:
        judge.pop(name, None)
    judge["sandbox"].pop("cpuset", None)
    if judge["sandbox"].get("backend") == "docker":
        # The default, and the only backend before the setting existed: the hashes of runs
        # made then stay their hashes.
        judge["sandbox"].pop("backend")
    blob = json.dumps({"task": task_fingerprint(typed), "judge": judge}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
