"""Where an agent's process runs: a name-keyed registry of backends (in the style of
inspect_ai's sandbox environments).

``docker`` (the default) gives every agent its own container that sees exactly what
``docs/agent-workspace.md`` lists and nothing else of the host. ``local`` runs the agent as a
plain process on the host, for development only: it isolates nothing and says so each time.

A backend is looked up with :func:`get_backend`; new ones register with
``@agent_backend("name")``.
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from isolation.hardening import hardened_options
from isolation.images import (
    DockerUnavailable,
    base_tag,
    docker_client,
    host_python_mounts,
    run_container,
)
from isolation.taskenv import TaskRuntime
from isolation.workspace import AgentWorkspace, ArmWorkspace
from registry import Registry

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The in-container tools (submit, board, verdicts) and the git config every agent gets.
TOOLS_DIR = PROJECT_ROOT / "agents" / "tools"
AGENT_GITCONFIG = TOOLS_DIR / "gitconfig"

RUN_LABEL = "org.swarmlab.run"
ARM_LABEL = "org.swarmlab.arm"
AGENT_LABEL = "org.swarmlab.agent"

# Paths inside an agent's container (the contract).
WORK = "/work"
CONTAINER_PATHS = {
    "repo": f"{WORK}/repo",
    "notes": f"{WORK}/notes",
    "outbox": f"{WORK}/outbox",
    "inbox": f"{WORK}/inbox",
    "board": f"{WORK}/board",
    "submissions": f"{WORK}/submissions.git",
}
BIN = "/opt/swarmlab/bin"
HOST_INIT = "/usr/bin/docker-init"
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]")


@runtime_checkable
class AgentHandle(Protocol):
    """A started agent."""

    def running(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def stop(self, timeout: float = 5) -> None: ...

    def logs_tail(self, n: int) -> str: ...


@dataclass
class AgentSpec:
    """Everything a backend needs to start one agent.

    ``extra_mounts`` maps host paths to container paths, always read-only (the tools folder,
    the task's move library, ...). ``user`` is ``"uid:gid"``; by default the owner of the
    agent's clone (see ``prepare_arm``), never root. ``network`` is ``none`` or the name of a
    Docker network (for agents that call a model API). ``labels`` may carry the run's label
    (``org.swarmlab.run``); without it one is derived from the run directory.
    """

    arm: str
    agent: str
    workspace: AgentWorkspace
    arm_workspace: ArmWorkspace
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    image: str = field(default_factory=base_tag)
    cpuset: str = ""
    memory: str = "1g"
    pids_limit: int = 256
    network: str = "none"
    extra_mounts: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    tmp_size: str = "512m"
    # The task's part (isolation.taskenv): assets (name -> host path) read-only at
    # /assets/<name>, and the size of the writable, executable /build the judge's sandbox has too.
    assets: dict[str, str] = field(default_factory=dict)
    build_size: str = "1g"
    # The offline base image borrows the host's /usr and Python (read-only); a normal image
    # (python:3.12-slim plus an agent's CLI) brings its own: set this to False.
    mount_host_python: bool = True
    # Host folders no mount may contain or lie inside (the judge's private folder); the run
    # directory is always one, apart from this agent's own folders.
    hidden_paths: list[str] = field(default_factory=list)
    # A vendor CLI's seat (all empty for the scripted agent): the argv that continues the CLI's
    # own session after an early exit (the supervisor uses it instead of ``command`` once a
    # session record exists), that mechanism's name for the lifecycle event, and the host
    # folder and ``analysis.tokens`` format of the CLI's session records.
    resume_command: list[str] = field(default_factory=list)
    resume_mechanism: str = ""
    records: str = ""
    records_format: str = ""

    @property
    def run_dir(self) -> Path:
        return self.arm_workspace.root.parent.parent

    @property
    def run(self) -> str:
        return self.labels.get(RUN_LABEL) or run_label(self.run_dir)


def run_label(run_dir: Path) -> str:
    """A label for a run's containers when none is given: the folder's name and a hash of its
    absolute path (two runs never share one)."""
    path = str(Path(run_dir).resolve())
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    return f"{_NAME_OK.sub('-', Path(path).name)[:40]}-{digest}"


def agent_paths(ws: AgentWorkspace, arm: ArmWorkspace, container: bool) -> dict[str, str]:
    """The ``SWARMLAB_*`` variables the tools read: container paths, or the host's."""
    host = {
        "repo": ws.repo,
        "notes": ws.notes,
        "outbox": ws.outbox,
        "inbox": ws.inbox,
        # A private arm's seat reads its own board and submissions, a solo arm's alike.
        "board": arm.board_dir_of(ws.name),
        "submissions": arm.submissions_of(ws.name),
    }
    paths = CONTAINER_PATHS if container else {k: str(v) for k, v in host.items()}
    return {f"SWARMLAB_{key.upper()}": value for key, value in paths.items()}


def with_task(spec: AgentSpec, runtime: TaskRuntime) -> AgentSpec:
    """``spec`` with the task's part: its assets, and its image where the seat runs the base
    image (a seat whose CLI needs an image of its own keeps it), so that agents build and
    test with what the judge's sandbox has."""
    image = runtime.image if runtime.image and spec.image == base_tag() else spec.image
    return replace(spec, image=image, assets={**spec.assets, **runtime.assets})


def agent_user(spec: AgentSpec) -> tuple[int, int]:
    """The (uid, gid) the agent runs as: ``spec.user``, else the owner of its clone.

    Raises:
        ValueError: it would be root, or ``user`` is not ``"uid:gid"``.
    """
    if spec.user:
        try:
            uid_text, _, gid_text = spec.user.partition(":")
            uid, gid = int(uid_text), int(gid_text or uid_text)
        except ValueError:
            raise ValueError(f"agent {spec.agent}: user {spec.user!r} is not 'uid:gid'") from None
    else:
        st = os.stat(spec.workspace.repo)
        uid, gid = st.st_uid, st.st_gid
    if uid == 0:
        raise ValueError(
            f"agent {spec.agent} would run as root: prepare the arm with uid/gid"
            " (prepare_arm(..., uid=1000, gid=1000)) and give AgentSpec.user"
        )
    return uid, gid


class AgentBackend(abc.ABC):
    """Starts agents and removes what a run left behind."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def start(self, spec: AgentSpec) -> AgentHandle:
        """Start one agent; an earlier instance of the same agent is removed first."""

    @abc.abstractmethod
    def cleanup(self, run: str) -> int:
        """Stop and remove every agent of ``run`` (its label); returns how many."""


# Backends of other modules of ``isolation`` are found by their ``@agent_backend`` call, and of
# installed distributions by the entry point group ``swarmlab.agent_backends``.
BACKENDS: Registry[type[AgentBackend]] = Registry(
    "agent backend", "isolation", "agent_backend", "swarmlab.agent_backends"
)


def agent_backend(name: str) -> Callable[[type[AgentBackend]], type[AgentBackend]]:
    """Class decorator registering a backend under ``name``."""

    def register(cls: type[AgentBackend]) -> type[AgentBackend]:
        BACKENDS.register(name, cls, unique=True)
        cls.name = name
        return cls

    return register


def backend_names() -> list[str]:
    """Every backend that can be asked for by name."""
    return BACKENDS.names()


def get_backend(name: str, **options: Any) -> AgentBackend:
    """A new instance of the backend registered as ``name``.

    Raises:
        ValueError: no backend has that name (the message lists the known ones).
    """
    return BACKENDS.get(name)(**options)


# -- docker ----------------------------------------------------------------------------------


def _container_name(spec: AgentSpec) -> str:
    return _NAME_OK.sub("-", f"swarmlab-{spec.run}-{spec.arm}-{spec.agent}")[:200]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def docker_mounts(spec: AgentSpec) -> dict[str, dict[str, str]]:
    """docker-py ``volumes`` for one agent: the contract's six folders, the tools and git
    config, the host's Python (read-only), and ``extra_mounts`` (read-only).

    Raises:
        ValueError: two mounts share a container path, or a read-only host mount would
            expose the run directory (another agent's or arm's folders).
    """
    ws, arm = spec.workspace, spec.arm_workspace
    binds: list[tuple[str, str, str]] = [
        (str(ws.repo), CONTAINER_PATHS["repo"], "rw"),
        (str(ws.notes), CONTAINER_PATHS["notes"], "rw"),
        (str(ws.outbox), CONTAINER_PATHS["outbox"], "rw"),
        (str(ws.inbox), CONTAINER_PATHS["inbox"], "ro"),
        (str(arm.board_dir_of(ws.name)), CONTAINER_PATHS["board"], "ro"),
        (str(arm.submissions_of(ws.name)), CONTAINER_PATHS["submissions"], "ro"),
        # The agent's uid does not own /work/submissions.git, so git refuses to fetch from it
        # unless safe.directory says otherwise. GIT_CONFIG_COUNT in the environment would not
        # do: git drops it for the upload-pack that a fetch from a local path starts. A system
        # config file is read by every git process in the container.
        (str(AGENT_GITCONFIG), "/etc/gitconfig", "ro"),
    ]
    extra = {str(Path(h).resolve()): c for h, c in spec.extra_mounts.items()}
    if BIN not in extra.values():
        binds.append((str(TOOLS_DIR), BIN, "ro"))
    if spec.mount_host_python:
        binds += [(host, m["bind"], "ro") for host, m in host_python_mounts().items()]
    binds += [(host, target, "ro") for host, target in extra.items()]
    assets = TaskRuntime(assets=dict(spec.assets)).volumes()
    binds += [(host, m["bind"], "ro") for host, m in assets.items()]
    run_dir = str(spec.run_dir.resolve())
    hidden = [str(Path(p).resolve()) for p in spec.hidden_paths]
    own = {str(ws.repo), str(ws.notes), str(ws.outbox), str(ws.inbox)}
    own |= {str(arm.board_dir_of(ws.name)), str(arm.submissions_of(ws.name))}
    volumes: dict[str, dict[str, str]] = {}
    targets: set[str] = set()
    for host, target, mode in binds:
        if target in targets:
            raise ValueError(f"agent {spec.agent}: two mounts at {target}")
        for secret in hidden if host in own else [run_dir, *hidden]:
            if _inside(secret, host) or _inside(host, secret):
                raise ValueError(
                    f"agent {spec.agent}: mounting {host} would expose {secret}"
                    " (the run directory or a hidden path)"
                )
        if host in volumes:  # docker-py keys binds by host path: one target each
            raise ValueError(f"agent {spec.agent}: {host} is mounted twice")
        targets.add(target)
        volumes[host] = {"bind": target, "mode": mode}
    return volumes


def docker_env(spec: AgentSpec) -> dict[str, str]:
    """The container's environment: the spec's, then the contract's (which wins)."""
    env = dict(spec.env)
    env.update(agent_paths(spec.workspace, spec.arm_workspace, container=True))
    env.update(TaskRuntime().env())  # the same build folder and assets' folder as the judge's
    env.update(
        HOME=CONTAINER_PATHS["notes"],
        PATH=f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        LANG=env.get("LANG", "C.UTF-8"),
    )
    env.pop("GIT_CONFIG_NOSYSTEM", None)  # the mounted /etc/gitconfig must be read
    return env


class DockerAgent:
    """A handle on one agent's container."""

    def __init__(self, client: Any, container_id: str, name: str) -> None:
        self.client = client
        self.id = container_id
        self.name = name
        self._code: int | None = None
        self._removed = False
        self._last_logs = ""

    def _state(self) -> dict[str, Any] | None:
        import docker

        if self._removed:
            return None
        try:
            return self.client.api.inspect_container(self.id)["State"]
        except docker.errors.NotFound:
            return None

    def running(self) -> bool:
        state = self._state()
        return bool(state and state.get("Running"))

    def exit_code(self) -> int | None:
        state = self._state()
        if state is None:
            return self._code
        if state.get("Running"):
            return None
        return int(state.get("ExitCode", -1))

    def logs_tail(self, n: int) -> str:
        if self._removed:
            return "\n".join(self._last_logs.splitlines()[-n:])
        try:
            return self.client.api.logs(self.id, tail=n).decode("utf-8", "replace")
        except Exception:
            return ""

    def stop(self, timeout: float = 5) -> None:
        """Stop (SIGTERM, then SIGKILL after ``timeout`` s) and remove the container. The exit
        code and the last 200 lines of its output stay readable on this handle."""
        import docker

        if self._removed:
            return
        with suppress(docker.errors.NotFound):
            self.client.api.stop(self.id, timeout=max(0, round(timeout)))
        self._last_logs = self.logs_tail(200)
        self._code = self.exit_code()
        with suppress(docker.errors.NotFound):
            self.client.api.remove_container(self.id, force=True)
        self._removed = True


def docker_options(spec: AgentSpec) -> dict[str, Any]:
    """docker-py ``containers.run`` keyword arguments for one agent (no engine needed).

    Never a device request: ``judge.device`` goes to the judge's evaluation containers only.

    Raises:
        ValueError: see :func:`agent_user` and :func:`docker_mounts`.
    """
    uid, gid = agent_user(spec)
    labels = {
        **spec.labels,
        RUN_LABEL: spec.run,
        ARM_LABEL: spec.arm,
        AGENT_LABEL: spec.agent,
    }
    # The profile the judge's containers share (isolation.hardening), /build included: the
    # agent builds and runs what the task's build makes where the judge does.
    options: dict[str, Any] = hardened_options(
        user=f"{uid}:{gid}",
        memory=spec.memory,
        pids_limit=spec.pids_limit,
        tmp_size=spec.tmp_size,
        build_size=spec.build_size,
        network=spec.network or "none",
    )
    options.update(
        name=_container_name(spec),
        working_dir=CONTAINER_PATHS["repo"],
        environment=docker_env(spec),
        volumes=docker_mounts(spec),
        labels=labels,
    )
    # An init process reaps the zombies an agent's tools leave (they count against the
    # pids limit). Docker's own (--init) is mounted at /sbin/docker-init, which the base
    # image's /sbin -> usr/sbin link hides under the host's /usr; the host's tini is there.
    if spec.mount_host_python and os.path.exists(HOST_INIT):
        options["entrypoint"] = [HOST_INIT, "--"]
    else:
        options["init"] = True
    if spec.cpuset:
        options["cpuset_cpus"] = spec.cpuset
    return options


@agent_backend("docker")
class DockerBackend(AgentBackend):
    """One container per agent: the contract's mounts only, no network (or a named one), all
    capabilities dropped, no new privileges, read-only root, tmpfs ``/tmp``, memory and pids
    limits, a CPU set, an init process, never root."""

    def __init__(self) -> None:
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = docker_client()
            except DockerUnavailable as exc:
                raise DockerUnavailable(
                    f"{exc} Or run the agents without isolation, for development only:"
                    " isolation=local."
                ) from None
        return self._client

    def start(self, spec: AgentSpec) -> DockerAgent:
        name = _container_name(spec)
        options = docker_options(spec)
        client = self.client
        for old in client.containers.list(all=True, filters={"name": f"^/{name}$"}):
            old.remove(force=True)
        command = list(spec.command)
        # Never pulled: a missing base image is made here, any other is ImageMissing.
        container = run_container(client, spec.image, command, **options)
        return DockerAgent(client, container.id, name)

    def cleanup(self, run: str) -> int:
        found = self.client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run}"})
        for container in found:
            container.remove(force=True)
        return len(found)


