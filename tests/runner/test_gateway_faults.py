"""What one seat writes never crashes or stalls the gateway for the others (issue 31): any error
while serving a request is that request's refusal, recorded; files the gateway cannot write are
recorded and written again later; a commit being copied holds only its own seat. Real git and
real SQLite, no container (the container probes: ``test_gateway_probes_docker.py``)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from runner import gateway as gateway_module
from runner.gateway import Gateway
from tests.runner import test_gateway
from tests.runner.test_gateway import commit, finish, lines, reply, send

lab = test_gateway.lab  # the same fixture: two arms, real git, real SQLite

# Polls allowed for what needs one or two: a count, not a time (a busy machine is slower, not
# different). Each poll of a waiting copy sleeps a little so the copy's thread can run.
POLLS = 2000


def refusals(lab_, agent: str) -> list[dict]:
    return [
        json.loads(r["detail"])
        for r in lab_.events.table("lifecycle")
        if r["event"] == "request_refused" and r["agent"] == agent
    ]


def test_one_seats_copy_in_flight_holds_no_other_seats_requests(lab, monkeypatch):
    """swarm/w1's commit cannot be copied until the test says so; meanwhile swarm/w2's and
    solo/w1's posts and submissions are answered (the copy still known to be pending), and
    swarm/w1's own post too. Then its copy ends and it is answered."""
    release, gave_up = threading.Event(), threading.Event()
    offender = lab.swarm.agents["w1"]
    real = gateway_module.fetch_untrusted

    def slow(source, *args, **kwargs):
        if source == offender.repo and not release.wait(120):
            gave_up.set()  # before the fix: the main loop waited here, the others too
        return real(source, *args, **kwargs)

    monkeypatch.setattr(gateway_module, "fetch_untrusted", slow)
    gateway = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo], fetch_grace=0)
    w2, solo = lab.swarm.agents["w2"], lab.solo.agents["w1"]
    mine = send(offender, {"op": "submit", "commit": commit(offender, 2)}, name="a-submit")
    send(offender, {"op": "post", "text": "while my copy runs"}, name="b-post")
    others = [
        (w2, send(w2, {"op": "submit", "commit": commit(w2, 3)}, name="c")),
        (w2, send(w2, {"op": "post", "text": "w2 here"}, name="d")),
        (solo, send(solo, {"op": "submit", "commit": commit(solo, 4)}, name="e")),
        (solo, send(solo, {"op": "post", "text": "solo here"}, name="f")),
    ]
    for _ in range(POLLS):
        gateway.poll()
        if all((ws.replies / f"{rid}.json").exists() for ws, rid in others):
            break
        threading.Event().wait(0.01)
    assert not gave_up.is_set() and not release.is_set()
    assert all(reply(ws, rid)["ok"] for ws, rid in others)
    assert reply(offender, "b-post")["ok"]
    assert not (offender.replies / f"{mine}.json").exists()
    assert (offender.outbox / f"{mine}.json").exists()  # still to answer, never dropped
    release.set()
    for _ in range(POLLS):
        gateway.poll()
        if (offender.replies / f"{mine}.json").exists():
            break
        threading.Event().wait(0.01)
    assert reply(offender, mine)["ok"]
    assert sorted(s["agent"] for s in lab.events.table("submissions")) == ["w1", "w1", "w2"]
    assert not gave_up.is_set()


def test_a_reply_that_cannot_be_written_is_recorded_and_the_run_goes_on(lab):
    """The reply's path is taken by a folder (as a full or broken inbox would fail a write):
    before the fix the OSError ended the runner; now it is recorded and the others served."""
    w1, solo = lab.swarm.agents["w1"], lab.solo.agents["w1"]
    (w1.replies / "r1.json").mkdir()
    send(w1, {"op": "post", "text": "first"}, name="r1")
    send(solo, {"op": "post", "text": "solo"}, name="s1")
    lab.gateway.poll()
    assert reply(solo, "s1")["ok"]
    assert not (w1.outbox / "r1.json").exists()
    (event,) = [r for r in lab.events.table("lifecycle") if r["event"] == "reply_not_written"]
    assert event["agent"] == "w1" and "IsADirectoryError" in event["detail"]
    assert [m["text"] for m in lab.events.messages("swarm")] == ["first"]  # recorded all the same


def test_a_verdicts_file_that_cannot_be_written_is_rewritten_from_the_log(lab):
    w1 = lab.swarm.agents["w1"]
    rid = send(w1, {"op": "submit", "commit": commit(w1, 5)})
    lab.gateway.poll()
    n = reply(w1, rid)["submission"]
    (row,) = lab.events.table("submissions")
    w1.verdicts_file.unlink()
    w1.verdicts_file.mkdir()  # the append fails
    finish(lab.queue, row["job_id"], tok_s=1.0)
    assert lab.gateway.poll() == 1  # delivered: recorded in the log
    (event,) = [r for r in lab.events.table("lifecycle") if r["event"] == "verdict_not_written"]
    assert event["agent"] == "w1"
    assert [e["submission_id"] for e in lab.events.table("evaluations")] == [n]
    w1.verdicts_file.rmdir()
    lab.gateway.poll()
    assert [v["submission"] for v in lines(w1.verdicts_file)] == [n]


