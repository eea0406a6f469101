"""Small helpers of the scripted agent: printing, the environment, running commands."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any


def env_path(name: str, default: str) -> Path:
    """A folder of the contract, from the tools' ``SWARMLAB_*`` variable or its default."""
    return Path(os.environ.get("SWARMLAB_" + name) or default)


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        return default


def say(*parts: Any) -> None:
    """One line on stdout, timestamped (the supervisor keeps the container's output)."""
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


class CommandFailed(RuntimeError):
    """A command exited non-zero; ``code`` and ``output`` say how."""

    def __init__(self, argv: list[str], code: int, output: str) -> None:
        super().__init__(f"{' '.join(argv[:3])} ... exited {code}: {output.strip()[-300:]}")
        self.code = code
        self.output = output


def run(
    argv: list[str], cwd: Path | None = None, timeout: float | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output; raise CommandFailed on failure when `check`."""
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stdout + done.stderr)
    return done


def short(commit: str | None) -> str:
    return (commit or "?")[:10]


def as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
