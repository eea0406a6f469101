"""The evaluation sandbox: fresh Docker containers, and engine processes spoken to over the
engine protocol with the judge's own clock.

A candidate's container has no network, no capabilities, a read-only root and code, one
writable and executable build folder (``/build``, ``$SWARMLAB_BUILD``, ``{build}`` in argv: a
tmpfs of the container, so it starts empty in every evaluation and never is the tree), the
task's assets read-only under ``/assets``, limits on memory and processes, and the judge's
CPU. The baseline runs in a container of its own, built the same way; the candidate's is
frozen (cgroup freezer) while the baseline is timed, so nothing the candidate leaves running
can slow the baseline down.
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors

from isolation import ImageMissing, docker_client, host_python_mounts, run_container
from isolation.taskenv import BUILD_DIR, TaskRuntime
from judge.config import SandboxConfig
from judge.protocol import MAX_LINE_BYTES, EngineFailure, Reply, check_reply, parse_line

__all__ = [
    "BUILD_HINT",
    "EngineFailure",
    "EngineProcess",
    "InfrastructureFault",
    "Sandbox",
    "SandboxContainer",
    "TimeoutAnswered",
    "answered_retry",
    "build_env",
    "fault_reason",
]

SANDBOX_LABEL = "org.swarmlab.judge.sandbox"
DEVICE_LABEL = "org.swarmlab.judge.device"
_STDERR_KEEP = 64 * 1024
SANDBOX_USER = "65534:65534"
# Run inside a container as its user: SIGKILL a process (argv[1], a pid of the container's own
# namespace) and every descendant it has, the tree read first from /proc.
_KILL_TREE = """
import os, signal, sys
children = {}
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
tree, todo = [], [int(sys.argv[1])]
while todo:
    pid = todo.pop()
    tree.append(pid)
    todo += children.get(pid, [])
for pid in tree:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
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


def sandbox_python(cfg: SandboxConfig) -> str:
    return sys.executable if cfg.python == "auto" else cfg.python


class LineTooLong(Exception):
    """More than the allowed bytes arrived without a newline."""


