"""Shared by the in-container tools ``submit``, ``board`` and ``verdicts``.

Standard library only, Python >= 3.9 (the tools may run on the distribution's python3). The
tools only write requests into the agent's outbox and read what the gateway wrote back into
its inbox and the arm's board; every path comes from a ``SWARMLAB_*`` variable and defaults to
the container's layout (``docs/agent-workspace.md``).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

OK, REFUSED, USAGE = 0, 1, 2  # exit codes: done, refused by the gateway, usage or timeout

_DEFAULTS = {
    "OUTBOX": "/work/outbox",
    "INBOX": "/work/inbox",
    "BOARD": "/work/board",
    "REPO": "/work/repo",
}


class ToolError(Exception):
    """Ends the tool with a one-line message on stderr and an exit code."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


def path(name: str) -> str:
    return os.environ.get("SWARMLAB_" + name) or _DEFAULTS[name]


def seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise ToolError(f"{name}={value!r} is not a number of seconds") from None


def new_id() -> str:
    """Unique per agent: nanoseconds, then randomness (sorts in the order they were made)."""
    return f"{time.time_ns()}-{secrets.token_hex(4)}"


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something other than None; ToolError after timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise ToolError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def read_json(file: str) -> dict[str, Any] | None:
    try:
        with open(file, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_jsonl(file: str) -> list[dict[str, Any]]:
    """Complete lines only: a line still being written (no newline yet) is skipped."""
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return []
    rows = []
    for line in text.split("\n")[:-1]:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def request(op: str, **fields: Any) -> dict[str, Any]:
    """Write one request atomically into the outbox and wait for the gateway's reply.

    Returns the reply when it says ok; raises ToolError(code 1) with the gateway's reason when
    it refused, ToolError(code 2) when no reply came in ``SWARMLAB_REPLY_TIMEOUT`` seconds.
    """
    outbox = path("OUTBOX")
    rid = new_id()
    body = dict(fields, id=rid, op=op)
    final = os.path.join(outbox, rid + ".json")
    try:
        with open(final + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(body, handle)
        os.replace(final + ".tmp", final)
    except OSError as exc:
        raise ToolError(f"cannot write the request into {outbox}: {exc}") from None
    reply_file = os.path.join(path("INBOX"), "replies", rid + ".json")
    timeout = seconds("SWARMLAB_REPLY_TIMEOUT", 120.0)
    try:
        reply = wait_for(lambda: read_json(reply_file), timeout, "the gateway's reply")
    except ToolError:
        raise ToolError(
            f"no reply from the gateway after {timeout:g} s (request {rid} left in {outbox})"
        ) from None
    if reply.get("ok") is not True:
        raise ToolError("refused: {}".format(reply.get("error", "no reason given")), REFUSED)
    return reply


def verdicts() -> list[dict[str, Any]]:
    return read_jsonl(os.path.join(path("INBOX"), "verdicts.jsonl"))


def wait_verdict(submission: int, timeout: float) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for row in verdicts():
            if row.get("submission") == submission:
                return row
        return None

    return wait_for(find, timeout, f"the verdict of submission {submission}")


def main(prog: str, run: Callable[[list[str]], int]) -> None:
    """Run a tool's body; ToolError becomes a message on stderr and its exit code."""
    try:
        code = run(sys.argv[1:])
    except ToolError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        code = USAGE
    sys.exit(code)
