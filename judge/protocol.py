"""The engine's replies, parsed and validated: a malformed reply is the candidate's fault.

The judge reads one line per request (see docs/engine-protocol.md) and accepts it only if it is
a JSON object of bounded size, nesting and number length that holds exactly what the request
asked for. Anything else raises :class:`EngineFailure` with kind ``protocol`` (WRONG, charged):
a candidate must never be able to turn its own bad reply into a judge fault (ERROR, re-queued,
a free probe). Every exception a parse can raise is caught here and named by the judge.

Messages are in two parts. ``str(failure)`` is judge-made text only (the op, what was asked
for, the limits): it may reach the agent. ``failure.private`` may quote the reply, which the
candidate can build from hidden inputs: it goes to the judge's private log only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# One reply line, newline excluded. The largest reply the bundled task sends is the baseline's
# decode with margins, B=16 x 64 steps: ~30 KB. The judge buffers at most this plus one read.
MAX_LINE_BYTES = 1 << 20
# Objects and arrays inside one another. A decode reply needs 3; ``load``'s info a few more.
MAX_DEPTH = 32
# Characters of one JSON number: an int64 has at most 20, a float's repr at most 24.
MAX_NUMBER_CHARS = 32
# How much of a bad reply the private log keeps.
PRIVATE_QUOTE = 300


class EngineFailure(Exception):
    """The engine did something wrong (the candidate's fault). ``kind`` is the reason code:
    ``timeout``, ``crash``, ``protocol`` or ``memory``. ``str()`` is judge-made text, safe to
    show the agent; ``private`` may carry the engine's own bytes (the judge's log only)."""

    def __init__(self, kind: str, message: str, private: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.private = private


@dataclass(frozen=True)
class Reply:
    """A validated reply. ``tokens`` (int64, B x steps) and ``margins`` (float64, B x steps)
    are set for a decode that asked for them; ``fields`` is the reply object as sent."""

    op: str
    fields: dict[str, Any]
    tokens: np.ndarray | None = None
    margins: np.ndarray | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """``reply.get("tokens")`` as on a dict: the validated arrays win over the raw fields."""
        if key == "tokens" and self.tokens is not None:
            return self.tokens
        if key == "margins" and self.op == "decode":
            return self.margins
        return self.fields.get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key not in self.fields and key not in ("tokens", "margins"):
            raise KeyError(key)
        return self.get(key)


def _quote(data: bytes | str) -> str:
    text = data if isinstance(data, str) else data[:PRIVATE_QUOTE].decode("utf-8", "replace")
    return repr(text[:PRIVATE_QUOTE])


def nesting_depth(line: bytes) -> int:
    """The deepest nesting of ``[``/``{`` outside strings in UTF-8 JSON text, in linear time
    and without recursion (the JSON parser recurses, and a deep enough line would exhaust the
    judge's stack). Exact for valid JSON; for invalid text it may differ only past the point
    where a parser fails anyway."""
    data = np.frombuffer(line, dtype=np.uint8)
    if data.size == 0:
        return 0
    quote = data == ord('"')
    if quote.any():
        backslash = data == ord("\\")
        if backslash.any():
            # A quote is escaped when an odd run of backslashes precedes it.
            index = np.arange(data.size)
            last_plain = np.maximum.accumulate(np.where(backslash, -1, index))
            run = np.zeros(data.size, dtype=np.int64)
            run[1:] = index[:-1] - last_plain[:-1]
            quote &= run % 2 == 0
        inside = np.cumsum(quote) % 2 == 1
    else:
        inside = np.zeros(data.size, dtype=bool)
    opens = ((data == ord("[")) | (data == ord("{"))) & ~inside
    if not opens.any():
        return 0
    closes = ((data == ord("]")) | (data == ord("}"))) & ~inside
    return int(np.cumsum(opens.astype(np.int64) - closes).max())


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError("number too long")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError("number too long")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def parse_line(line: bytes, op: str) -> dict[str, Any]:
    """One reply line (newline stripped) as a JSON object.

    Raises:
        EngineFailure: ``protocol`` if it is too long, not UTF-8, too deep, not JSON, has a
            number too long or not finite, or is not an object.
    """
    if len(line) > MAX_LINE_BYTES:
        raise EngineFailure(
            "protocol", f"reply to {op} is longer than {MAX_LINE_BYTES} bytes", _quote(line)
        )
    if nesting_depth(line) > MAX_DEPTH:
        raise EngineFailure(
            "protocol", f"reply to {op} nests deeper than {MAX_DEPTH} levels", _quote(line)
        )
    try:
        value = json.loads(
            line.decode("utf-8"),
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_no_constant,
        )
    except (ValueError, RecursionError, OverflowError, TypeError) as exc:
        raise EngineFailure(
            "protocol",
            f"reply to {op} is not one JSON line (UTF-8, numbers of at most "
            f"{MAX_NUMBER_CHARS} characters, finite)",
            f"{type(exc).__name__}: {_quote(str(exc))} in {_quote(line)}",
        ) from None
    if not isinstance(value, dict):
        raise EngineFailure("protocol", f"reply to {op} is not a JSON object", _quote(line))
    return value


def _grid(value: Any, rows: int, cols: int, ok: Any) -> bool:
    """Whether ``value`` is a list of ``rows`` lists of ``cols`` items each passing ``ok``."""
    if not isinstance(value, list) or len(value) != rows:
        return False
    return all(
        isinstance(row, list) and len(row) == cols and all(ok(v) for v in row) for row in value
    )


def check_reply(
    fields: dict[str, Any], payload: dict[str, Any], batch: int, vocab: int | None
) -> Reply:
    """Validate a parsed reply against the request it answers.

    Args:
        fields: the reply object.
        payload: the request it answers (``op``; for decode ``steps`` and ``margins``).
        batch: the rows the engine holds (prompts in the last prefill; 0 after reset).
        vocab: token ids must lie in ``[0, vocab)``; None: any non-negative int64.

    Raises:
        EngineFailure: ``crash`` when the engine says ``ok: false``; ``protocol`` when the
            reply is not what the request asked for.
    """
    op = str(payload.get("op"))
    ok = fields.get("ok")
    if ok is False:
        error = fields.get("error")
        raise EngineFailure(
            "crash", f"engine reported an error on {op}", _quote(str(error)[:PRIVATE_QUOTE])
        )
    if ok is not True:
        raise EngineFailure("protocol", f'reply to {op} has no "ok": true or false')
    if op != "decode":
        if "tokens" in fields:
            # A decode reply answering another request: the engine is out of step with the
            # judge (a reply sent ahead of its request).
            raise EngineFailure("protocol", f"reply to {op} carries tokens (a decode reply)")
        return Reply(op, fields)
    steps = int(payload.get("steps", 0))
    top = (1 << 63) if vocab is None else vocab

    def is_token(v: Any) -> bool:
        return type(v) is int and 0 <= v < top

    tokens = fields.get("tokens")
    if not _grid(tokens, batch, steps, is_token):
        raise EngineFailure(
            "protocol",
            f'reply to decode: "tokens" must be {batch} lists of {steps} integers in [0, {top})',
            _quote(json.dumps(tokens)[:PRIVATE_QUOTE]),
        )
    margins = None
    if payload.get("margins"):

        def is_margin(v: Any) -> bool:
            return type(v) in (int, float) and math.isfinite(v)

        if not _grid(fields.get("margins"), batch, steps, is_margin):
            raise EngineFailure(
                "protocol",
                f'reply to decode: "margins" must be {batch} lists of {steps} finite numbers',
            )
        margins = np.asarray(fields["margins"], dtype=np.float64).reshape(batch, steps)
    return Reply(
        op,
        fields,
        tokens=np.asarray(tokens, dtype=np.int64).reshape(batch, steps),
        margins=margins,
    )
