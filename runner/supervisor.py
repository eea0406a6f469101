"""Keeps every agent of a run working until the deadline.

An agent that exits before the deadline is restarted with a "keep going" signal (the event is
recorded): hitting the target, disproving a direction or "pausing for review" are not reasons
to stop. At the deadline, or on Ctrl-C/SIGTERM, every agent is stopped.

A seat of a vendor's CLI (its spec names ``records``) is resumed rather than restarted: once its
session record exists, the restart runs ``spec.resume_command`` (the CLI's own resume with the
keep-going message), and the ``restarted`` event names the ``mechanism``. A CLI that keeps
exiting at once (within :data:`QUICK_EXIT_S` of its start: a key refused, an endpoint down, a
model that stops at once) is restarted after a pause that doubles each time, up to
:data:`MAX_BACKOFF_S` (``backoff_s`` and ``ran_s`` in the event: the time lost is on record),
without holding up the rest of the run. Each start's output
(the CLI's JSON event stream) is kept in ``arms/<arm>/agents/<seat>/output/``; the retries it
reports (each CLI module's :meth:`~agents.clis.base.Client.count_retries`: Claude Code's
``api_retry`` events, Codex's "Reconnecting" errors, mini-swe-agent's tenacity lines) become an
``api_retries`` event. (Every retry, announced or not, is also a call through the model proxy:
``isolation.model_proxy``, which is what the lost time is computed from.) The CLI's token usage
is read from its session records into the ``tokens`` table every
:attr:`Supervisor.tokens_every_s` and once more after the agents stop, replacing the agent's
rows each time.

A seat whose token or cost budget is spent (``isolation.spending``, counted at the model proxy)
is never restarted: once it asks the proxy for more (and gets its vendor's quota error), exits,
or :data:`BUDGET_GRACE_S` after its budget ran out, it is stopped and a ``budget_spent`` event
names the budget (``budget``, ``spent``, ``limit``, ``scope``). Until then it may still act on
the last reply it got (run the tool call, ``submit`` the commit). :meth:`Supervisor.all_spent`
says when every seat is done so.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.clis import get_cli
from agents.usage import UsageByModel
from analysis.tokens import TokenRecordError, read_files
from isolation.backends import AgentBackend, AgentHandle, AgentSpec
from isolation.spending import SpendingLedger
from runner.events import EventLog
from runner.trajectories import collect_seat, last_step

if TYPE_CHECKING:
    from agents.trajectory import SeatTrajectory

# A CLI that fails within this many seconds of its start is backed off before the next one.
QUICK_EXIT_S = 30.0
MAX_BACKOFF_S = 120.0
# A seat whose budget is spent may finish acting on its last reply for this long at most.
BUDGET_GRACE_S = 120.0
OUTPUT_LINES = 1_000_000
#: What ``agent.on_stall`` may say: resume the seat with the keep-going message, or only record.
STALL_ACTIONS = ("nudge", "record")
# A pending tool call running one of these is a build or a test, not a stall.
BUILDING = re.compile(
    r"\b(make|cmake|ninja|pytest|cargo|go (build|test)|npm (run|test)|gcc|cc|clang|tox|"
    r"python -m (pytest|unittest)|bench|measure|submit)\b"
)


@dataclass
class RunningSeat:
    """One seat's agent under supervision (``isolation.workspace.Seat`` is the seat itself):
    what was started, and how often it had to be restarted."""

    spec: AgentSpec
    handle: AgentHandle | None = None
    restarts: int = 0
    started_at: float = 0.0
    exits: list[int | None] = field(default_factory=list)
    # A CLI seat that exited and waits for its restart: when, and what its event will say.
    restart_at: float | None = None
    restart_detail: dict[str, Any] = field(default_factory=dict)
    quick_exits: int = 0
    # Why the seat was ended for good: its budget_spent event's detail (None: it was not).
    spent: dict[str, Any] | None = None
    # The activity time a stall was last reported at (one ``stalled`` event per stretch).
    stalled_since: float | None = None
    # Its last reading (runner.trajectories): what it was last doing.
    trajectory: SeatTrajectory | None = None


def has_records(spec: AgentSpec) -> bool:
    """True once the CLI wrote a session record (something to resume)."""
    root = Path(spec.records) if spec.records else None
    return bool(
        root and root.is_dir() and any(p.suffix in (".json", ".jsonl") for p in root.rglob("*"))
    )


def count_retries(output: str, records_format: str) -> dict[str, Any]:
    """The API retries a CLI reported in one start's output, as its CLI module reads them
    (``agents.clis``: the record format is the CLI's name): ``count``, ``statuses`` (status:
    count) and, where the CLI announces its delays, ``waited_s``. Nothing for a seat that is
    no registered CLI."""
    try:
        cli = get_cli(records_format) if records_format else None
    except ValueError:
        cli = None
    return cli.count_retries(output) if cli is not None else {"count": 0, "statuses": {}}


class Supervisor:
    """Starts, watches and stops the agents of a run."""

    def __init__(
        self,
        backend: AgentBackend,
        events: EventLog,
        specs: list[AgentSpec],
        *,
        min_restart_interval_s: float = 2.0,
        tokens_every_s: float = 60.0,
        budgets: SpendingLedger | None = None,
        stall_s: float = 600.0,
        on_stall: str = "nudge",
    ) -> None:
        if on_stall not in STALL_ACTIONS:
            raise ValueError(f"agent.on_stall={on_stall!r}: expected one of {STALL_ACTIONS}")
        self.stall_s = stall_s
        self.on_stall = on_stall
        # Stalls are looked for this often (each look stats the seats' notes folders).
        self.stall_every_s = min(15.0, max(stall_s / 5, 0.5))
        self._stalls_at = time.time()
        self.backend = backend
        self.budgets = budgets
        self.events = events
        self.seats = {(s.arm, s.agent): RunningSeat(s) for s in specs}
        self.min_restart_interval_s = min_restart_interval_s
        self.tokens_every_s = tokens_every_s
        self._tokens_at = time.time()

    def start_all(self, event: str = "started") -> None:
        for seat in self.seats.values():
            why = self._spent(seat)
            if why is not None:  # a resumed run's seat that had spent its budget before
                spec = seat.spec
                told = self.events.table(
                    "lifecycle",
                    "WHERE event = 'budget_spent' AND arm = ? AND agent = ?",
                    (spec.arm, spec.agent),
                )
                if told:  # recorded before the runner restarted: once is enough
                    seat.spent = {k: v for k, v in why.items() if k != "at"}
                else:
                    self._record_spent(seat, why)
                continue
            self._start(seat, event)

    def _spent(self, seat: RunningSeat) -> dict[str, Any] | None:
        if self.budgets is None:
            return None
        return self.budgets.seat_spent(seat.spec.arm, seat.spec.agent)

    def _record_spent(self, seat: RunningSeat, why: dict[str, Any]) -> None:
        seat.spent = {k: v for k, v in why.items() if k != "at"}
        spec = seat.spec
        self.events.lifecycle(
            spec.arm, spec.agent, "budget_spent", restarts=seat.restarts, **seat.spent
        )

    def _end_if_spent(self, seat: RunningSeat) -> bool:
        """Stop a seat whose budget is spent once it asked for more, exited, or had
        :data:`BUDGET_GRACE_S`; True when it is done for good (never restarted)."""
        if seat.spent is not None:
            return True
        why = self._spent(seat)
        handle = seat.handle
        if why is None or handle is None or self.budgets is None:
            return False
        spec = seat.spec
        asked = self.budgets.refused(spec.arm, spec.agent)
        overdue = time.time() - float(why.get("at") or 0) >= BUDGET_GRACE_S
        running = seat.restart_at is None and handle.running()
        if running and not (asked or overdue):
            return False  # still acting on its last reply: it ends when it asks for more
        if running:
            if spec.records:
                self._keep_output(seat, handle)
            handle.stop(timeout=5)
        elif seat.restart_at is None:  # it exited on its own
            code = handle.exit_code()
            seat.exits.append(code)
            self.events.lifecycle(
                spec.arm, spec.agent, "exited", code=code, log_tail=handle.logs_tail(20)
            )
            if spec.records:
                self._keep_output(seat, handle)
            handle.stop(timeout=1)
        seat.handle, seat.restart_at = None, None
        self._record_spent(seat, why)
        return True

    def all_spent(self) -> bool:
        """True when every seat was ended by its budget (never without budgets)."""
        return bool(self.seats) and all(s.spent is not None for s in self.seats.values())

    def spent_seats(self) -> set[tuple[str, str]]:
        """The (arm, seat) pairs ended by their token or cost budget."""
        return {key for key, seat in self.seats.items() if seat.spent is not None}

    def _start(self, seat: RunningSeat, event: str, **detail: Any) -> None:
        spec = seat.spec
        if seat.restarts:
            env = {**spec.env, "SWARMLAB_KEEP_GOING": "1", "SWARMLAB_RESTARTS": str(seat.restarts)}
            if spec.resume_command and has_records(spec):
                spec = replace(spec, command=spec.resume_command, env=env)
                detail["mechanism"] = spec.resume_mechanism
            elif spec.records:
                spec = replace(spec, env=env)
                detail["mechanism"] = (
                    "fresh start (no session record to resume yet)"
                    if spec.resume_command
                    else "fresh start (agent.resume=false)"
                )
            else:
                spec = replace(spec, env=env)
        seat.handle = self.backend.start(spec)
        seat.started_at = time.time()
        self.events.lifecycle(spec.arm, spec.agent, event, restarts=seat.restarts, **detail)

    def check(self) -> int:
        """Restart every agent that exited (a CLI seat once its pause is over); read the CLIs'
        token records when they are due. Returns how many were restarted."""
        restarted = 0
        now = time.time()
        for seat in self.seats.values():
            if self._end_if_spent(seat):
                continue
            handle = seat.handle
            if handle is None:
                continue
            if seat.restart_at is None:
                if handle.running():
                    continue
                code = handle.exit_code()
                seat.exits.append(code)
                spec = seat.spec
                self.events.lifecycle(
                    spec.arm, spec.agent, "exited", code=code, log_tail=handle.logs_tail(20)
                )
                if spec.records:
                    self._plan_restart(seat, handle, code)
                    continue
                # An agent that dies at once is not restarted in a tight loop.
                wait = self.min_restart_interval_s - (time.time() - seat.started_at)
                if wait > 0:
                    time.sleep(wait)
                handle.stop(timeout=1)
                seat.restarts += 1
                self._start(seat, "restarted", reason="exited before the deadline", code=code)
                restarted += 1
            elif now >= seat.restart_at:
                handle.stop(timeout=1)
                seat.restarts += 1
                detail, seat.restart_at, seat.restart_detail = seat.restart_detail, None, {}
                self._start(seat, "restarted", **detail)
                restarted += 1
        if self.tokens_every_s > 0 and now - self._tokens_at >= self.tokens_every_s:
            self.collect_tokens()
        if self.stall_s > 0 and now - self._stalls_at >= self.stall_every_s:
            self._stalls_at = now
            restarted += self.check_stalls(now)
        return restarted

    # -- stalls ----------------------------------------------------------------------------

    def last_activity(self, seat: RunningSeat) -> float:
        """When the seat last did something: its start, a change under its notes folder (its
        CLI's session records, a scripted agent's notes and state), a call through the model
        proxy, a submission or a board post."""
        spec = seat.spec
        times = [seat.started_at]
        notes = Path(spec.workspace.notes)
        for path in notes.rglob("*"):
            try:
                if path.is_file():
                    times.append(path.stat().st_mtime)
            except OSError:
                continue  # removed while looked at: the others still say
        with self.events.connect() as db:
            for sql in (
                "SELECT max(finished_at) FROM model_calls WHERE arm = ? AND agent = ?",
                "SELECT max(at) FROM submissions WHERE arm = ? AND agent = ?",
                "SELECT max(at) FROM messages WHERE arm = ? AND author = ?",
            ):
                found = db.execute(sql, (spec.arm, spec.agent)).fetchone()[0]
                if found is not None:
                    times.append(float(found))
        return max(times)

    def _waiting_for_judge(self, spec: AgentSpec) -> bool:
        with self.events.connect() as db:
            row = db.execute(
                "SELECT count(*) FROM submissions s LEFT JOIN evaluations e ON e.job_id = s.job_id"
                " WHERE s.arm = ? AND s.agent = ? AND e.job_id IS NULL",
                (spec.arm, spec.agent),
            ).fetchone()
        return bool(row[0])

    def _building(self, seat: RunningSeat) -> str | None:
        """The build or test the seat's last tool call started and still runs, or None."""
        trajectory = seat.trajectory
        if trajectory is None:
            return None
        steps = trajectory.document.get("steps") or []
        for step in reversed(steps):
            pending = (step.get("extra") or {}).get("pending_calls")
            if step.get("source") != "agent" or not step.get("tool_calls"):
                continue
            if not pending:
                return None
            for call in step["tool_calls"]:
                text = json.dumps(call.get("arguments"))
                if call.get("tool_call_id") in pending and BUILDING.search(text):
                    return text[:200]
            return None
        return None

    def check_stalls(self, now: float | None = None) -> int:
        """Find running seats that did nothing for ``stall_s``: record a ``stalled`` event
        (with what the seat was last doing) and, with ``on_stall=nudge``, resume it with the
        keep-going message (a ``restarted`` event, reason ``stalled``). A seat waiting for the
        judge's verdict on its submission, or running a build or test it started, is not
        stalled. Returns how many seats were nudged."""
        now = time.time() if now is None else now
        nudged = 0
        for seat in self.seats.values():
            handle = seat.handle
            if handle is None or seat.restart_at is not None or seat.spent is not None:
                continue
            activity = self.last_activity(seat)
            if now - activity < self.stall_s or seat.stalled_since == activity:
                continue
            spec = seat.spec
            if self._waiting_for_judge(spec):
                continue
            self._trajectory_of(seat)  # what it was last doing, read now
            if self._building(seat) is not None:
                continue
            if not handle.running():
                continue  # it exited: check() restarts it as an exit
            seat.stalled_since = activity
            last = last_step(seat.trajectory) if seat.trajectory is not None else None
            self.events.lifecycle(
                spec.arm,
                spec.agent,
                "stalled",
                idle_s=round(now - activity, 1),
                last_active_at=activity,
                last=last or {},
                action=self.on_stall,
                restarts=seat.restarts,
            )
            if self.on_stall != "nudge":
                continue
            if spec.records:
                self._keep_output(seat, handle)
            handle.stop(timeout=5)
            seat.restarts += 1
            self._start(seat, "restarted", reason="stalled", idle_s=round(now - activity, 1))
            nudged += 1
        return nudged

    def _plan_restart(self, seat: RunningSeat, handle: AgentHandle, code: int | None) -> None:
        """A CLI seat exited: keep its output, record its retries, and set when it restarts."""
        now = time.time()
        ran = now - seat.started_at
        self._keep_output(seat, handle)
        if ran < QUICK_EXIT_S:
            # Each quick exit in a row doubles the pause: a CLI that fails at once (no key,
            # an endpoint down) or a model that stops at once is not called in a tight loop.
            seat.quick_exits += 1
            pause = self.min_restart_interval_s * 2 ** (seat.quick_exits - 1)
            pause = min(pause, MAX_BACKOFF_S)
        else:
            seat.quick_exits = 0
            pause = self.min_restart_interval_s
        seat.restart_at = now + pause
        seat.restart_detail = {
            "reason": "exited before the deadline",
            "code": code,
            "ran_s": round(ran, 1),
            "backoff_s": round(pause, 1),
        }

    def _keep_output(self, seat: RunningSeat, handle: AgentHandle) -> None:
        """Write a CLI's output of this start beside the seat's folders; record its retries."""
        spec = seat.spec
        output = handle.logs_tail(OUTPUT_LINES)
        folder = Path(spec.workspace.root) / "output"
        try:
            folder.mkdir(exist_ok=True)
            (folder / f"start-{seat.restarts:03d}.jsonl").write_text(output)
        except OSError:
            pass
        retries = count_retries(output, spec.records_format)
        if retries["count"]:
            self.events.lifecycle(
                spec.arm,
                spec.agent,
                "api_retries",
                restarts=seat.restarts,
                source=f"{spec.records_format} output",
                **retries,
            )

    def collect_tokens(self, final: bool = False) -> None:
        """Read every CLI seat's session records into the tokens table (one row per model,
        replacing the seat's rows). ``final``: also record a ``tokens`` event per seat (the
        totals, or why there are none)."""
        self._tokens_at = time.time()
        for seat in self.seats.values():
            self._trajectory_of(seat, final)

    def _trajectory_of(self, seat: RunningSeat, final: bool = False) -> None:
        """Read one seat's session records into its tokens rows and its trajectory."""
        spec = seat.spec
        if not spec.records_format:
            self._trajectory(spec, final)  # a scripted seat: its notes log
            return
        try:
            _, files, read = read_files(spec.records, spec.records_format)
        except TokenRecordError as exc:
            if final:
                self.events.lifecycle(
                    spec.arm, spec.agent, "tokens", source=spec.records_format, error=str(exc)
                )
            self._trajectory(spec, final)  # its submissions and posts, if any
            return
        usage = read.usage
        self.events.set_tokens(spec.arm, spec.agent, spec.records_format, usage.values())
        # The trajectory from the same files and the same reading as the tokens rows.
        self._trajectory(spec, final, files, read)
        if final:
            self.events.lifecycle(
                spec.arm,
                spec.agent,
                "tokens",
                source=spec.records_format,
                models=sorted(usage),
                requests=sum(u.requests for u in usage.values()),
                output=sum(u.output for u in usage.values()),
            )

    def _trajectory(
        self,
        spec: AgentSpec,
        final: bool,
        files: list[Path] | None = None,
        usage: UsageByModel | None = None,
    ) -> None:
        """Write the seat's trajectory and steps (runner.trajectories); a failure never stops
        the run (the last one is recorded as a ``trajectory`` event)."""
        try:
            self.seats[(spec.arm, spec.agent)].trajectory = collect_seat(
                self.events, spec, files, usage
            )
        except (OSError, ValueError, sqlite3.Error) as exc:
            if final:
                self.events.lifecycle(spec.arm, spec.agent, "trajectory", error=str(exc))

    def stop_all(self, reason: str, grace_s: Callable[[], float] = lambda: 5.0) -> None:
        """Stop every agent (SIGTERM, then SIGKILL after ``grace_s()`` seconds, asked again
        before each agent: a second Ctrl-C while agents are being stopped shortens the wait of
        the rest) and read the CLIs' token records a last time."""
        for seat in self.seats.values():
            if seat.handle is None:
                continue
            if seat.spec.records and seat.restart_at is None:
                self._keep_output(seat, seat.handle)
            grace = grace_s()
            seat.handle.stop(timeout=grace)
            self.events.lifecycle(
                seat.spec.arm, seat.spec.agent, "stopped", reason=reason, grace_s=grace
            )
            seat.handle = None
            seat.restart_at = None
        self.collect_tokens(final=True)
