"""Prompt templates for the seats of an arm: one per role, versioned, rendered per seat.

The templates live beside this module (``prompts/<role>.md``). Every rendered prompt carries
the sha256 of its text and of its template, recorded per seat in the run's events: arms whose
prompts differ beyond what the role and the seat's direction put in are flagged by the report
(an asymmetric comparison).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

# Bump when a template's wording changes, so runs can be grouped by the instructions they had.
PROMPT_VERSION = "1"
TEMPLATES = Path(__file__).resolve().parent / "prompts"
ROLES = ("worker", "critic")
# What a seat whose CLI exited before the deadline is sent when the CLI resumes its session.
KEEP_GOING = "keep_going"


@dataclass(frozen=True)
class RenderedPrompt:
    """A seat's prompt and the hashes that identify it."""

    role: str
    text: str
    sha256: str
    template_sha256: str
    version: str = PROMPT_VERSION


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def render_prompt(
    role: str,
    agent: str,
    deadline: float,
    direction: str = "",
    solo: bool = False,
    direction_text: str = "",
) -> RenderedPrompt:
    """The prompt for one seat.

    Args:
        role: ``worker`` or ``critic``.
        agent: The seat's name (how the board and the judge know it).
        deadline: The run's deadline, seconds since the epoch.
        direction: A worker's starting direction (empty: none).
        solo: True when the worker has no teammates (the board is then its own log).
        direction_text: What the direction means, from the task's ``directions`` (empty:
            the name alone).

    Returns:
        The rendered text and its hashes.

    Raises:
        ValueError: an unknown role.
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r}: use one of {', '.join(ROLES)}")
    template = (TEMPLATES / f"{role}.md").read_text()
    local = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(deadline))
    utc = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))
    text = template.format(
        agent=agent,
        role_words="coding agent working alone" if solo else "coding agent on a team",
        deadline=local,
        deadline_utc=utc,
        direction_line=_direction_line(direction, direction_text),
        board_words=(
            "You are alone: the board is your own public log."
            if solo
            else "Read it often: build on your teammates' PASSes, avoid their dead ends."
        ),
    )
    return RenderedPrompt(role, text, _sha(text), _sha(template))


def _direction_line(direction: str, text: str) -> str:
    if not direction:
        return ""
    what = f"{direction} ({text.strip().rstrip('.')})" if text.strip() else direction
    return f"\nStart with this direction: {what}. It is a starting point, not a fence.\n"


def _deadline_words(deadline: float) -> dict[str, str]:
    return {
        "deadline": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(deadline)),
        "deadline_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline)),
    }


def render_keep_going(deadline: float) -> RenderedPrompt:
    """The message a resumed seat gets as its next turn (the same for every role and seat).

    Args:
        deadline: The run's deadline, seconds since the epoch.

    Returns:
        The rendered text and its hashes (role ``keep_going``).
    """
    template = (TEMPLATES / f"{KEEP_GOING}.md").read_text()
    text = template.format(**_deadline_words(deadline)).strip()
    return RenderedPrompt(KEEP_GOING, text, _sha(text), _sha(template))
