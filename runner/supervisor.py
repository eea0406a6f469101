"""Keeps every agent of a run working until the deadline.

An agent that exits before the deadline is restarted with a "keep going" signal (the event is
recorded): hitting the target, disproving a direction or "pausing for review" are not reasons
to stop. At the deadline, or on Ctrl-C/SIGTERM, every agent is stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from isolation.backends import AgentBackend, AgentHandle, AgentSpec
from runner.events import EventLog


@dataclass
class Seat:
    """A running seat: what was started, and how often it had to be restarted."""

    spec: AgentSpec
    handle: AgentHandle | None = None
    restarts: int = 0
    started_at: float = 0.0
    exits: list[int | None] = field(default_factory=list)


class Supervisor:
    """Starts, watches and stops the agents of a run."""

    def __init__(
        self,
        backend: AgentBackend,
        events: EventLog,
        specs: list[AgentSpec],
        *,
        min_restart_interval_s: float = 2.0,
    ) -> None:
        self.backend = backend
        self.events = events
        self.seats = {(s.arm, s.agent): Seat(s) for s in specs}
        self.min_restart_interval_s = min_restart_interval_s

    def start_all(self, event: str = "started") -> None:
        for seat in self.seats.values():
            self._start(seat, event)

    def _start(self, seat: Seat, event: str, **detail: Any) -> None:
        spec = seat.spec
        if seat.restarts:
            env = {**spec.env, "SWARMLAB_KEEP_GOING": "1", "SWARMLAB_RESTARTS": str(seat.restarts)}
            spec = replace(spec, env=env)
        seat.handle = self.backend.start(spec)
        seat.started_at = time.time()
        self.events.lifecycle(spec.arm, spec.agent, event, restarts=seat.restarts, **detail)

    def check(self) -> int:
        """Restart every agent that exited; returns how many were restarted."""
        restarted = 0
        for seat in self.seats.values():
            handle = seat.handle
            if handle is None or handle.running():
                continue
            code = handle.exit_code()
            seat.exits.append(code)
            spec = seat.spec
            self.events.lifecycle(
                spec.arm, spec.agent, "exited", code=code, log_tail=handle.logs_tail(20)
            )
            # An agent that dies at once is not restarted in a tight loop.
            wait = self.min_restart_interval_s - (time.time() - seat.started_at)
            if wait > 0:
                time.sleep(wait)
            handle.stop(timeout=1)
            seat.restarts += 1
            self._start(seat, "restarted", reason="exited before the deadline", code=code)
            restarted += 1
        return restarted

    def stop_all(self, reason: str) -> None:
        for seat in self.seats.values():
            if seat.handle is None:
                continue
            seat.handle.stop(timeout=5)
            self.events.lifecycle(seat.spec.arm, seat.spec.agent, "stopped", reason=reason)
            seat.handle = None
