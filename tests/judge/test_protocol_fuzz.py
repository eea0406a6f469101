"""Property-based: whatever bytes an engine sends back, the judge's reader either returns a
reply that is exactly what was asked for, or fails with the candidate's fault (``protocol``,
``crash`` or ``timeout``) and a message that quotes none of it. Never a judge fault
(``InfrastructureFault``, any other exception: ERROR, re-queued, a free probe), never a hang.

The replies go through the real byte path: a socket pair, Docker's 8-byte frame headers (stdout,
stderr and unknown stream kinds, split at random points), then the line reader, the bounded
JSON parser and the validator.
"""

from __future__ import annotations

import json
import math
import random
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge.protocol import MAX_DEPTH, EngineFailure, Reply, check_reply, parse_line
from judge.sandbox import EngineProcess, _Stream

MARKER = "hidden-7431"  # stands for something built from a hidden input
VOCAB = 4096
FAULTS_OF_THE_CANDIDATE = {"protocol", "crash", "timeout"}
# CI runs the full count (issue 9: >= 5,000 malformed replies).
EXAMPLES = 5000

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.integers(min_value=-2, max_value=VOCAB + 2)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.just(MARKER)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(
            st.sampled_from(["ok", "tokens", "margins", "error", MARKER]) | st.text(max_size=6),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


DAMAGE = ["none", "none", "truncate", "insert", "nest", "number", "bytes", "raw", "lines"]
ENDINGS = [b"\n", b"\n", b"\n", b"\r\n", b"", b"\n\n"]
ODD = [None, True, False, 1.5, float("nan"), float("inf"), -1, VOCAB, 2**63, 2**64, "7", MARKER]


def _token(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.9:
        return rng.randrange(VOCAB)
    if roll < 0.95:
        return rng.choice(ODD)
    return rng.randrange(-(2**80), 2**80)


def _row(rng: random.Random, steps: int) -> object:
    roll = rng.random()
    if roll < 0.85:
        return [_token(rng) for _ in range(steps)]
    if roll < 0.95:
        return [_token(rng) for _ in range(max(0, steps + rng.choice([-1, 1])))]
    return rng.choice(ODD)


def _value(rng: random.Random, depth: int = 0) -> object:
    """A small arbitrary JSON value (NaN, huge ints and the marker included)."""
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice(ODD) if rng.random() < 0.5 else _token(rng)
    if roll < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["ok", "tokens", MARKER, "x"]
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def decode_reply(rng: random.Random, batch: int, steps: int, damage: str) -> bytes:
    """A reply line, usually close to a valid decode reply, then damaged at the byte level.
    (Hypothesis draws the seed, the damage and the sizes; the bulk is built from the seed,
    which keeps 5,000 examples to seconds.)"""
    extra = _value(rng)
    rows = [_row(rng, steps) for _ in range(max(0, batch + rng.choice([0, 0, 0, 0, -1, 1])))]
    obj = {
        "ok": rng.choice([True, True, True, True, False, None, 1, "true"]),
        "tokens": rows if rng.random() < 0.9 else extra,
    }
    if rng.random() < 0.25:
        obj[rng.choice(["margins", "error", MARKER])] = extra
    text = json.dumps(obj).encode()
    where = rng.randint(0, len(text))
    if damage == "truncate":
        text = text[:where]
    elif damage == "insert":
        text = text[:where] + rng.randbytes(rng.randint(1, 8)) + text[where:]
    elif damage == "nest":
        depth = rng.choice([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 2000, 20_000])
        closes = depth - rng.randint(0, 2)
        text = b'{"ok": true, "tokens": ' + b"[" * depth + b"]" * closes + b"}"
    elif damage == "number":
        text = text.replace(b"1", b"9" * rng.choice([19, 20, 40, 4301, 6000]), 1)
    elif damage == "bytes":
        text = text + rng.randbytes(rng.randint(1, 4)).replace(b"\n", b"\xff")
    elif damage == "raw":
        text = rng.randbytes(rng.randint(0, 300))
    elif damage == "lines":
        text = text + b"\n" + rng.randbytes(rng.randint(0, 40))
    return text + rng.choice(ENDINGS)


def attach_stream(rng: random.Random, stdout: bytes) -> bytes:
    """``stdout`` in Docker attach frames of random sizes, with stderr and odd frames mixed in,
    and sometimes a broken last frame."""
    sizes = [rng.choice([1, 3, 8, 64, 1024, 1 << 16]) for _ in range(rng.randint(1, 4))]
    if len(stdout) > 4096:
        sizes = [max(size, 1024) for size in sizes]  # the reader is fed, not the generator
    noise, noise_kind = rng.randbytes(rng.randint(0, 30)), rng.choice([0, 2, 3, 255])
    out, i, n = bytearray(), 0, 0
    while i < len(stdout):
        part = stdout[i : i + sizes[n % len(sizes)]]
        i, n = i + len(part), n + 1
        if n % 5 == 1 and noise:
            out += bytes([noise_kind, 0, 0, 0]) + len(noise).to_bytes(4, "big") + noise
        out += b"\x01\x00\x00\x00" + len(part).to_bytes(4, "big") + part
    tail = rng.choice(["", "", "", "short_header", "long_size"])
    if tail == "short_header":
        out += b"\x01\x00\x00"
    elif tail == "long_size":  # announces more than ever comes
        out += b"\x01\x00\x00\x00" + (1 << 31).to_bytes(4, "big") + b"{"
    return bytes(out)


class _EngineEnd:
    """The judge's end of a socket pair whose far end answers as soon as a request is sent:
    one thread, no scheduling (the pair's buffers hold the whole answer)."""

    def __init__(self, ours: socket.socket, theirs: socket.socket, answer: bytes) -> None:
        self._ours, self._theirs, self._answer = ours, theirs, answer

    def sendall(self, data: bytes) -> None:
        self._ours.sendall(data)
        self._theirs.sendall(self._answer)
        self._theirs.shutdown(socket.SHUT_WR)

    def __getattr__(self, name: str):
        return getattr(self._ours, name)


def _engine(sock: _EngineEnd, batch: int) -> EngineProcess:
    engine = object.__new__(EngineProcess)  # no container: only the socket matters here
    engine.label = "candidate"
    engine._stream = _Stream(sock)  # type: ignore[arg-type]
    engine.requests = []
    engine.batch = batch
    return engine


def _expect_reply(reply: Reply, first_line: bytes, batch: int, steps: int) -> None:
    sent = json.loads(first_line)
    assert sent["ok"] is True
    assert reply.tokens is not None and reply.tokens.shape == (batch, steps)
    assert reply.tokens.tolist() == sent["tokens"]
    assert all(type(t) is int and 0 <= t < VOCAB for row in sent["tokens"] for t in row)


@pytest.mark.timeout(600)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    seed=st.integers(0, 2**32),
    damage=st.sampled_from(DAMAGE),
    batch=st.integers(0, 3),
    steps=st.integers(0, 4),
)
def test_no_reply_is_a_judge_fault_or_leaks(seed: int, damage: str, batch: int, steps: int):
    rng = random.Random(seed)
    stdout = decode_reply(rng, batch, steps, damage)
    wire = attach_stream(rng, stdout)
    ours, theirs = socket.socketpair()
    for sock in (ours, theirs):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    payload = {"op": "decode", "steps": steps, "margins": False}
    try:
        reply, _ = _engine(_EngineEnd(ours, theirs, wire), batch).request(
            payload, timeout=30, vocab=VOCAB
        )
    except EngineFailure as failure:
        assert failure.kind in FAULTS_OF_THE_CANDIDATE
        assert MARKER not in str(failure)
    else:
        _expect_reply(reply, stdout.split(b"\n", 1)[0], batch, steps)
    finally:
        ours.close()
        theirs.close()


@settings(max_examples=1000, deadline=None, database=None)
@given(value=values, batch=st.integers(0, 3), steps=st.integers(0, 4))
def test_any_json_value_is_validated_or_refused(value, batch: int, steps: int):
    """The parser and validator alone, on arbitrary JSON (NaN, huge ints, the marker)."""
    line = json.dumps(value).encode()
    payload = {"op": "decode", "steps": steps, "margins": False}
    try:
        reply = check_reply(parse_line(line, "decode"), payload, batch, VOCAB)
    except EngineFailure as failure:
        assert failure.kind in {"protocol", "crash"} and MARKER not in str(failure)
    else:
        assert reply.tokens.shape == (batch, steps)
        assert isinstance(value, dict) and value["ok"] is True
        assert not any(isinstance(t, float) and math.isnan(t) for t in reply.tokens.flat)
