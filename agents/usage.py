"""Token usage in one shape, and the tolerant readers of records other programs wrote.

Shared by the CLIs' session-record readers (``agents.clis``: what a CLI wrote in its own
record), the vendor APIs' wire-usage parsers (what a response said on the wire) and
``analysis.tokens`` / ``analysis.wire_usage``, so that each counts tokens the same way:

- :class:`TokenUsage`: ``input`` excludes every cached token, ``output`` includes reasoning.
- :class:`UsageByModel`: one record's usage per model, and its cost where the CLI reports one
  total for the whole record.
- ``as_int``/``as_float``/``as_dict``/``as_str``: a missing, null or odd value reads as 0 / None
  / ``{}`` (records are written by other programs, torn by kills, changed by new releases).
- :func:`read_text`, :func:`json_records`: a file as one JSON document or its JSON lines.
- The three vendors' usage objects normalised: :func:`messages_usage` (Anthropic Messages),
  :func:`api_usage` (any of Chat Completions, Responses or Messages), :func:`gemini_usage`
  (Gemini's counts under the Gemini CLI's names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "UNKNOWN_MODEL",
    "TokenRecordError",
    "TokenUsage",
    "UsageByModel",
    "api_usage",
    "as_dict",
    "as_float",
    "as_int",
    "as_str",
    "gemini_usage",
    "json_records",
    "messages_usage",
    "read_text",
]

UNKNOWN_MODEL = "unknown"


class TokenRecordError(ValueError):
    """A session record that cannot be read: unknown format, unreadable file, or no usage."""


@dataclass
class TokenUsage:
    """Normalised token counts of one model in one session record.

    Attributes:
        input: Input tokens read at the full price (no cache hit, no cache write).
        cache_read: Input tokens served from the prompt cache.
        cache_write: Input tokens written to the prompt cache.
        output: Every generated token, reasoning included.
        reasoning: The part of ``output`` the record marks as reasoning (0 where it does not say).
        model: The model name as the record spells it.
        requests: Distinct API calls counted.
        cost_estimate: The cost the CLI itself recorded for these calls, or None.
    """

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0
    model: str = UNKNOWN_MODEL
    requests: int = 0
    cost_estimate: float | None = None

    def total(self) -> int:
        """Return every token the calls consumed or produced."""
        return self.input + self.cache_read + self.cache_write + self.output

    def add(self, other: TokenUsage) -> None:
        """Add ``other``'s counts, requests and cost to this one in place.

        Args:
            other: The usage to add; its model name is ignored.
        """
        self.input += other.input
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.output += other.output
        self.reasoning += other.reasoning
        self.requests += other.requests
        if other.cost_estimate is not None:
            self.cost_estimate = (self.cost_estimate or 0.0) + other.cost_estimate


@dataclass
class UsageByModel:
    """What a record reader returns: the usage of each model, and the record's whole cost
    where the CLI reports it once for all models (mini-swe-agent)."""

    usage: dict[str, TokenUsage] = field(default_factory=dict)
    cost_total: float | None = None

    def add(self, model: str | None, usage: TokenUsage) -> None:
        """Add ``usage`` to ``model``'s (``unknown`` when None)."""
        name = model or UNKNOWN_MODEL
        self.usage.setdefault(name, TokenUsage(model=name)).add(usage)


# -- tolerant readers ------------------------------------------------------------------------


def as_int(value: Any) -> int:
    """A count: a missing, null, negative or non-numeric value reads as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0)


def as_float(value: Any) -> float | None:
    """A number, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def as_dict(value: Any) -> dict[str, Any]:
    """A JSON object, or ``{}``."""
    return value if isinstance(value, dict) else {}


def as_str(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def read_text(path: Path) -> str:
    """The file's text.

    Raises:
        TokenRecordError: not UTF-8, or cannot be read.
    """
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TokenRecordError(f"{path} is not a UTF-8 text file") from None
    except OSError as exc:
        raise TokenRecordError(f"cannot read {path}: {exc.strerror or exc}") from None


def json_records(text: str) -> list[Any]:
    """The text as one JSON document in a list, or its JSON lines (torn lines skipped)."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out: list[Any] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            # A CLI killed mid-write leaves a torn last line; the lines before it still count.
            continue
    return out


# -- the vendors' usage objects --------------------------------------------------------------


def messages_usage(usage: dict[str, Any]) -> TokenUsage:
    """One Anthropic Messages ``usage`` (``input_tokens`` excludes the cache)."""
    cache_write = usage.get("cache_creation_input_tokens")
    if not isinstance(cache_write, int | float):
        # Only the per-TTL breakdown was written: its parts add up to the cache write.
        breakdown = as_dict(usage.get("cache_creation"))
        cache_write = sum(as_int(v) for v in breakdown.values())
    return TokenUsage(
        input=as_int(usage.get("input_tokens")),
        cache_read=as_int(usage.get("cache_read_input_tokens")),
        cache_write=as_int(cache_write),
        output=as_int(usage.get("output_tokens")),
        requests=1,
    )


def api_usage(usage: dict[str, Any]) -> TokenUsage:
    """One API response's ``usage`` in any of the shapes LiteLLM passes through: Chat
    Completions, OpenAI Responses, or Anthropic Messages."""
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        # Chat Completions (LiteLLM's common shape): prompt_tokens includes every cached token.
        prompt_details = as_dict(usage.get("prompt_tokens_details"))
        completion_details = as_dict(usage.get("completion_tokens_details"))
        prompt = as_int(usage.get("prompt_tokens"))
        cache_read = as_int(prompt_details.get("cached_tokens")) or as_int(
            usage.get("cache_read_input_tokens")
        )
        cache_write = as_int(usage.get("cache_creation_input_tokens")) or as_int(
            prompt_details.get("cache_creation_tokens")
        )
        output = as_int(usage.get("completion_tokens"))
        return TokenUsage(
            input=max(prompt - cache_read - cache_write, 0),
            cache_read=cache_read,
            cache_write=cache_write,
            output=output,
            reasoning=min(as_int(completion_details.get("reasoning_tokens")), output),
            requests=1,
        )
    if "input_tokens_details" in usage or "output_tokens_details" in usage:
        # OpenAI Responses API: input_tokens includes cached_tokens.
        given = as_int(usage.get("input_tokens"))
        cached = min(as_int(as_dict(usage.get("input_tokens_details")).get("cached_tokens")), given)
        output = as_int(usage.get("output_tokens"))
        reasoning = as_int(as_dict(usage.get("output_tokens_details")).get("reasoning_tokens"))
        return TokenUsage(
            input=given - cached,
            cache_read=cached,
            output=output,
            reasoning=min(reasoning, output),
            requests=1,
        )
    return messages_usage(usage)


def gemini_usage(tokens: dict[str, Any]) -> TokenUsage:
    """Gemini's counts under the Gemini CLI's names (``input`` = ``promptTokenCount``, which
    includes ``cached``; ``output`` = ``candidatesTokenCount``, which excludes ``thoughts``;
    ``tool`` = ``toolUsePromptTokenCount``, input read from tools)."""
    prompt = as_int(tokens.get("input"))
    cached = min(as_int(tokens.get("cached")), prompt)
    thoughts = as_int(tokens.get("thoughts"))
    return TokenUsage(
        input=prompt - cached + as_int(tokens.get("tool")),
        cache_read=cached,
        output=as_int(tokens.get("output")) + thoughts,
        reasoning=thoughts,
        requests=1,
    )
