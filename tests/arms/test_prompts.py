"""Seat prompts: the seed's lessons are written in, and identical seats get identical hashes."""

from __future__ import annotations

import pytest

from arms import render_prompt

DEADLINE = 1_800_000_000.0


@pytest.mark.parametrize("role", ["worker", "critic"])
def test_every_prompt_says_the_deadline_ends_the_run_not_the_agent(role: str) -> None:
    text = render_prompt(role, "a1", DEADLINE).text.lower()
    assert "not a reason to stop" in text
    assert "for review" in text and "before the deadline" in text
    assert "2027-01-15 08:00:00 utc" in text  # the deadline, in words a model can read


def test_a_worker_gets_its_direction_and_the_tools() -> None:
    text = render_prompt("worker", "w1", DEADLINE, direction="moe").text
    assert "direction: moe" in text
    for tool in ("submit", "verdicts", "board read", "/work/submissions.git"):
        assert tool in text


def test_hashes_identify_the_text() -> None:
    a = render_prompt("worker", "w1", DEADLINE, direction="moe")
    b = render_prompt("worker", "w1", DEADLINE, direction="moe")
    c = render_prompt("worker", "w1", DEADLINE, direction="head")
    assert a.sha256 == b.sha256 != c.sha256
    # Same template whatever the seat: the report compares templates across arms.
    assert a.template_sha256 == c.template_sha256
    assert render_prompt("critic", "c", DEADLINE).template_sha256 != a.template_sha256


def test_a_solo_worker_is_told_it_is_alone() -> None:
    assert "You are alone" in render_prompt("worker", "w1", DEADLINE, solo=True).text


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="use one of worker, critic"):
        render_prompt("manager", "m", DEADLINE)
