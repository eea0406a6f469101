"""Whose fault is a broken engine socket? The engine's when its process went away (WRONG,
crash); the judge's when the judge's own end of the socket is gone (ERROR: re-queued, never
charged). Seen in CI: docker-py's socket wrapper, once collected, closed the socket under the
judge, and ``[Errno 9] Bad file descriptor`` was charged to a candidate as a crash."""

from __future__ import annotations

import os
import socket

import pytest

from judge.sandbox import EngineFailure, EngineProcess, InfrastructureFault, _Stream


def _engine(sock: socket.socket) -> EngineProcess:
    engine = object.__new__(EngineProcess)  # no container: only the socket matters here
    engine.label = "candidate"
    engine._stream = _Stream(sock)
    engine.requests = []
    engine.batch = 0
    return engine


def test_the_judges_own_socket_closed_under_it_is_the_judges_fault():
    ours, theirs = socket.socketpair()
    try:
        os.close(ours.fileno())  # the fd is gone; the socket object does not know
        with pytest.raises(InfrastructureFault, match="lost its socket"):
            _engine(ours).request({"op": "prefill"}, timeout=2)
    finally:
        theirs.close()
        ours.detach()


def test_the_judges_socket_lost_while_waiting_is_the_judges_fault():
    ours, theirs = socket.socketpair()
    try:
        engine = _engine(ours)
        os.close(ours.fileno())
        with pytest.raises(InfrastructureFault):
            engine._stream.pump(deadline=None)
    finally:
        theirs.close()
        ours.detach()


def test_an_engine_that_went_away_is_the_engines_fault():
    ours, theirs = socket.socketpair()
    theirs.close()  # the engine's process is gone
    try:
        with pytest.raises(EngineFailure) as failure:
            _engine(ours).request({"op": "prefill"}, timeout=2)
        assert failure.value.kind == "crash"
    finally:
        ours.close()
