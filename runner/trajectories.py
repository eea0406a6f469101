"""Each seat's trajectory, written during the run and once more at its end.

``runner.supervisor`` calls :func:`collect_seat` where it reads the CLIs' token records (every
``tokens_every_s``, and after the agents stop): one reading of the seat's session records
(``analysis.tokens.read_files``) gives both the ``tokens`` rows and the trajectory
(``agents.trajectory``), so the two cannot disagree. What is written, per seat:

- ``arms/<arm>/agents/<seat>/trajectory.json``: ATIF (validated by the ``atif`` models), with
  the seat's submissions and board posts placed at their times; full texts of long messages
  and tool results in ``trajectory/`` beside it.
- the seat's rows of ``events.sqlite``'s ``steps`` table (``runrecord.schema``), replaced whole.

A scripted seat (no session records) gets its trajectory from its notes log (moves and waits),
marked ``scripted``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.scripted.notes import NOTES_FILE
from agents.trajectory import SeatTrajectory, Turn, build, event_turns, record_turns
from agents.trajectory import scripted_turns as notes_turns
from agents.trajectory import write as write_trajectory
from agents.usage import UsageByModel
from isolation.backends import AgentSpec
from runner.events import EventLog


def seat_events(events: EventLog, arm: str, seat: str) -> list[Turn]:
    """The seat's submissions and board posts, as steps."""
    submissions = events.table("submissions", "WHERE arm = ? AND agent = ?", (arm, seat))
    posts = events.table("messages", "WHERE arm = ? AND author = ?", (arm, seat))
    return event_turns(submissions, posts)


def collect_seat(
    events: EventLog,
    spec: AgentSpec,
    files: list[Path] | None = None,
    usage: UsageByModel | None = None,
) -> SeatTrajectory:
    """Build and write one seat's trajectory and its ``steps`` rows.

    Args:
        events: The run's event log.
        spec: The seat's agent spec (its folders, its record format).
        files: The session record files the token reader read (None: a scripted seat, or
            records not written yet).
        usage: What the token reader read from them.

    Returns:
        What was written.
    """
    scripted = not spec.records_format
    if scripted:
        turns = notes_turns(Path(spec.workspace.notes) / NOTES_FILE)
    else:
        turns = record_turns(files or [], spec.records_format)
    turns += seat_events(events, spec.arm, spec.agent)
    name = "scripted" if scripted else spec.records_format
    seat = build(
        turns,
        seat=spec.agent,
        agent_name=name,
        source=name,
        usage=usage,
        scripted=scripted,
    )
    write_trajectory(Path(spec.workspace.root), seat)
    events.replace_steps(spec.arm, spec.agent, seat.rows)
    return seat


def last_step(seat: SeatTrajectory) -> dict[str, Any] | None:
    """The seat's last step of its own (a model reply or tool call, a move), or None."""
    own = [r for r in seat.rows if r["kind"] in ("agent", "tool", "move", "wait")]
    return own[-1] if own else None
