"""An engine process (a task's ``serve`` command) in a Docker sandbox container, spoken to over
the engine protocol with the judge's own clock."""

from __future__ import annotations

import errno
import json
import socket
import time
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker.errors

from judge.protocol import MAX_LINE_BYTES, EngineFailure, Reply, check_reply, parse_line
from judge.sandbox._streams import LineTooLong
from judge.sandbox.base import InfrastructureFault

if TYPE_CHECKING:
    from judge.sandbox.docker import DockerContainer

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


class EngineProcess:
    """One engine process (the task's ``serve`` command) inside a container."""

    def __init__(self, container: DockerContainer, argv: list[str], label: str) -> None:
        self.container = container
        self.label = label
        attached = container.attach(argv, stdin=True, env=container.env)
        self.exec_id = attached.exec_id
        self._io = attached.raw  # closed with the stream's socket in close()
        self._stream = attached.stream
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
            stream.send(line, start + timeout)
        except TimeoutError:
            # An engine that stops reading its stdin is as slow as one that never replies
            # (and charged the same): the request's own limit bounds the send too.
            raise EngineFailure(
                "timeout", f"the engine did not take {op} within {timeout:.1f} s"
            ) from None
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