class _Stream:
    """Reads Docker's multiplexed attach stream (8-byte frame headers) from a raw socket.

    Frames are consumed as they arrive, never buffered whole (a header may announce up to
    4 GiB), so the judge holds at most one line of stdout plus one read, and a kept tail of
    stderr.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._header = bytearray()
        self._kind = 0
        self._left = 0  # payload bytes of the current frame still to come
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.closed = False

    def hang_up(self) -> None:
        """Shut the socket down both ways; safe to repeat, and after the socket is closed.

        Closing our descriptor is not enough: docker-py's reader of the same socket keeps it
        open. And the read half matters as much as the write half (the process's EOF): output
        nobody reads any more (an engine flooding past the judge's cap, a server logging on, a
        command left at its timeout) fills the socket's buffers and blocks the Docker daemon's
        copy of it; once the writer dies, every later exec in its container and the
        container's removal wait on that copy (measured here: a kill's exec 10.0 s and a
        removal 20.1 s; after a hang-up 0.16 s and 0.06 s). Shut down, the copy fails at once.
        """
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def _recv(self, timeout: float | None) -> bytes:
        try:
            self.sock.settimeout(timeout)
            return self.sock.recv(1 << 16)
        except TimeoutError:
            raise
        except OSError as exc:
            if exc.errno == errno.EBADF:  # our end of the socket is gone: not the engine's doing
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine: {exc}"
                ) from exc
            return b""

    def pump(self, deadline: float | None) -> None:
        """Read at least one chunk, or raise TimeoutError at ``deadline``; sets ``closed``."""
        if self.closed:
            return
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            raise TimeoutError
        chunk = self._recv(remaining)
        if not chunk:
            self.closed = True
            return
        self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        """Demultiplex one chunk of the attach stream, whatever its frame boundaries."""
        view, i = memoryview(chunk), 0
        while i < len(view):
            if self._left == 0:
                take = min(8 - len(self._header), len(view) - i)
                self._header += view[i : i + take]
                i += take
                if len(self._header) == 8:
                    self._kind = self._header[0]
                    self._left = int.from_bytes(self._header[4:8], "big")
                    self._header.clear()
                continue
            take = min(self._left, len(view) - i)
            part = view[i : i + take]
            i += take
            self._left -= take
            if self._kind == 1:
                self.stdout += part
            else:
                self.stderr += part
                if len(self.stderr) > 2 * _STDERR_KEEP:
                    del self.stderr[:-_STDERR_KEEP]

    def ready(self) -> bool:
        """Read what has already arrived, without waiting; whether any stdout is buffered."""
        for _ in range(64):  # bounded: an engine flooding stderr cannot hold the judge here
            if self.stdout or self.closed:
                break
            try:
                readable, _, _ = select.select([self.sock], [], [], 0)
            except (OSError, ValueError) as exc:
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine: {exc}"
                ) from exc
            if not readable:
                break
            self.pump(None)
        return bool(self.stdout)

    def read_line(self, deadline: float | None, limit: int = MAX_LINE_BYTES) -> bytes:
        """The next stdout line, newline stripped. Each byte is scanned once.

        Raises:
            TimeoutError: no full line by ``deadline``.
            EOFError: the stream ended first.
            LineTooLong: more than ``limit`` bytes arrived without a newline.
        """
        start = 0
        while True:
            end = self.stdout.find(b"\n", start)
            if 0 <= end <= limit:
                line = bytes(self.stdout[:end])
                del self.stdout[: end + 1]
                return line
            if end > limit or len(self.stdout) > limit:
                raise LineTooLong
            if self.closed:
                raise EOFError
            start = len(self.stdout)
            self.pump(deadline)


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
        self.batch = 0  # rows the engine holds: prompts of the last prefill sent
        self.closed = False

    @property
    def stderr_tail(self) -> str:
        return bytes(self._stream.stderr[-4096:]).decode("utf-8", "replace")

    def request(
        self, payload: dict[str, Any], timeout: float, vocab: int | None = None
    ) -> tuple[Reply, float]:
        """Send one request; return (validated reply, seconds) measured on the judge's clock.

        The reply is checked against what the request asked for (:mod:`judge.protocol`);
        ``vocab`` bounds decoded token ids. Failure messages are judge-made; the engine's own
        bytes go only to ``EngineFailure.private``.

        Raises:
            EngineFailure: no answer in time (``timeout``); the process died or says
                ``ok: false`` (``crash``); a malformed answer, or output nobody asked for
                (``protocol``).
        """
        op = str(payload.get("op"))
        stream = self._stream
        if stream.ready():
            # Lines written before the request was sent: a reply computed ahead of time would
            # be read as an instant answer, so speaking out of turn is a protocol violation.
            raise EngineFailure(
                "protocol",
                f"the engine wrote to the protocol stream before {op} was sent",
                repr(bytes(stream.stdout[:200])),
            )
        line = (json.dumps(payload) + "\n").encode()
        start = time.perf_counter()
        try:
            stream.sock.sendall(line)
        except OSError as exc:
            if exc.errno == errno.EBADF:  # our end of the socket is gone: the judge's fault
                raise InfrastructureFault(
                    f"the judge lost its socket to the engine before {op}: {exc}"
                ) from exc
            raise EngineFailure("crash", f"engine process gone before {op}", str(exc)) from None
        if op == "prefill":
            self.batch = len(payload.get("prompts") or [])
        elif op == "reset":
            self.batch = 0
        try:
            reply = stream.read_line(start + timeout)
        except TimeoutError:
            raise EngineFailure("timeout", f"no reply to {op} within {timeout:.1f} s") from None
        except EOFError:
            raise EngineFailure(
                "crash", f"engine exited during {op}", repr(bytes(stream.stdout[:200]))
            ) from None
        except LineTooLong:
            raise EngineFailure(
                "protocol",
                f"reply to {op} is longer than {MAX_LINE_BYTES} bytes",
                repr(bytes(stream.stdout[:200])),
            ) from None
        elapsed = time.perf_counter() - start
        self.requests.append((op, elapsed))
        return check_reply(parse_line(reply, op), payload, self.batch, vocab), elapsed

    def last_words(self, wait_s: float = 2.0) -> str:
        """After a failure: close the engine's stdin, read what it still writes until its
        stream ends or ``wait_s`` passes, and return the tail of its stderr.

        Docker copies an exec's stdout and stderr into the attach stream separately, so a
        stderr line written before a reply can arrive after it (seen in CI on a loaded machine:
        a bad reply's engine logged with an empty stderr). Read to its end, the private log
        holds the engine's last words, its dying traceback included. The engine is not asked
        anything again, so its stdout is dropped as it comes.
        """
        stream = self._stream
        if not self.closed and not stream.closed:
            with suppress(OSError):
                stream.sock.shutdown(socket.SHUT_WR)
            deadline = time.perf_counter() + wait_s
            with suppress(TimeoutError, InfrastructureFault):
                while not stream.closed:
                    stream.pump(deadline)
                    stream.stdout.clear()
        return self.stderr_tail

    def close(self, wait_s: float = 5.0, grace_s: float = 0.5) -> None:
        """End the engine: its connection is hung up (its stdin ends, and nothing more of its
        output is read); one still running ``grace_s`` later is killed
        with its children; wait up to ``wait_s`` in all for it to exit.

        The wait matters: the cgroup freezer gives up ("unable to freeze") on a process that is
        still exiting, and the next B=1 pair freezes this container as soon as it starts. The
        kill matters too: a hung engine ignores EOF, and waiting the whole ``wait_s`` for it
        cost every timeout 5 s, twice with its retry (measured: 10 of a hang's 22 s). Nothing
        more is read from a closed engine, so nothing is lost. Closing a closed engine does
        nothing.
        """
        if self.closed:
            return
        self.closed = True
        self.hang_up()
        self._stream.sock.close()
        with suppress(Exception):
            self._io.close()
        start = time.monotonic()
        killed = False
        with suppress(Exception):
            while self.container.client.api.exec_inspect(self.exec_id).get("Running"):
                waited = time.monotonic() - start
                if waited > wait_s:
                    break  # it survived a kill: it stays, frozen with its container
                if waited > grace_s and not killed:
                    killed = True
                    self.kill()
                time.sleep(0.02)

    def hang_up(self) -> None:
        """End the engine's input and the daemon's copy of its output (``_Stream.hang_up``:
        why both). Safe to call more than once, and after :meth:`close`."""
        self._stream.hang_up()

    def kill(self) -> bool:
        """SIGKILL the engine process and its descendants, from inside its container (as the
        container's user, so the judge needs no privilege over them). False when its pid could
        not be found (it already exited, or the judge cannot read the host's /proc), or its
        container is frozen (a command run in it would wait, frozen too)."""
        if self.container.paused:
            return False
        api = self.container.client.api
        try:
            host_pid = int(api.exec_inspect(self.exec_id).get("Pid") or 0)
            status = Path(f"/proc/{host_pid}/status").read_text() if host_pid else ""
        except (OSError, ValueError, docker.errors.APIError):
            return False
        ns_pids = [line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")]
        if not ns_pids or not ns_pids[0]:
            return False
        python = self.container.python or "python3"
        self.container.run([python, "-I", "-c", _KILL_TREE, ns_pids[0][-1]], timeout=10)
        return True


def find_cgroup_freezer(client: Any, container_id: str) -> tuple[Path, str, str, Path, str] | None:
    """The freezer of a container's cgroup as ``(file to write, freeze word, thaw word, file
    to poll, line that says frozen)``: cgroup v1's ``freezer.state`` or v2's ``cgroup.freeze``
    (with ``cgroup.events``), found from its main process's ``/proc/PID/cgroup`` or Docker's
    usual paths; None when none is there and writable by the judge (then the API pauses)."""
    paths: list[tuple[str, str]] = []  # (version, cgroup folder)
    with suppress(Exception):
        pid = client.api.inspect_container(container_id)["State"].get("Pid") or 0
        if pid:
            for entry in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                _, controllers, path = entry.split(":", 2)
                if "freezer" in controllers.split(","):
                    paths.append(("v1", f"/sys/fs/cgroup/freezer{path}"))
                elif controllers == "":
                    paths.append(("v2", f"/sys/fs/cgroup{path}"))
    paths += [
        ("v1", f"/sys/fs/cgroup/freezer/docker/{container_id}"),
        ("v1", f"/sys/fs/cgroup/freezer/system.slice/docker-{container_id}.scope"),
        ("v2", f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
        ("v2", f"/sys/fs/cgroup/docker/{container_id}"),
    ]
    for version, folder in paths:
        base = Path(folder)
        if version == "v1":
            target, events = base / "freezer.state", base / "freezer.state"
            found = (target, "FROZEN", "THAWED", events, "FROZEN")
        else:
            target, events = base / "cgroup.freeze", base / "cgroup.events"
            found = (target, "1", "0", events, "frozen 1")
        # Only a cgroup of this container's own (never the root, which would freeze the host).
        if container_id not in folder or not target.is_file() or not events.is_file():
            continue
        if os.access(target, os.W_OK):
            return found
    return None


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
    python: str = ""  # the sandbox's interpreter, for reading cgroup files from inside
    processes: list[EngineProcess] = field(default_factory=list)
    # "auto": the freezer cgroup when writable, else the Docker API; "api": the API only.
    freezer: str = "auto"
    _freezer_file: tuple[Path, str, str, Path, str] | None = field(default=None, repr=False)
    _freezer_probed: bool = field(default=False, repr=False)

    def engine(self, argv: list[str], label: str) -> EngineProcess:
        process = EngineProcess(self, argv, label)
        self.processes.append(process)
        return process

    def run(
        self, argv: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> tuple[int | None, str]:
        """Run a command to completion; (exit code or None on timeout, combined output tail).
        ``env`` replaces the container's environment for this command."""
        api = self.client.api
        exec_id = api.exec_create(
            self.id,
            argv,
            stdout=True,
            stderr=True,
            workdir=self.workdir,
            environment=self.env if env is None else env,
            user=self.user,
        )["Id"]
        raw = api.exec_start(exec_id, socket=True)
        stream = _Stream(getattr(raw, "_sock", raw))
        deadline = time.perf_counter() + timeout
        try:
            while not stream.closed:
                stream.pump(deadline)
                if len(stream.stdout) > 2 * _STDERR_KEEP:  # only the tail is reported
                    del stream.stdout[:-_STDERR_KEEP]
        except TimeoutError:
            return None, bytes(stream.stderr[-2000:]).decode("utf-8", "replace")
        finally:
            stream.hang_up()  # a command left running at its timeout may still be writing
            stream.sock.close()
        code = api.exec_inspect(exec_id).get("ExitCode")
        out = (bytes(stream.stdout[-2000:]) + bytes(stream.stderr[-2000:])).decode(
            "utf-8", "replace"
        )
        return code, out

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Freeze every process of this container for the duration of the block.

        Through the container's own freezer cgroup where the judge can write it (~2 ms a
        freeze/thaw pair here, against ~33-50 ms for the Docker API's pause, which does the
        same through the daemon and runc), else through the API (``freezer="api"`` always).
        """
        if self.freezer != "api" and self._cgroup_freezer() is not None:
            self._freeze_cgroup()
            self.paused = True
            try:
                yield
            finally:
                assert self._freezer_file is not None
                self._freezer_file[0].write_text(self._freezer_file[2])
                self.paused = False
            return
        delay = 0.05
        for attempt in range(12):
            try:
                self.client.api.pause(self.id)
                break
            except docker.errors.APIError as exc:
                # runc's cgroup freeze gives up ("unable to freeze") while a process is still
                # exiting (a closed engine's teardown on a loaded machine): it clears in moments.
                if "unable to freeze" not in str(exc):
                    raise
                if attempt == 11:  # ~10 s: the machine's fault, never the candidate's verdict
                    raise InfrastructureFault(
                        f"could not freeze the {self.name} sandbox: {exc}"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.paused = True
        try:
            yield
        finally:
            self.client.api.unpause(self.id)
            self.paused = False

    def _cgroup_freezer(self) -> tuple[Path, str, str, Path, str] | None:
        """(file to write, freeze word, thaw word, file to poll, frozen line) of this
        container's freezer cgroup, when the judge may write it; found once, then kept."""
        if self._freezer_file is None and not self._freezer_probed:
            self._freezer_probed = True
            self._freezer_file = find_cgroup_freezer(self.client, self.id)
        return self._freezer_file

    def _freeze_cgroup(self) -> None:
        """Write the freeze word and poll until every task is frozen, as runc does: a task
        still exiting can hold the cgroup in FREEZING, so thaw, back off and retry."""
        assert self._freezer_file is not None
        target, freeze, thaw, state, frozen = self._freezer_file
        delay = 0.05
        for attempt in range(12):
            target.write_text(freeze)
            deadline = time.perf_counter() + 1.0
            while time.perf_counter() < deadline:
                if frozen in state.read_text().split("\n"):
                    return
                time.sleep(0.0005)
            target.write_text(thaw)
            if attempt == 11:  # the machine's fault, never the candidate's verdict
                raise InfrastructureFault(f"could not freeze the {self.name} sandbox's cgroup")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def oom_kills(self) -> int | None:
        """How many processes the kernel's OOM killer has killed in this container's memory
        cgroup (None when no cgroup file could be read).

        Docker's ``OOMKilled`` flag is set only when the container's main process dies; an
        engine is an exec'd process, so its OOM kill shows only in the cgroup's own counter:
        ``memory.events`` (cgroup v2) or ``memory.oom_control`` (v1), both ``oom_kill N``.
        """
        for text in self._memory_events():
            found = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
            if found:
                return int(found.group(1))
        return None

    def _memory_events(self) -> Iterator[str]:
        """The texts of this container's cgroup memory event files, host side first."""
        candidates: list[Path] = []
        with suppress(Exception):
            pid = self.client.api.inspect_container(self.id)["State"].get("Pid") or 0
            if pid:
                for entry in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                    _, controllers, path = entry.split(":", 2)
                    if controllers == "":
                        candidates.append(Path(f"/sys/fs/cgroup{path}/memory.events"))
                    elif "memory" in controllers.split(","):
                        candidates.append(Path(f"/sys/fs/cgroup/memory{path}/memory.oom_control"))
        cid = self.id
        candidates += [
            Path(f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control"),
            Path(f"/sys/fs/cgroup/memory/system.slice/docker-{cid}.scope/memory.oom_control"),
            Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events"),
            Path(f"/sys/fs/cgroup/docker/{cid}/memory.events"),
        ]
        for path in candidates:
            with suppress(OSError):
                yield path.read_text()
        if self.python and not self.paused:
            # The judge may not share the daemon's /sys (a remote engine): ask from inside,
            # where the container's own cgroup is mounted at the root of /sys/fs/cgroup.
            script = (
                "import contextlib\n"
                "for p in ('/sys/fs/cgroup/memory.events',"
                " '/sys/fs/cgroup/memory/memory.oom_control'):\n"
                "    with contextlib.suppress(OSError): print(open(p).read())"
            )
            with suppress(Exception):
                code, out = self.run([self.python, "-I", "-c", script], timeout=20)
                if code == 0:
                    yield out

    def oom_killed(self) -> bool:
        """Whether the OOM killer has killed anything in this container (its cgroup's
        counter, or Docker's flag for the main process)."""
        if self.oom_kills():
            return True
        try:
            return bool(self.client.api.inspect_container(self.id)["State"].get("OOMKilled"))
        except Exception:
            return False


class Sandbox:
    """The containers of one evaluation; removed on close, whatever happened.

    ``runtime`` is the task's image and assets (:func:`isolation.taskenv.task_runtime`); without
    it the containers run ``cfg.image`` and see no assets. ``freezer`` is how its containers
    freeze (:meth:`SandboxContainer.frozen`).
    """

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
        self.containers: list[SandboxContainer] = []
        try:
            self.client = docker_client()
        except Exception as exc:
            raise InfrastructureFault(str(exc)) from exc

    def container_env(self) -> dict[str, str]:
        """The environment every command of a sandbox container gets."""
        env = dict(self.cfg.env)
        for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            if name in os.environ:  # older OpenBLAS builds miscompute without them here
                env[name] = os.environ[name]
        env.update(self.runtime.env())
        return env

    def container_options(self, role: str, tree: Path) -> dict[str, Any]:
        """docker-py ``containers.run`` keyword arguments for the ``role`` container (no
        engine needed: the device, mounts and limits are checked by unit tests)."""
        import docker

        workdir = f"/work/{role}"
        volumes: dict[str, dict[str, str]] = {}
        if self.cfg.mount_host_python:
            volumes.update(host_python_mounts())
        volumes.update(self.runtime.volumes())
        volumes[str(tree)] = {"bind": workdir, "mode": "ro"}
        device_requests = []
        if self.device.startswith(("gpu", "cuda")):
            index = self.device.partition(":")[2] or "0"
            device_requests.append(
                docker.types.DeviceRequest(device_ids=[index], capabilities=[["gpu"]])
            )
        return dict(
            name=f"swarmlab-judge-{self.tag}-{role}",
            detach=True,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            tmpfs={
                "/tmp": "rw,nosuid,nodev,size=64m",
                # The one writable, executable place: a build's outputs, gone with the container.
                BUILD_DIR: f"rw,nosuid,nodev,exec,size={self.cfg.scratch_mb}m,mode=1777",
            },
            user=SANDBOX_USER,
            cpuset_cpus=self.cpuset,
            mem_limit=self.cfg.memory,
            memswap_limit=self.cfg.memory,
            pids_limit=self.cfg.pids_limit,
            volumes=volumes,
            working_dir=workdir,
            environment=self.container_env(),
            labels={SANDBOX_LABEL: self.owner, DEVICE_LABEL: self.device},
            device_requests=device_requests or None,
        )

    def container(self, role: str, tree: Path) -> SandboxContainer:
        """Start a container with ``tree`` mounted read-only at ``/work/<role>``."""
        import docker

        options = self.container_options(role, tree)
        name = options["name"]
        try:
            stale = self.client.containers.list(all=True, filters={"name": name})
            for old in stale:
                old.remove(force=True)
            # Never pulled: a missing base image is made, any other is one line (ImageMissing).
            created = run_container(self.client, self.image, ["sleep", "infinity"], **options)
        except ImageMissing as exc:
            raise InfrastructureFault(str(exc)) from exc
        except docker.errors.DockerException as exc:
            raise InfrastructureFault(f"could not start the {role} sandbox: {exc}") from exc
        box = SandboxContainer(
            self.client,
            created.id,
            name,
            options["working_dir"],
            options["environment"],
            SANDBOX_USER,
            python=self.python,
            freezer=self.freezer,
        )
        self.containers.append(box)
        return box

    def serve_argv(self, serve: list[str]) -> list[str]:
        """A task's ``serve`` or ``build`` argv with ``{python}`` (the sandbox's interpreter)
        and ``{build}`` (the build folder) filled in."""
        return [
            part.replace("{python}", self.python).replace("{build}", BUILD_DIR) for part in serve
        ]

    def build(
        self, box: SandboxContainer, argv: list[str], timeout: float
    ) -> tuple[int | None, str]:
        """Run the task's ``build`` argv in ``box`` (TMPDIR in the build folder); (exit code or
        None on timeout, output tail, with :data:`BUILD_HINT` added when it hit the read-only
        tree)."""
        code, output = box.run(self.serve_argv(argv), timeout, env=build_env(box.env))
        if code not in (0, None) and read_only_failure(output):
            output = f"{output.rstrip()}\n{BUILD_HINT}"
        return code, output

    def close(self) -> None:
        """Remove every container of this sandbox, hanging up its engines first (a removal
        would wait on the daemon's copy of output nobody reads: ``_Stream.hang_up``)."""
        for box in self.containers:
            for process in box.processes:
                process.hang_up()
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