# -- local -----------------------------------------------------------------------------------

LOCAL_WARNING = (
    "isolation=local runs agent {agent} as a plain process on this host: it does NOT isolate"
    " anything (the agent can read the judge's files, other agents' folders and the network)."
    " For development only."
)


class LocalAgent:
    """A handle on one agent process (its own session, so its children stop with it)."""

    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.process = process
        self.log = log

    def running(self) -> bool:
        return self.process.poll() is None

    def exit_code(self) -> int | None:
        return self.process.poll()

    def logs_tail(self, n: int) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = 5) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def host_command(spec: AgentSpec) -> list[str]:
    """The command with every container path of ``extra_mounts`` put back to its host path
    (``/opt/swarmlab/agents/scripted`` -> ``<project>/agents/scripted``)."""
    mounts = sorted(spec.extra_mounts.items(), key=lambda m: -len(m[1]))
    argv = []
    for part in spec.command:
        for host, inside in mounts:
            if part == inside or part.startswith(inside.rstrip("/") + "/"):
                part = host + part[len(inside) :]
                break
        argv.append(part)
    return argv


@agent_backend("local")
class LocalBackend(AgentBackend):
    """Runs the agent's command on the host, as the runner's own user, with the tools' paths
    pointing at the host's folders. Isolates nothing; warns loudly on every start.

    It does not switch to the agent's uid: the interpreter the runner uses may not be
    reachable by it (pyenv under a 0700 /root), and nothing would be protected anyway. The
    agent's git gets ``safe.directory = *`` through ``GIT_CONFIG_SYSTEM``, as in a container.
    """

    def __init__(self) -> None:
        self._agents: dict[str, list[LocalAgent]] = {}

    def start(self, spec: AgentSpec) -> LocalAgent:
        message = LOCAL_WARNING.format(agent=f"{spec.arm}/{spec.agent}")
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        print(f"WARNING: {message}", file=sys.stderr, flush=True)
        key = spec.run
        for old in self._agents.get(key, []):
            if old.log == self._log(spec):
                old.stop(timeout=1)
        env = {
            "PATH": f"{TOOLS_DIR}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **spec.env,
            **agent_paths(spec.workspace, spec.arm_workspace, container=False),
            "HOME": str(spec.workspace.notes),
            "GIT_CONFIG_SYSTEM": str(AGENT_GITCONFIG),
            # No /build on the host: a folder of the agent's own (assets stay where they are).
            "SWARMLAB_BUILD": str(spec.workspace.root / "build"),
        }
        (spec.workspace.root / "build").mkdir(exist_ok=True)
        log = self._log(spec)
        with open(log, "ab") as out:
            process = subprocess.Popen(
                host_command(spec),
                cwd=spec.workspace.repo,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        agent = LocalAgent(process, log)
        self._agents.setdefault(key, []).append(agent)
        return agent

    @staticmethod
    def _log(spec: AgentSpec) -> Path:
        return spec.workspace.root / "agent.log"

    def cleanup(self, run: str) -> int:
        agents = self._agents.pop(run, [])
        live = [a for a in agents if a.running()]
        for agent in live:
            agent.stop(timeout=2)
        return len(live)


def wait_until_stopped(handle: AgentHandle, timeout: float) -> int | None:
    """Wait for an agent to exit by itself; its exit code, or None after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while handle.running():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    return handle.exit_code()
