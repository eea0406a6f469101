"""The server kind's processes: the task's server in its sandbox, and the judge's load
generator in a sidecar that shares only that sandbox's network namespace.

Why a sidecar: a sandbox has ``network_mode: none``, so its server is reachable on its own
loopback only. The load generator must reach it without the candidate getting any network
and without the candidate being able to touch the judge's client. A container started with
``network_mode: container:<sandbox id>`` joins exactly that namespace (127.0.0.1 is the
server's loopback, and there is still no route out), while its file system, process and IPC
namespaces are its own: the candidate's processes cannot see, signal or trace the load
generator, nor read its code or replies. The sidecar runs the judge's sandbox image and
interpreter, read-only, with no capabilities, the judge's CPU, and
:mod:`judge.kinds.server.load` and h11's package (its HTTP parser) mounted read-only
(:meth:`judge.sandbox.base.Sandbox.sidecar`); the judge speaks to it over its stdin/stdout
(``docker exec`` in the Docker sandbox), one JSON line each way, and its clock is the one that
measures.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from judge.sandbox import Container, InfrastructureFault
from judge.sandbox.base import Sandbox

LOADGEN = Path(__file__).with_name("load.py")
LOADGEN_DIR = "/opt/swarmlab-loadgen"


def h11_package() -> Path:
    """The folder of the h11 package the judge runs with (a dependency of swarmlab's): the
    load generator imports it in its sidecar from ``lib/h11`` beside it, whatever the
    sidecar's interpreter has installed."""
    import h11

    return Path(h11.__file__).resolve().parent


MAX_REPLY = 64 << 20


class ServerProcess:
    """The task's ``serve`` command running in a sandbox container; its output is drained in a
    thread (a server that logs every request would otherwise block on a full pipe) and only
    a tail is kept (the private log's)."""

    def __init__(self, box: Container, argv: list[str], env: dict[str, str], label: str) -> None:
        self.box = box
        self.label = label
        self._process = box.attach(argv, stdin=False, env={**box.env, **env})
        self._stream = self._process.stream
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with suppress(Exception):
            while not self._stream.closed:
                self._stream.pump(None)
                if len(self._stream.stdout) > 128 << 10:
                    del self._stream.stdout[: -(64 << 10)]

    @property
    def output_tail(self) -> str:
        """The last few KiB of the server's stdout and stderr (private: may hold hidden data)."""
        out = bytes(self._stream.stdout[-2048:]) + bytes(self._stream.stderr[-2048:])
        return out.decode("utf-8", "replace")

    def running(self) -> bool:
        """Whether the serve process is still alive (the sandbox's view of it)."""
        try:
            return self._process.running()
        except Exception as exc:
            raise InfrastructureFault(f"could not inspect the {self.label} server: {exc}") from exc

    def hang_up(self) -> None:
        """End the server's input and the judge's reading of its output (``_Stream.hang_up``);
        its container stays for the teardown. Safe to repeat (the watchdog's, from its own
        thread)."""
        self._stream.hang_up()

    def close(self) -> None:
        """Drop the judge's end; the process goes with its container. Hung up first: a
        server logging on once the drain stops would otherwise hold up its container's removal
        (measured: 22 s; ``_Stream.hang_up``)."""
        self._process.close()


class LoadGen:
    """The judge's load generator in a sidecar of ``box`` (see the module's docstring)."""

    def __init__(self, sandbox: Sandbox, box: Container, role: str) -> None:
        self.role = role
        # The interpreter, the load generator's one file and its HTTP parser: no tree, no
        # assets, nothing else. Removed with the evaluation's other containers.
        self.box = sandbox.sidecar(
            f"{role}-loadgen",
            box,
            {
                str(LOADGEN): f"{LOADGEN_DIR}/server_load.py",
                str(h11_package()): f"{LOADGEN_DIR}/lib/h11",
            },
            LOADGEN_DIR,
            f"{role} load generator",
        )
        # No environment of its own (env=None), as the load generator always ran.
        self._process = self.box.attach(
            [sandbox.python, "-I", "-B", f"{LOADGEN_DIR}/server_load.py"], stdin=True, env=None
        )
        self._stream = self._process.stream

    def call(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one command and return its reply. The load generator is the judge's own code:
        any failure to answer is the judge's fault (InfrastructureFault)."""
        try:
            deadline = time.perf_counter() + timeout
            self._stream.send((json.dumps(command) + "\n").encode(), deadline)
            line = self._stream.read_line(deadline, limit=MAX_REPLY)
            reply = json.loads(line)
        except (OSError, TimeoutError, EOFError, ValueError) as exc:
            tail = bytes(self._stream.stderr[-2000:]).decode("utf-8", "replace")
            raise self.fault(f"failed ({type(exc).__name__})", tail) from None
        if not isinstance(reply, dict):
            raise self.fault("answered something else", repr(reply)[:2000])
        if reply.get("kind") == "judge":
            raise self.fault(f"failed ({reply.get('error', 'error')})", reply.get("detail"))
        return reply

    def fault(self, what: str, private: object) -> InfrastructureFault:
        """The judge's fault, in judge-made words: what the load generator said (a traceback,
        an exception's text, which may quote a server's reply) goes to ``private``, which the
        evaluation writes to its private log only."""
        fault = InfrastructureFault(f"the {self.role} load generator {what}")
        fault.private = private  # type: ignore[attr-defined]
        return fault

    def hang_up(self) -> None:
        """End the load generator's input and the judge's reading of its replies: a call
        blocked on it fails at once (``_Stream.hang_up``). Safe to repeat."""
        self._stream.hang_up()

    def close(self) -> None:
        self._process.close()
