"""What the judge needs of a sandbox, whatever runs it: the interface, its faults, and the
name-keyed choice of implementation (``judge.sandbox.backend``).

A sandbox is the containers of one evaluation: each started with a tree mounted read-only
(:meth:`Sandbox.container`) or beside another, sharing only its network
(:meth:`Sandbox.sidecar`), all removed on :meth:`Sandbox.close`. In a container the judge runs
commands to completion (:meth:`Container.run`), engines spoken to over the engine protocol
(:meth:`Container.engine`) and other processes it reads (:meth:`Container.attach`); it freezes
every process of one container while it times another (:meth:`Container.frozen`) and reads
its OOM kills. Every failure of the machinery is an :class:`InfrastructureFault` (the judge's
fault: ERROR, re-queued), never a candidate's verdict.

An implementation subclasses :class:`Sandbox` and :class:`Container` and registers with
``@sandbox_backend("name")``; :func:`open_sandbox` builds the one ``cfg.backend`` names,
importing ``judge.sandbox.<name>`` first when no module has registered it yet.
"""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Protocol

from isolation.taskenv import BUILD_DIR, TaskRuntime
from judge.config import SandboxConfig
from judge.protocol import Reply
from judge.sandbox._cpusets import judge_cpuset
from registry import Registry

DEFAULT_BACKEND = "docker"


# -- faults ----------------------------------------------------------------------------------


class InfrastructureFault(Exception):
    """The sandbox itself failed (the judge's fault: ERROR, re-queued)."""


class TimeoutAnswered(InfrastructureFault):
    """A candidate's request timed out, the baseline ran the same requests just now no slower
    than the first limit allows for, and the candidate answered its retry: ERROR
    ``timeout_answered``, re-queued; charged WRONG ``timeout`` once it happened in every one of
    ``judge.max_attempts`` attempts (``judge.service.charge_repeated_timeouts``). A server that
    hangs on purpose and answers the retry gains nothing: not an uncharged ERROR."""


def fault_reason(fault: InfrastructureFault) -> str:
    """An ERROR's reason for ``fault``: ``timeout_answered`` or ``infrastructure``."""
    return "timeout_answered" if isinstance(fault, TimeoutAnswered) else "infrastructure"


# The baseline now makes the machine "slower than at set-up" only when it raises the retry's
# limit to half as long again as the first: timing noise between set-up and now (a few per
# cent; 3.51 s against 3.50 s was seen) is not a slower machine.
SLOWER_NOW = 1.5


def answered_retry(detail: str, first_limit_s: float, retry_limit_s: float) -> InfrastructureFault:
    """The fault for a timed-out candidate request that answered its retry: the machine was
    slow (the baseline now raised the limit to over :data:`SLOWER_NOW` x the first one: plain
    ERROR ``infrastructure``), or it was not (:class:`TimeoutAnswered`)."""
    if retry_limit_s > SLOWER_NOW * first_limit_s:
        return InfrastructureFault(f"machine too slow to judge now: {detail}")
    return TimeoutAnswered(
        f"{detail}; the baseline was not slower now (the first limit {first_limit_s:.1f} s"
        " already allowed for it): the candidate was slow only on its first try"
    )


# -- the build folder and the interpreter ------------------------------------------------------

# Said after a build that failed on the read-only tree.
BUILD_HINT = (
    "the candidate's tree is read-only: a build writes to $SWARMLAB_BUILD"
    f" ({BUILD_DIR}, also {{build}} in the task's build and serve argv)"
)


def build_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of a ``build`` command: ``/tmp`` is noexec and small, so compilers'
    temporary files go to the build folder."""
    return {**env, "TMPDIR": BUILD_DIR}


def read_only_failure(output: str) -> bool:
    """Whether a failed command's output says it tried to write to a read-only file system."""
    return "read-only file system" in output.lower() or "erofs" in output.lower()


def sandbox_python(cfg: SandboxConfig) -> str:
    """The interpreter a sandbox runs ``{python}`` with: the judge's own (``auto``) or the
    image's (``cfg.python``)."""
    return sys.executable if cfg.python == "auto" else cfg.python


# -- processes ---------------------------------------------------------------------------------


