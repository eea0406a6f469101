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
``requestId``, an early streaming line carrying a partial ``output_tokens``. One entry is kept
per (message id, request id), the one with the largest usage, and a line without ``requestId``
is keyed on its message id alone. Resumed sessions replay history under the same ids, so they
count once. A sidechain (subagent) line that replays a main-chain message under a new request
id is dropped; sidechain lines of their own count. ``input_tokens`` excludes the cache.
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
            )


def read_claude_code(paths: list[Path]) -> UsageByModel:
    """Claude Code transcripts' usage (the rules are in the module's docstring)."""
    kept: dict[tuple[str, str | None], _ClaudeEntry] = {}
    anonymous: list[_ClaudeEntry] = []
    for entry in _claude_entries(paths):
        if entry.message_id is None:
            # Nothing to match it against: every such line is its own call.
            anonymous.append(entry)
            continue
        key = (entry.message_id, entry.request_id)
        old = kept.get(key)
        # The last content-block line of a streamed reply carries the final output count.
        if old is None or entry.usage.total() >= old.usage.total():
            kept[key] = entry

    by_message: dict[str, list[_ClaudeEntry]] = {}
    for entry in kept.values():
        by_message.setdefault(entry.message_id or "", []).append(entry)
    chosen: list[_ClaudeEntry] = list(anonymous)
    for group in by_message.values():
        main_chain = [e for e in group if not e.sidechain]
        if main_chain:
            # A sidechain copy of a main-chain reply is a replay of it under a new request id.
            chosen.extend(main_chain)
        else:
            chosen.append(max(group, key=lambda e: e.usage.total()))

    result = UsageByModel()
    for entry in chosen:
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
