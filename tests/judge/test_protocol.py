"""The judge's reading of engine replies: every malformed reply is the candidate's WRONG
(``protocol``), never a judge fault; the agent-visible message never quotes the reply.

The first three tests are the red team's free probes (issue 9): each used to raise inside the
judge (``OverflowError``, ``inhomogeneous shape``, ``RecursionError``) and was scored ERROR,
re-queued, uncharged.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading

import numpy as np
import pytest

from judge.protocol import (
    MAX_DEPTH,
    MAX_LINE_BYTES,
    EngineFailure,
    check_reply,
    nesting_depth,
    parse_line,
)
from judge.sandbox import EngineProcess, _Stream

MARKER = "hidden-7431"  # stands for something the candidate built from a hidden input
DECODE = {"op": "decode", "steps": 3, "margins": False}


def _decode(line: bytes | str, batch: int = 2, vocab: int = 4096):
    line = line.encode() if isinstance(line, str) else line
    return check_reply(parse_line(line, "decode"), DECODE, batch, vocab)


def _failure(line: bytes | str, **kw) -> EngineFailure:
    with pytest.raises(EngineFailure) as caught:
        _decode(line, **kw)
    return caught.value


def test_a_token_id_too_large_for_int64_is_a_protocol_error():
    failure = _failure('{"ok": true, "tokens": [[1, 2, 18446744073709551616], [1, 2, 3]]}')
    assert failure.kind == "protocol"


def test_ragged_rows_are_a_protocol_error():
    failure = _failure('{"ok": true, "tokens": [[1, 2, 3], [1, 2]]}')
    assert failure.kind == "protocol"
    assert "2 lists of 3 integers" in str(failure)


def test_deeply_nested_json_is_a_protocol_error_without_recursing():
    deep = '{"ok": true, "tokens": ' + "[" * 200_000 + "]" * 200_000 + "}"
    failure = _failure(deep)
    assert failure.kind == "protocol" and str(MAX_DEPTH) in str(failure)


@pytest.mark.parametrize(
    "tokens",
    [
        [[1, 2, 4096], [1, 2, 3]],  # out of the vocabulary
        [[1, 2, -1], [1, 2, 3]],
        [[1, 2, True], [1, 2, 3]],  # JSON true is not a token
        [[1, 2, 3.0], [1, 2, 3]],
        [[1, 2, "3"], [1, 2, 3]],
        [[1, 2, 3]],  # too few rows
        [[1, 2, 3], [1, 2, 3], [1, 2, 3]],
        [[1, 2, 3, 4], [1, 2, 3, 4]],  # too many steps
        {"0": [1, 2, 3]},
        None,
    ],
)
def test_tokens_not_exactly_as_asked_are_a_protocol_error(tokens):
    assert _failure(json.dumps({"ok": True, "tokens": tokens})).kind == "protocol"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "null",
        "[1]",
        '{"ok": true',
        '{"ok": 1, "tokens": [[1,2,3],[1,2,3]]}',
        '{"tokens": [[1,2,3],[1,2,3]]}',
        '{"ok": true, "tokens": [[1,2,NaN],[1,2,3]]}',
        '{"ok": true, "tokens": [[1,2,3],[1,2,3]], "x": Infinity}',
        '{"ok": true, "tokens": [[1,2,3],[1,2,3]], "x": 1e999}',
        '{"ok": true, "tokens": [[1,2,3],[1,2,3]], "x": ' + "1" * 5000 + "}",
        b'{"ok": true, "x": "\xff"}',
        b"\xef\xbb\xbf{}",
    ],
)
def test_malformed_lines_are_protocol_errors(line):
    assert _failure(line).kind == "protocol"


def test_an_error_reply_is_a_crash_whose_words_stay_private():
    failure = _failure(json.dumps({"ok": False, "error": f"bad prompt {MARKER}"}))
    assert failure.kind == "crash"
    assert MARKER not in str(failure) and MARKER in failure.private


def test_no_agent_visible_message_quotes_the_reply():
    lines = [
        f'{{"ok": true, "tokens": [[1, 2, 3], ["{MARKER}"]]}}',
        f'{{"ok": true, "tokens": [[1, 2, 3]], "{MARKER}": 1}}',
        f"{MARKER} is not JSON",
        f'{{"ok": "{MARKER}"}}',
        f'["{MARKER}"]',
        f'{{"ok": true, "{MARKER}": ' + "[" * 100 + "]" * 100 + "}",
    ]
    for line in lines:
        failure = _failure(line)
        assert MARKER not in str(failure), line


@pytest.mark.parametrize("op", ["load", "prefill", "reset"])
def test_a_decode_reply_to_another_request_is_a_protocol_error(op):
    with pytest.raises(EngineFailure) as caught:
        check_reply({"ok": True, "tokens": [[1]]}, {"op": op}, 1, 4096)
    assert caught.value.kind == "protocol"
    assert check_reply({"ok": True}, {"op": op}, 1, 4096).tokens is None


def test_a_valid_reply_gives_int64_arrays():
    reply = _decode('{"ok": true, "tokens": [[1, 2, 3], [4095, 0, 7]], "margins": null}')
    assert reply.tokens.dtype == np.int64 and reply.tokens.shape == (2, 3)
    assert reply.get("tokens") is reply.tokens and reply.get("margins") is None
    assert reply["ok"] is True


def test_margins_are_validated_when_asked_for():
    ask = dict(DECODE, margins=True)
    good = {"ok": True, "tokens": [[1, 2, 3]], "margins": [[0.5, 1, 2.25]]}
    reply = check_reply(good, ask, 1, 4096)
    assert reply["margins"].shape == (1, 3)
    with pytest.raises(EngineFailure):
        check_reply(dict(good, margins=[[0.5, 1]]), ask, 1, 4096)
    # Not asked for: whatever the engine sent there is ignored.
    assert check_reply(dict(good, margins="x"), DECODE, 1, 4096).margins is None


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("{}", 1),
        ('{"a": [[1], [2]]}', 3),
        ('{"a": "[[[[[[["}', 1),
        (r'{"a": "\"[[[[", "b": [1]}', 2),
        (r'{"a": "\\", "b": [[1]]}', 3),
        (r'["\\\"[[[["]', 1),
        ("1", 0),
    ],
)
def test_nesting_depth_ignores_brackets_inside_strings(text, depth):
    assert nesting_depth(text.encode()) == depth
    if depth:
        assert text.count("[") + text.count("{") >= depth


def _frames(data: bytes, kind: int = 1, size: int = 7) -> bytes:
    out = b""
    for i in range(0, len(data), size):
        part = data[i : i + size]
        out += bytes([kind, 0, 0, 0]) + len(part).to_bytes(4, "big") + part
    return out


def test_the_stream_reassembles_frames_split_anywhere():
    stream = _Stream(socket.socket())
    data = _frames(b"hello\nworld\n") + _frames(b"noise", kind=2) + _frames(b"!\n", size=1)
    for i in range(len(data)):
        stream.feed(data[i : i + 1])
    assert bytes(stream.stdout) == b"hello\nworld\n!\n"
    assert bytes(stream.stderr) == b"noise"
    stream.sock.close()


def _engine(sock: socket.socket, batch: int = 2) -> EngineProcess:
    engine = object.__new__(EngineProcess)  # no container: only the socket matters here
    engine.label = "candidate"
    engine._stream = _Stream(sock)
    engine.requests = []
    engine.batch = batch
    return engine


def _answer(theirs: socket.socket, data: bytes, close: bool = True) -> threading.Thread:
    """The fake engine: read one request line, then send ``data`` as stdout frames."""

    def run() -> None:
        with theirs.makefile("rb") as requests:
            requests.readline()
        # OSError: the judge stopped reading (a line over the limit) and closed its end.
        with contextlib.suppress(OSError):
            theirs.sendall(_frames(data, size=1 << 15))
        if close:
            theirs.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _request(data: bytes, timeout: float = 10.0, close: bool = True):
    ours, theirs = socket.socketpair()
    try:
        thread = _answer(theirs, data, close)
        try:
            return _engine(ours).request(DECODE, timeout, vocab=4096)
        finally:
            ours.close()
            thread.join(timeout)
    finally:
        theirs.close()


def test_a_reply_over_the_socket():
    reply, seconds = _request(b'{"ok": true, "tokens": [[1, 2, 3], [4, 5, 6]]}\n')
    assert reply.tokens.tolist() == [[1, 2, 3], [4, 5, 6]] and seconds >= 0


def test_an_endless_line_is_cut_at_the_limit():
    with pytest.raises(EngineFailure) as caught:
        _request(b"[" + b"0," * MAX_LINE_BYTES)
    assert caught.value.kind == "protocol" and "longer than" in str(caught.value)


def test_a_line_cut_short_by_the_engine_exiting_is_a_crash():
    with pytest.raises(EngineFailure) as caught:
        _request(b'{"ok": true, "tok')
    assert caught.value.kind == "crash"


def test_silence_is_a_timeout():
    with pytest.raises(EngineFailure) as caught:
        _request(b"", timeout=0.3, close=False)
    assert caught.value.kind == "timeout"


def test_a_reply_written_before_the_request_is_a_protocol_error():
    ours, theirs = socket.socketpair()
    try:
        # An engine that answers decode during prefill: the line waits for the judge to ask.
        theirs.sendall(_frames(b'{"ok": true, "tokens": [[1, 2, 3], [4, 5, 6]]}\n'))
        with pytest.raises(EngineFailure) as caught:
            _engine(ours).request(DECODE, 5, vocab=4096)
        assert caught.value.kind == "protocol" and "before decode" in str(caught.value)
    finally:
        ours.close()
        theirs.close()


def test_the_batch_asked_for_is_what_decode_must_return():
    ours, theirs = socket.socketpair()
    try:
        engine = _engine(ours, batch=0)
        thread = _answer(theirs, b'{"ok": true}\n', close=False)
        engine.request({"op": "prefill", "prompts": [[1], [2], [3]]}, 5)
        thread.join()
        assert engine.batch == 3
    finally:
        ours.close()
        theirs.close()
