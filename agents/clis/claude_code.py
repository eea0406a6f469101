"""Claude Code (``agent=claude_code``): Anthropic's CLI, a Bun-compiled native binary from npm.

**Invocation.** ``claude -p PROMPT --output-format stream-json --verbose
--dangerously-skip-permissions --disallowedTools WebSearch,WebFetch --model M`` (refused as
root; agents never run as root), ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``,
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no telemetry, update checks or error reports:
the agent's network reaches only the model). Resume: ``claude -p --continue`` ("continue the
most recent conversation in the current directory").

**Retries.** ``system``/``api_retry`` events on its stream-json output, with the delay it
announced (``retry_delay_ms``) and the error status.

**Record.** ``$HOME/.claude/projects/<cwd with / as ->/<session>.jsonl``: one line per content
block, all repeating the usage of their API call under the same ``message.id`` and
``requestId``, each block's line the child (``parentUuid``) of the one before, an early
streaming line carrying a partial ``output_tokens``. Lines that share (message id, request id)
are one call where the format says so: the same line (``uuid``: a resumed session replays
history under the same uuids and ids), a block line chained to another of that call, or the
same input side of the usage (``input_tokens`` and both cache counts: the blocks of one call
repeat it, a later turn's prompt differs). Otherwise they are different calls: a gateway or an
Anthropic-compatible server can fix or reuse message ids, and may send no ``requestId``, so
that a line without it is keyed on its message id alone. Each call keeps its largest line. A
sidechain (subagent) line that replays a main-chain message (same message id, same usage input
side) under a new request id is dropped; sidechain calls of their own count.
``input_tokens`` excludes the cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.clis.base import Client
from agents.clis.registry import register_cli
from agents.usage import (
    TokenUsage,
    UsageByModel,
    as_dict,
    as_float,
    as_str,
    json_records,
    messages_usage,
    read_text,
)


@dataclass
class _ClaudeEntry:
    message_id: str | None
    request_id: str | None
    sidechain: bool
    model: str | None
    usage: TokenUsage
    cost: float | None
    uuid: str | None = None
    parent: str | None = None
    # The line itself (agents.trajectory builds the call's step from its lines).
    line: dict[str, Any] | None = None

    @property
    def prompt(self) -> tuple[int, int, int]:
        """The input side of the call's usage: what every block line of one call repeats."""
        return (self.usage.input, self.usage.cache_read, self.usage.cache_write)


def _claude_entries(paths: Iterable[Path]) -> Iterator[_ClaudeEntry]:
    for path in paths:
        for obj in json_records(read_text(path)):
            if not isinstance(obj, dict):
                continue
            message = as_dict(obj.get("message"))
            usage = message.get("usage")
            if not isinstance(usage, dict):
                continue
            model = as_str(message.get("model"))
            if model == "<synthetic>":
                # Claude Code's own stand-in for an error message: no API call behind it.
                continue
            yield _ClaudeEntry(
                message_id=as_str(message.get("id")),
                request_id=as_str(obj.get("requestId")),
                sidechain=obj.get("isSidechain") is True,
                model=model,
                usage=messages_usage(usage),
                cost=as_float(obj.get("costUSD")),
                uuid=as_str(obj.get("uuid")),
                parent=as_str(obj.get("parentUuid")),
                line=obj,
            )


def _calls(group: list[_ClaudeEntry]) -> list[list[_ClaudeEntry]]:
    """Split lines that share (message id, request id) into the calls they are."""
    root = list(range(len(group)))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    def union(i: int, j: int) -> None:
        root[find(i)] = find(j)

    by_uuid: dict[str, int] = {}
    by_prompt: dict[tuple[int, int, int], int] = {}
    for i, entry in enumerate(group):
        if entry.uuid is not None:
            union(i, by_uuid.setdefault(entry.uuid, i))
        if any(entry.prompt):
            # (An all-zero input side, from a server that does not count input, tells nothing.)
            union(i, by_prompt.setdefault(entry.prompt, i))
    for i, entry in enumerate(group):
        # A block line whose parent is a line of the same id continues that call, even where
        # a gateway's streaming snapshot reported another input count than the final line.
        if entry.parent is not None and entry.parent in by_uuid:
            union(i, by_uuid[entry.parent])
    calls: dict[int, list[_ClaudeEntry]] = {}
    for i, entry in enumerate(group):
        calls.setdefault(find(i), []).append(entry)
    return list(calls.values())


def _largest(lines: list[_ClaudeEntry]) -> _ClaudeEntry:
    # The last content-block line of a streamed reply carries the final output count; a tie
    # keeps the later line.
    best = lines[0]
    for entry in lines[1:]:
        if entry.usage.total() >= best.usage.total():
            best = entry
    return best