class ProcessStream(Protocol):
    """A process's connection: its stdin, and its stdout and stderr as they arrive."""

    stdout: bytearray
    stderr: bytearray
    closed: bool

    def pump(self, deadline: float | None) -> None: ...

    def read_line(self, deadline: float | None, limit: int = ...) -> bytes: ...

    def send(self, data: bytes) -> None: ...

    def hang_up(self) -> None: ...


class Attached(Protocol):
    """A process started in a container with its streams attached (:meth:`Container.attach`)."""

    stream: ProcessStream

    def running(self) -> bool: ...

    def close(self) -> None: ...


class Engine(Protocol):
    """An engine process spoken to over the engine protocol (:mod:`judge.protocol`) with the
    judge's own clock."""

    label: str
    requests: list[tuple[str, float]]

    @property
    def stderr_tail(self) -> str: ...

    def request(
        self, payload: dict[str, Any], timeout: float, vocab: int | None = None
    ) -> tuple[Reply, float]: ...

    def last_words(self, wait_s: float = 2.0) -> str: ...

    def close(self, wait_s: float = 5.0, grace_s: float = 0.5) -> None: ...

    def hang_up(self) -> None: ...

    def kill(self) -> bool: ...


# -- the interface -----------------------------------------------------------------------------


class Container(abc.ABC):
    """One started container of a sandbox, idle until the judge runs something in it."""

    name: str
    workdir: str
    env: dict[str, str]
    user: str
    paused: bool
    processes: list[Any]  # the engines started in it, ended with it

    @abc.abstractmethod
    def engine(self, argv: list[str], label: str) -> Engine:
        """Start ``argv`` as an engine process, kept in :attr:`processes`."""

    @abc.abstractmethod
    def attach(self, argv: list[str], *, stdin: bool, env: dict[str, str] | None) -> Attached:
        """Start ``argv`` with its output attached (stdin too when ``stdin``); ``env`` replaces
        the container's environment, None gives the command none of its own."""

    @abc.abstractmethod
    def run(
        self, argv: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> tuple[int | None, str]:
        """Run a command to completion; (exit code or None on timeout, combined output tail).
        ``env`` replaces the container's environment for this command."""

    @abc.abstractmethod
    def frozen(self) -> AbstractContextManager[None]:
        """Freeze every process of this container for the duration of the block.

        Raises:
            InfrastructureFault: it could not be frozen.
        """

    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the container still runs, and is not frozen."""

    @abc.abstractmethod
    def oom_kills(self) -> int | None:
        """How many processes the OOM killer has killed in it (None: unknown)."""

    @abc.abstractmethod
    def oom_killed(self) -> bool:
        """Whether the OOM killer has killed anything in it."""


class Sandbox(abc.ABC):
    """The containers of one evaluation; removed on close, whatever happened.

    ``runtime`` is the task's image and assets (:func:`isolation.taskenv.task_runtime`); without
    it the containers run ``cfg.image`` and see no assets. ``freezer`` is how its containers
    freeze (``auto``: the implementation's fastest way; ``api``: its reference way).

    Every container has the judge's CPU (``cfg.cpuset``), ``cfg.memory`` and ``cfg.pids_limit``,
    no network, no capabilities, a read-only root, a writable and executable ``/build`` of
    ``cfg.scratch_mb`` and the task's assets read-only under ``/assets``.

    Raises:
        InfrastructureFault: the implementation cannot reach what runs its containers.
    """

    name: ClassVar[str] = ""

    def __init__(
        self,
        cfg: SandboxConfig,
        device: str,
        owner: str,
        tag: str,
        runtime: TaskRuntime | None = None,
        freezer: str = "auto",
    ) -> None:
        self.cfg = cfg
        self.freezer = freezer
        self.device = device
        self.owner = owner
        self.tag = tag
        self.runtime = runtime or TaskRuntime()
        self.image = self.runtime.image or cfg.image
        self.cpuset = judge_cpuset(cfg.cpuset)
        self.python = sandbox_python(cfg)
        self.containers: list[Any] = []

    def container_env(self) -> dict[str, str]:
        """The environment every command of a sandbox container gets."""
        env = dict(self.cfg.env)
        for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            if name in os.environ:  # older OpenBLAS builds miscompute without them here
                env[name] = os.environ[name]
        env.update(self.runtime.env())
        return env

    @abc.abstractmethod
    def container(self, role: str, tree: Path) -> Container:
        """Start a container with ``tree`` mounted read-only at ``/work/<role>``.

        Raises:
            InfrastructureFault: it could not be started.
        """

    @abc.abstractmethod
    def sidecar(
        self, role: str, of: Container, files: dict[str, str], workdir: str, what: str
    ) -> Container:
        """Start a container that shares only ``of``'s network namespace (its loopback, no
        route out), with its own file system: the interpreter and ``files`` (host path ->
        container path) read-only, ``workdir`` its working folder, no environment, no device.

        Raises:
            InfrastructureFault: it could not be started (``what`` names it in the message).
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Remove every container of this sandbox, ending its processes first."""

    @classmethod
    @abc.abstractmethod
    def prepare(cls, cfg: SandboxConfig) -> None:
        """Check, before anything is set up, that sandboxes can start: what runs them is
        reachable and ``cfg.image`` is there (made now when it can be, never pulled).

        Raises:
            isolation.DockerUnavailable, isolation.ImageMissing (or the implementation's
            like): one line naming what to do.
        """

    @classmethod
    @abc.abstractmethod
    def remove_stale(cls, owner: str, device: str) -> int:
        """Remove the containers a dead worker of this judge left on ``device``; how many."""

    def serve_argv(self, serve: list[str]) -> list[str]:
        """A task's ``serve`` or ``build`` argv with ``{python}`` (the sandbox's interpreter)
        and ``{build}`` (the build folder) filled in."""
        return [
            part.replace("{python}", self.python).replace("{build}", BUILD_DIR) for part in serve
        ]

    def build(self, box: Container, argv: list[str], timeout: float) -> tuple[int | None, str]:
        """Run the task's ``build`` argv in ``box`` (TMPDIR in the build folder); (exit code or
        None on timeout, output tail, with :data:`BUILD_HINT` added when it hit the read-only
        tree)."""
        code, output = box.run(self.serve_argv(argv), timeout, env=build_env(box.env))
        if code not in (0, None) and read_only_failure(output):
            output = f"{output.rstrip()}\n{BUILD_HINT}"
        return code, output


# -- the implementations, by name ----------------------------------------------------------------

# The same registry helper as the task kinds', CLIs', vendor APIs' and agent backends': a new
# implementation is a module or package under judge.sandbox calling @sandbox_backend("name"),
# or an installed distribution's entry point; no list to edit.
SANDBOXES: Registry[type[Sandbox]] = Registry(
    "sandbox backend", "judge.sandbox", "sandbox_backend", "swarmlab.sandbox_backends"
)


def sandbox_backend(name: str) -> Callable[[type[Sandbox]], type[Sandbox]]:
    """Class decorator registering a sandbox implementation under ``name``.

    Raises:
        ValueError: another class already has that name.
    """

    def register(cls: type[Sandbox]) -> type[Sandbox]:
        SANDBOXES.register(name, cls, unique=True)
        cls.name = name
        return cls

    return register


def sandbox_class(name: str) -> type[Sandbox]:
    """The implementation registered as ``name``, its module imported when first asked for.

    Raises:
        ValueError: no implementation has that name (the message lists the known ones).
    """
    return SANDBOXES.get(name)


def backend_of(cfg: SandboxConfig) -> type[Sandbox]:
    """The implementation ``cfg.backend`` names (``docker`` when unset: a config saved before
    the setting existed).

    Raises:
        ValueError: no implementation has that name.
    """
    return sandbox_class(str(getattr(cfg, "backend", None) or DEFAULT_BACKEND))


def open_sandbox(
    cfg: SandboxConfig,
    device: str,
    owner: str,
    tag: str,
    runtime: TaskRuntime | None = None,
    freezer: str = "auto",
) -> Sandbox:
    """A new sandbox of the implementation ``cfg.backend`` names (:func:`backend_of`).

    Raises:
        ValueError: no implementation has that name.
        InfrastructureFault: the implementation cannot reach what runs its containers.
    """
    return backend_of(cfg)(cfg, device, owner, tag, runtime=runtime, freezer=freezer)


def remove_stale_sandboxes(owner: str, device: str, backend: str = DEFAULT_BACKEND) -> int:
    """Remove the containers a dead worker of this judge left on ``device``; returns how many.
    (Workers on other devices of the same judge keep theirs.)"""
    return sandbox_class(backend).remove_stale(owner, device)
