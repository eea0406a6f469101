"""The evaluation sandbox: fresh Docker containers, and engine processes spoken to over the
engine protocol with the judge's own clock.

A candidate's container has no network, no capabilities, a read-only root and code, a wiped
scratch folder, limits on memory and processes, and the judge's CPU. The baseline runs in a
container of its own; the candidate's is frozen (cgroup freezer) while the baseline is timed,
so nothing the candidate leaves running can slow the baseline down.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isolation import docker_client, host_python_mounts
from judge.config import SandboxConfig

SANDBOX_LABEL = "org.swarmlab.judge.sandbox"
DEVICE_LABEL = "org.swarmlab.judge.device"
_STDERR_KEEP = 64 * 1024


class EngineFailure(Exception):
    """The engine did something wrong (the candidate's fault). ``kind`` is the reason code:
    ``timeout``, ``crash`` or ``protocol``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class InfrastructureFault(Exception):
    """The sandbox itself failed (the judge's fault: ERROR, re-queued)."""


def judge_cpuset(setting: str) -> str:
    """``auto`` is the machine's last CPU; anything else is passed to Docker as given."""
    if setting != "auto":
        return setting
    return str(max(os.sched_getaffinity(0)))


def sandbox_python(cfg: SandboxConfig) -> str:
    return sys.executable if cfg.python == "auto" else cfg.python


class _Stream:
    """Reads Docker's multiplexed attach stream (8-byte frame headers) from a raw socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._raw = bytearray()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.closed = False

    def pump(self, deadline: float | None) -> None:
        """Read at least one chunk, or raise TimeoutError at ``deadline``; sets ``closed``."""
        if self.closed:
            return
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            raise TimeoutError
        try:
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(1 << 16)
        except TimeoutError:
            raise
        except OSError as exc:
            if exc.errno == errno.EBADF:  # our end of the socket is gone: not the engine's doing
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine: {exc}"
                ) from exc
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self._raw += chunk
        while len(self._raw) >= 8:
            size = int.from_bytes(self._raw[4:8], "big")
            if len(self._raw) < 8 + size:
                break
            kind, payload = self._raw[0], bytes(self._raw[8 : 8 + size])
            del self._raw[: 8 + size]
            if kind == 1:
                self.stdout += payload
            else:
                self.stderr += payload
                if len(self.stderr) > 2 * _STDERR_KEEP:
                    del self.stderr[:-_STDERR_KEEP]


class EngineProcess:
    """One engine process (the task's ``serve`` command) inside a container."""

    def __init__(self, container: SandboxContainer, argv: list[str], label: str) -> None:
        self.container = container
        self.label = label
        api = container.client.api
        self.exec_id = api.exec_create(
            container.id,
            argv,
            stdin=True,
            stdout=True,
            stderr=True,
            workdir=container.workdir,
            environment=container.env,
            user=container.user,
        )["Id"]
        raw = api.exec_start(self.exec_id, socket=True)
        # A socket of our own (a duplicate of the descriptor): on a Unix socket docker-py keeps
        # no reference to the HTTP response behind ``raw``, and when that response is collected
        # it closes the descriptor under the judge (seen in CI: "[Errno 9] Bad file descriptor",
        # charged to a candidate as a crash). ``raw`` is closed with ours in close().
        self._io = raw
        self._stream = _Stream(getattr(raw, "_sock", raw).dup())
        self.requests: list[tuple[str, float]] = []

    @property
    def stderr_tail(self) -> str:
        return bytes(self._stream.stderr[-4096:]).decode("utf-8", "replace")

    def request(self, payload: dict[str, Any], timeout: float) -> tuple[dict[str, Any], float]:
        """Send one request; return (response, seconds) measured on the judge's clock.

        Raises:
            EngineFailure: no answer in time, the process died, or the answer is not a JSON
                object on one line, or it says ``ok: false``.
        """
        op = str(payload.get("op"))
        line = (json.dumps(payload) + "\n").encode()
        start = time.perf_counter()
        try:
            self._stream.sock.sendall(line)
        except OSError as exc:
            if exc.errno == errno.EBADF:  # our end of the socket is gone: the judge's fault
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine before {op}: {exc}"
                ) from exc
            raise EngineFailure("crash", f"engine process gone before {op}: {exc}") from None
        deadline = start + timeout
        stream = self._stream
        while b"\n" not in stream.stdout:
            if stream.closed:
                raise EngineFailure("crash", f"engine exited during {op}")
            try:
                stream.pump(deadline)
            except TimeoutError:
                raise EngineFailure("timeout", f"no reply to {op} within {timeout:.1f} s") from None
        elapsed = time.perf_counter() - start
        reply, _, rest = bytes(stream.stdout).partition(b"\n")
        stream.stdout = bytearray(rest)
        self.requests.append((op, elapsed))
        try:
            response = json.loads(reply)
        except ValueError:
            raise EngineFailure("protocol", f"reply to {op} is not JSON") from None
        if not isinstance(response, dict):
            raise EngineFailure("protocol", f"reply to {op} is not a JSON object")
        if response.get("ok") is not True:
            raise EngineFailure("crash", f"engine reported an error on {op}")
        return response, elapsed

    def close(self) -> None:
        with suppress(OSError):
            self._stream.sock.shutdown(socket.SHUT_WR)
        self._stream.sock.close()
        with suppress(Exception):
            self._io.close()


@dataclass
class SandboxContainer:
    """A started container that idles until the judge runs commands in it."""

    client: Any
    id: str
    name: str
    workdir: str
    env: dict[str, str]
    user: str
    paused: bool = False
    processes: list[EngineProcess] = field(default_factory=list)

    def engine(self, argv: list[str], label: str) -> EngineProcess:
        process = EngineProcess(self, argv, label)
        self.processes.append(process)
        return process

    def run(self, argv: list[str], timeout: float) -> tuple[int | None, str]:
        """Run a command to completion; (exit code or None on timeout, combined output tail)."""
        api = self.client.api
        exec_id = api.exec_create(
            self.id,
            argv,
            stdout=True,
            stderr=True,
            workdir=self.workdir,
            environment=self.env,
            user=self.user,
        )["Id"]
        raw = api.exec_start(exec_id, socket=True)
        stream = _Stream(getattr(raw, "_sock", raw))
        deadline = time.perf_counter() + timeout
        try:
            while not stream.closed:
                stream.pump(deadline)
        except TimeoutError:
            return None, bytes(stream.stderr[-2000:]).decode("utf-8", "replace")
        finally:
            stream.sock.close()
        code = api.exec_inspect(exec_id).get("ExitCode")
        out = (bytes(stream.stdout[-2000:]) + bytes(stream.stderr[-2000:])).decode(
            "utf-8", "replace"
        )
        return code, out

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Freeze every process of this container for the duration of the block."""
        self.client.api.pause(self.id)
        self.paused = True
        try:
            yield
        finally:
            self.client.api.unpause(self.id)
            self.paused = False

    def oom_killed(self) -> bool:
        try:
            return bool(self.client.api.inspect_container(self.id)["State"].get("OOMKilled"))
        except Exception:
            return False


class Sandbox:
    """The containers of one evaluation; removed on close, whatever happened."""

    def __init__(self, cfg: SandboxConfig, device: str, owner: str, tag: str) -> None:
        self.cfg = cfg
        self.device = device
        self.owner = owner
        self.tag = tag
        self.cpuset = judge_cpuset(cfg.cpuset)
        self.python = sandbox_python(cfg)
        self.containers: list[SandboxContainer] = []
        try:
            self.client = docker_client()
        except Exception as exc:
            raise InfrastructureFault(str(exc)) from exc

    def container(self, role: str, tree: Path) -> SandboxContainer:
        """Start a container with ``tree`` mounted read-only at ``/work/<role>``."""
        import docker

        workdir = f"/work/{role}"
        volumes: dict[str, dict[str, str]] = {}
        if self.cfg.mount_host_python:
            volumes.update(host_python_mounts())
        volumes[str(tree)] = {"bind": workdir, "mode": "ro"}
        env = dict(self.cfg.env)
        for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            if name in os.environ:  # older OpenBLAS builds miscompute without them here
                env[name] = os.environ[name]
        device_requests = []
        if self.device.startswith(("gpu", "cuda")):
            index = self.device.partition(":")[2] or "0"
            device_requests.append(
                docker.types.DeviceRequest(device_ids=[index], capabilities=[["gpu"]])
            )
        name = f"swarmlab-judge-{self.tag}-{role}"
        try:
            stale = self.client.containers.list(all=True, filters={"name": name})
            for old in stale:
                old.remove(force=True)
            created = self.client.containers.run(
                self.cfg.image,
                ["sleep", "infinity"],
                name=name,
                detach=True,
                network_mode="none",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={
                    "/tmp": "rw,nosuid,nodev,size=64m",
                    "/scratch": f"rw,nosuid,nodev,exec,size={self.cfg.scratch_mb}m",
                },
                user="65534:65534",
                cpuset_cpus=self.cpuset,
                mem_limit=self.cfg.memory,
                memswap_limit=self.cfg.memory,
                pids_limit=self.cfg.pids_limit,
                volumes=volumes,
                working_dir=workdir,
                environment=env,
                labels={SANDBOX_LABEL: self.owner, DEVICE_LABEL: self.device},
                device_requests=device_requests or None,
            )
        except docker.errors.ImageNotFound as exc:
            raise InfrastructureFault(
                f"sandbox image {self.cfg.image} is missing: run `make setup` "
                "(or `python -m isolation.images`)"
            ) from exc
        except docker.errors.DockerException as exc:
            raise InfrastructureFault(f"could not start the {role} sandbox: {exc}") from exc
        box = SandboxContainer(self.client, created.id, name, workdir, env, "65534:65534")
        self.containers.append(box)
        return box

    def serve_argv(self, serve: list[str]) -> list[str]:
        return [part.replace("{python}", self.python) for part in serve]

    def close(self) -> None:
        for box in self.containers:
            with suppress(Exception):
                self.client.api.remove_container(box.id, force=True)
        self.containers.clear()


def remove_stale_sandboxes(owner: str, device: str) -> int:
    """Remove the containers a dead worker of this judge left on ``device``; returns how many.
    (Workers on other devices of the same judge keep theirs.)"""
    client = docker_client()
    filters = {"label": [f"{SANDBOX_LABEL}={owner}", f"{DEVICE_LABEL}={device}"]}
    stale = client.containers.list(all=True, filters=filters)
    for box in stale:
        box.remove(force=True)
    return len(stale)
