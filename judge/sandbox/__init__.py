"""The evaluation sandbox: containers, and engine processes spoken to over the engine protocol
with the judge's own clock.

- :mod:`judge.sandbox.base`: what the judge needs of a sandbox (the interface, its faults,
  :func:`open_sandbox`, which builds the implementation ``judge.sandbox.backend`` names);
- :mod:`judge.sandbox.docker`: the Docker implementation (containers, freezer, OOM counters,
  cleanup), with :mod:`judge.sandbox._engine` (the engine process) and
  :mod:`judge.sandbox._streams` (Docker's attach stream, demultiplexed);
- :mod:`judge.sandbox._cpusets`: the judge's CPU and the others.

``Sandbox`` and ``SandboxContainer`` are the Docker implementation's classes under the names
the judge and its tests have always imported; code that makes a sandbox calls
:func:`open_sandbox`.
"""

from __future__ import annotations

from judge.config import SandboxConfig
from judge.protocol import EngineFailure
from judge.sandbox._cpusets import judge_cpuset, other_cpus
from judge.sandbox._engine import EngineProcess
from judge.sandbox._streams import LineTooLong, _Stream
from judge.sandbox.base import (
    BUILD_HINT,
    SLOWER_NOW,
    Attached,
    Container,
    Engine,
    InfrastructureFault,
    TimeoutAnswered,
    answered_retry,
    backend_of,
    build_env,
    fault_reason,
    open_sandbox,
    read_only_failure,
    remove_stale_sandboxes,
    sandbox_backend,
    sandbox_class,
    sandbox_python,
)
from judge.sandbox.docker import (
    DEVICE_LABEL,
    SANDBOX_LABEL,
    SANDBOX_USER,
    DockerContainer,
    DockerSandbox,
    find_cgroup_freezer,
)

# The Docker implementation under its historical names (tests build it directly).
Sandbox = DockerSandbox
SandboxContainer = DockerContainer

__all__ = [
    "BUILD_HINT",
    "DEVICE_LABEL",
    "SANDBOX_LABEL",
    "SANDBOX_USER",
    "SLOWER_NOW",
    "Attached",
    "Container",
    "DockerContainer",
    "DockerSandbox",
    "Engine",
    "EngineFailure",
    "EngineProcess",
    "InfrastructureFault",
    "LineTooLong",
    "Sandbox",
    "SandboxConfig",
    "SandboxContainer",
    "TimeoutAnswered",
    "_Stream",
    "answered_retry",
    "backend_of",
    "build_env",
    "fault_reason",
    "find_cgroup_freezer",
    "judge_cpuset",
    "open_sandbox",
    "other_cpus",
    "read_only_failure",
    "remove_stale_sandboxes",
    "sandbox_backend",
    "sandbox_class",
    "sandbox_python",
]
