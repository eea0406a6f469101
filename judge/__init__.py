"""The judge's public face: everything outside ``judge/`` imports the judge from here
(``from judge import JudgeClient``), never a ``judge.<module>`` (tests/test_import_graph.py).

Names load lazily, on first use: ``import judge`` imports nothing, so an analysis that only
needs :class:`Metric` never pulls in Docker or the sandbox.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module that defines it.
_HOMES = {
    # The runner's handle on the judge (judge/client.py).
    "JudgeClient": "judge.client",
    "JudgeService": "judge.client",
    "JudgeRefused": "judge.client",
    "JudgeServiceFailed": "judge.client",
    "QueuedJob": "judge.client",
    "QUICK_DEATH_S": "judge.client",
    "QUICK_DEATHS": "judge.client",
    "agent_cpuset": "judge.client",
    "enqueued_jobs": "judge.client",
    "stop_services": "judge.client",
    # Its queue, home and results.
    "JudgeQueue": "judge.queue",
    "Job": "judge.queue",
    "JudgeHome": "judge.private",
    "Evaluation": "judge.verdict",
    "Verdict": "judge.verdict",
    # Settings: schema, checks, composition, the hash that names them.
    "JudgeConfig": "judge.config",
    "JudgeAppConfig": "judge.config",
    "SandboxConfig": "judge.config",
    "judge_problems": "judge.config",
    "register_configs": "judge.config",
    "settings_hash": "judge.settings",
    "NON_VERDICT_SETTINGS": "judge.settings",
    "compose_judge_config": "judge.compose",
    "load_judge_config": "judge.compose",
    "save_judge_config": "judge.compose",
    "task_problems": "judge.compose",
    "BadInput": "judge.checkout",
    # Task kinds and what their scores count.
    "Metric": "judge.kinds",
    "get_kind": "judge.kinds",
    "kind_names": "judge.kinds",
    "run_metric": "judge.kinds",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'judge' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
