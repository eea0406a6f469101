"""The judge's CPU and the others: which CPU a sandbox times on, and which are left for the
agents and the judge's other work."""

from __future__ import annotations

import os


def judge_cpuset(setting: str) -> str:
    """``auto`` is the machine's last CPU; anything else is passed to Docker as given."""
    if setting != "auto":
        return setting
    return str(max(os.sched_getaffinity(0)))


def other_cpus(setting: str) -> list[int]:
    """Every CPU this process may use but the judge's (``setting``: the sandbox's cpuset),
    ascending; empty on a one-CPU machine."""
    judge = {int(c) for c in judge_cpuset(setting).split(",") if c.isdigit()}
    return sorted(set(os.sched_getaffinity(0)) - judge)