def test_a_board_file_that_cannot_be_written_is_rewritten_from_the_log(lab):
    w1 = lab.swarm.agents["w1"]
    lab.swarm.board_file.unlink()
    lab.swarm.board_file.mkdir()
    send(w1, {"op": "post", "text": "one"}, name="p1")
    lab.gateway.poll()
    assert reply(w1, "p1")["ok"]
    lab.swarm.board_file.rmdir()
    send(w1, {"op": "post", "text": "two"}, name="p2")
    lab.gateway.poll()
    assert [m["text"] for m in lines(lab.swarm.board_file)] == ["one", "two"]


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        # json.loads raised RecursionError, which no handler caught: the runner ended.
        (b"[" * 60_000, "nested too deeply"),
        (b'{"id": "x", "op": "post", "text": "a", "refs": ' + b"[" * 60_000, "nested too deeply"),
        # A lone surrogate parses, but neither the board (UTF-8) nor SQLite can hold it.
        (b'{"id": "x", "op": "post", "text": "\\ud800"}', "not valid Unicode"),
        (b'{"id": "x", "op": "submit", "commit": "a", "message": "\\udfff"}', "not valid Unicode"),
    ],
)
def test_requests_that_would_break_the_parser_or_the_log_are_refused(lab, raw, error):
    w1, solo = lab.swarm.agents["w1"], lab.solo.agents["w1"]
    (w1.outbox / "x.json").write_bytes(raw[: gateway_module.MAX_REQUEST_BYTES])
    send(solo, {"op": "post", "text": "solo"}, name="s1")
    lab.gateway.poll()
    assert error in reply(w1, "x")["error"]
    assert reply(solo, "s1")["ok"]
    assert [r["error"] for r in refusals(lab, "w1")] == [reply(w1, "x")["error"]]
    assert lab.events.messages("swarm") == []


def test_any_other_error_serving_a_request_is_its_refusal(lab, monkeypatch):
    """Whatever goes wrong (here: the board's author lookup raising) is recorded with its
    detail, the agent gets a reason without host paths, and the next seat is served."""
    w1, solo = lab.swarm.agents["w1"], lab.solo.agents["w1"]
    real = lab.events.add_message

    def broken(arm, *args, **kwargs):
        if arm == "swarm":
            raise OSError(28, "No space left on device", "/host/path/secret")
        return real(arm, *args, **kwargs)

    monkeypatch.setattr(lab.events, "add_message", broken)
    send(w1, {"op": "post", "text": "x"}, name="p1")
    send(solo, {"op": "post", "text": "y"}, name="p2")
    lab.gateway.poll()
    assert reply(w1, "p1") == {"ok": False, "error": "the gateway could not carry out this request"}
    assert reply(solo, "p2")["ok"]
    (refusal,) = refusals(lab, "w1")
    assert "No space left on device" in refusal["detail"] and "/host/path" in refusal["detail"]


def test_special_files_in_the_outbox_are_refused_without_blocking(lab):
    """A FIFO (opening it for reading would wait for a writer), a folder named like a request,
    and a request too large: each refused, none blocks the poll, the other seat is served."""
    w1, solo = lab.swarm.agents["w1"], lab.solo.agents["w1"]
    os.mkfifo(w1.outbox / "fifo.json")
    (w1.outbox / "folder.json").mkdir()
    (w1.outbox / "huge.json").write_bytes(b" " * (gateway_module.MAX_REQUEST_BYTES + 1))
    send(solo, {"op": "post", "text": "y"}, name="p2")
    lab.gateway.poll()
    assert "not a regular file" in reply(w1, "fifo")["error"]
    assert "not a regular file" in reply(w1, "folder")["error"]
    assert "larger than" in reply(w1, "huge")["error"]
    assert reply(solo, "p2")["ok"]
    assert sorted(p.name for p in w1.outbox.iterdir()) == ["folder.json"]  # cannot be unlinked
    lab.gateway.poll()  # the folder is answered once, then skipped
    assert len(refusals(lab, "w1")) == 3


def test_a_flood_of_requests_keeps_a_bounded_inbox(lab, monkeypatch):
    monkeypatch.setattr(gateway_module, "MAX_REPLIES", 5)
    w1 = lab.swarm.agents["w1"]
    for i in range(12):
        send(w1, {"op": "post", "text": f"n{i}"}, name=f"r{i:02d}")
        lab.gateway.poll()
        assert len(list(w1.replies.iterdir())) <= 5
    kept = sorted(p.name for p in w1.replies.iterdir())
    assert "r11.json" in kept and "r00.json" not in kept