def claude_code_calls(paths: list[Path]) -> list[tuple[_ClaudeEntry, list[_ClaudeEntry]]]:
    """Claude Code transcripts' API calls (the rules are in the module's docstring): each
    call's counted line (its usage) and all the lines it was read from (its content blocks).
    ``read_claude_code`` sums the first; ``agents.trajectory`` makes a step of each call, so a
    trajectory's steps carry exactly the tokens the reader counts."""
    groups: dict[tuple[str, str | None], list[_ClaudeEntry]] = {}
    anonymous: dict[str, list[_ClaudeEntry]] = {}
    chosen: list[tuple[_ClaudeEntry, list[_ClaudeEntry]]] = []
    for entry in _claude_entries(paths):
        if entry.message_id is None:
            # Nothing to match it against but its own uuid (a replay of the same line).
            if entry.uuid is None:
                chosen.append((entry, [entry]))
            else:
                anonymous.setdefault(entry.uuid, []).append(entry)
            continue
        groups.setdefault((entry.message_id, entry.request_id), []).append(entry)
    chosen.extend((_largest(lines), lines) for lines in anonymous.values())

    # The same reply (message id and usage input side) under several request ids.
    copies: dict[tuple[str | None, tuple[int, int, int]], list[_ClaudeEntry]] = {}
    lines_of: dict[int, list[_ClaudeEntry]] = {}
    for group in groups.values():
        for lines in _calls(group):
            call = _largest(lines)
            lines_of[id(call)] = lines
            copies.setdefault((call.message_id, call.prompt), []).append(call)
    for same in copies.values():
        main_chain = [e for e in same if not e.sidechain]
        if main_chain:
            # A sidechain copy of a main-chain reply is a replay of it under a new request id.
            chosen.extend((e, lines_of[id(e)]) for e in main_chain)
        else:
            best = _largest(same)
            chosen.append((best, lines_of[id(best)]))
    return chosen


def read_claude_code(paths: list[Path]) -> UsageByModel:
    """Claude Code transcripts' usage (the rules are in the module's docstring)."""
    result = UsageByModel()
    for entry, _ in claude_code_calls(paths):
        entry.usage.cost_estimate = entry.cost
        result.add(entry.model, entry.usage)
    return result


def stream_json_events(output: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a CLI's JSON-lines output (other lines skipped)."""
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


@dataclass(frozen=True)
class ClaudeCode(Client):
    """Claude Code."""

    def command(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        return [
            self.container_binary,
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            # The seat's only network is the model proxy: no web tools (WebSearch would
            # make the vendor fetch for it; WebFetch reaches nothing from the container).
            "--disallowedTools",
            "WebSearch,WebFetch",
            "--model",
            model or self.default_model,
        ]

    def resume_command(
        self,
        message: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        first = self.command(message, model, environ)
        return [*first[:3], "--continue", *first[3:]]

    @property
    def resume_mechanism(self) -> str:
        return "claude -p --continue"

    def count_retries(self, output: str) -> dict[str, Any]:
        count, waited_ms = 0, 0.0
        statuses: dict[str, int] = {}
        for event in stream_json_events(output):
            if event.get("type") != "system" or event.get("subtype") != "api_retry":
                continue
            waited_ms += float(event.get("retry_delay_ms") or 0)
            status = str(event.get("error_status") or event.get("error") or "none")
            count += 1
            statuses[status] = statuses.get(status, 0) + 1
        return {"count": count, "statuses": statuses, "waited_s": round(waited_ms / 1000, 3)}

    def claims_line(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        if isinstance(obj.get("message"), dict) and any(
            key in obj for key in ("uuid", "parentUuid", "requestId", "isSidechain")
        ):
            return True
        return obj.get("type") == "summary" and "leafUuid" in obj

    def read_records(self, paths: list[Path]) -> UsageByModel:
        return read_claude_code(paths)

    @property
    def cost_source(self) -> str | None:
        return "claude_code costUSD on the transcript lines (the CLI's own estimate)"


CLAUDE_CODE = register_cli(
    ClaudeCode(
        name="claude_code",
        package="@anthropic-ai/claude-code",
        version="2.1.332",
        binary_path="node_modules/@anthropic-ai/claude-code-linux-{arch}/claude",
        key_env="ANTHROPIC_API_KEY",
        base_url_env="ANTHROPIC_BASE_URL",
        default_base_url="https://api.anthropic.com",
        default_model="claude-sonnet-4-5",
        records=".claude/projects",
        api="anthropic",
        fixed_env={
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        },
    )
)
