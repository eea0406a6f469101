"""Token totals read from a coding agent's own session record.

``python -m analysis.tokens FILE [--format auto|claude_code|codex|gemini|mini_swe]`` prints one
JSON object: ``input`` (uncached input), ``cache_read``, ``cache_write``, ``output`` (every
generated token, reasoning included), ``reasoning`` (the part of ``output`` the record marks as
reasoning; 0 where the format does not say), ``requests`` (distinct API calls counted), ``format``,
``model`` (the one model, or null when there were several), ``models`` (the same counts per
model) and ``cost_estimate`` — the cost the CLI itself wrote into its record, if it wrote one,
labelled by ``cost_estimate_source``; it is the CLI's estimate, not a price computed here.

FILE may also be a directory: every ``*.json``/``*.jsonl`` file under it whose format matches
(``--format``, or the one format found there with ``auto``) is read, and the duplicate rules
below apply across the files too, so a resumed or forked session copied into a second file is
still counted once. Pass a whole Claude Code project directory to include subagent transcripts,
which newer Claude Code writes to ``<session>/subagents/*.jsonl``.

What each record does that a plain sum gets wrong:

* ``claude_code`` (``~/.claude/projects/<project>/<session>.jsonl``): one line per content block,
  all repeating the usage of their API call under the same ``message.id`` and ``requestId``, an
  early streaming line carrying a partial ``output_tokens``. One entry is kept per (message id,
  request id) — the one with the largest usage — and a line without ``requestId`` is keyed on its
  message id alone. Resumed sessions replay history under the same ids, so they count once. A
  sidechain (subagent) line that replays a main-chain message under a new request id is dropped;
  sidechain lines of their own count. ``input_tokens`` excludes the cache.
* ``codex``: the rollout (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) writes ``token_count``
  events whose ``total_token_usage`` is cumulative and which are re-emitted unchanged; an event
  counts only when the total moved, and then with its ``last_token_usage`` (the difference of
  totals when that is missing). A forked rollout opens with a copy of its parent's events, which
  counts once when both files are read together. ``codex exec --json`` stdout reports on
  ``turn.completed`` the thread's running total, so the last value is taken (a total that falls
  starts a new thread, whose last value is added). ``input_tokens`` includes
  ``cached_input_tokens`` and ``output_tokens`` includes ``reasoning_output_tokens``.
* ``gemini`` (``~/.gemini/tmp/<project>/chats/session-*.jsonl``, or the older single ``.json``):
  a message is appended again under the same ``id`` each time it changes (tokens arrive, tool
  calls finish, a history checkpoint); one copy per id is kept, the one with the largest total.
  ``input`` (``promptTokenCount``) includes ``cached``; ``output`` (``candidatesTokenCount``)
  excludes ``thoughts``, which are added to ``output`` and reported as ``reasoning``; ``tool``
  (``toolUsePromptTokenCount``) is input the model read from tools and is added to ``input``.
* ``mini_swe`` (``*.traj.json``): each model call keeps its own usage in its message (the raw
  response under ``extra.response``, or the message itself for Responses-API models); the calls
  are summed. LiteLLM's ``prompt_tokens`` includes cache reads and writes, so both are
  subtracted; the tool's own cost is ``info.model_stats.instance_cost``.

Bad input (a format that cannot be told or is unknown, a file that cannot be read, a record with
no usage in it) raises :class:`TokenRecordError`; the command prints it as one line on stderr
and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agents.usage import (
    TokenRecordError,
    TokenUsage,
)
from agents.usage import UsageByModel as _Result
from agents.usage import api_usage as _api_usage
from agents.usage import as_dict as _dict
from agents.usage import as_float as _float
from agents.usage import as_int as _int
from agents.usage import as_str as _str
from agents.usage import gemini_usage as _gemini_usage
from agents.usage import json_records as _records
from agents.usage import messages_usage as _claude_usage
from agents.usage import read_text as _read_text

__all__ = [
    "FORMATS",
    "TokenRecordError",
    "TokenUsage",
    "detect_format",
    "main",
    "read_usage",
    "summarise",
]

FORMATS: tuple[str, ...] = ("claude_code", "codex", "gemini", "mini_swe")
_SUFFIXES = (".json", ".jsonl")
# Enough lines to get past a record's metadata to a line that names its format.
_SNIFF_LINES = 200

_COST_SOURCES = {
    "claude_code": "claude_code costUSD on the transcript lines (the CLI's own estimate)",
    "mini_swe": "mini_swe info.model_stats.instance_cost (the CLI's own LiteLLM estimate)",
}


# -- format detection ------------------------------------------------------------------------

_CODEX_ROLLOUT_TYPES = {"session_meta", "turn_context", "event_msg", "response_item", "compacted"}
_CODEX_EXEC_PREFIXES = {"thread", "turn", "item"}


def _classify_document(obj: Any) -> str | None:
    if isinstance(obj, list):
        # mini-swe-agent's oldest trajectories were a bare list of chat messages.
        if obj and all(isinstance(m, dict) and "role" in m for m in obj):
            return "mini_swe"
        return None
    if not isinstance(obj, dict):
        return None
    if str(obj.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return "mini_swe"
    if isinstance(obj.get("messages"), list) and "model_stats" in _dict(obj.get("info")):
        return "mini_swe"
    if "sessionId" in obj and "projectHash" in obj:
        return "gemini"
    return None


def _classify_line(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    kind = obj.get("type")
    if kind in _CODEX_ROLLOUT_TYPES and isinstance(obj.get("payload"), dict):
        return "codex"
    if isinstance(kind, str) and kind.split(".", 1)[0] in _CODEX_EXEC_PREFIXES and "." in kind:
        return "codex"
    if "$rewindTo" in obj or "$set" in obj or "projectHash" in obj:
        return "gemini"
    if isinstance(obj.get("message"), dict) and any(
        key in obj for key in ("uuid", "parentUuid", "requestId", "isSidechain")
    ):
        return "claude_code"
    if kind == "summary" and "leafUuid" in obj:
        return "claude_code"
    if kind == "gemini" and isinstance(obj.get("id"), str):
        return "gemini"
    return None


def _detect_file(path: Path) -> str | None:
    records = _records(_read_text(path))
    if len(records) == 1 and (found := _classify_document(records[0])):
        return found
    for obj in records[:_SNIFF_LINES]:
        if found := _classify_line(obj):
            return found
    return None


def _files_under(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in _SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _one_format(path: Path, found: set[str]) -> str:
    if len(found) == 1:
        return next(iter(found))
    if not found:
        raise TokenRecordError(f"no session record of a known format under {path}")
    raise TokenRecordError(
        f"{path} holds records of several formats ({', '.join(sorted(found))}); pass --format"
    )


def detect_format(path: str | Path) -> str:
    """Tell which CLI wrote a session record.

    Args:
        path: A record file, or a directory holding records of one format.

    Returns:
        One of :data:`FORMATS`.

    Raises:
        TokenRecordError: The path cannot be read, or its format cannot be told (or, for a
            directory, it holds records of more than one format).
    """
    path = Path(path)
    if not path.exists():
        raise TokenRecordError(f"no such file or directory: {path}")
    if path.is_dir():
        return _one_format(path, {fmt for p in _files_under(path) if (fmt := _detect_file(p))})
    found = _detect_file(path)
    if found is None:
        raise TokenRecordError(
            f"cannot tell the format of {path}; pass --format {'|'.join(FORMATS)}"
        )
    return found


# -- Claude Code -----------------------------------------------------------------------------


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
        for obj in _records(_read_text(path)):
            if not isinstance(obj, dict):
                continue
            message = _dict(obj.get("message"))
            usage = message.get("usage")
            if not isinstance(usage, dict):
                continue
            model = _str(message.get("model"))
            if model == "<synthetic>":
                # Claude Code's own stand-in for an error message: no API call behind it.
                continue
            yield _ClaudeEntry(
                message_id=_str(message.get("id")),
                request_id=_str(obj.get("requestId")),
                sidechain=obj.get("isSidechain") is True,
                model=model,
                usage=_claude_usage(usage),
                cost=_float(obj.get("costUSD")),
            )


def _read_claude_code(paths: list[Path]) -> _Result:
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

    result = _Result()
    for entry in chosen:
        entry.usage.cost_estimate = entry.cost
        result.add(entry.model, entry.usage)
    return result


# -- Codex CLI -------------------------------------------------------------------------------

_CODEX_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
)


def _codex_vector(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, dict):
        return None
    return tuple(_int(value.get(name)) for name in _CODEX_FIELDS)


def _codex_usage(vector: tuple[int, ...]) -> TokenUsage:
    given, cached, output, reasoning, _total = vector
    cached = min(cached, given)
    return TokenUsage(
        input=given - cached,
        cache_read=cached,
        output=output,
        reasoning=min(reasoning, output),
        requests=1,
    )


def _read_codex_rollout(records: list[Any], seen_elsewhere: set[Any], result: _Result) -> bool:
    """Add a rollout's token_count events to ``result``; return whether it had any."""
    model: str | None = None
    previous: tuple[int, ...] | None = None
    totals_seen: set[tuple[int, ...]] = set()
    found = False
    for obj in records:
        if not isinstance(obj, dict):
            continue
        payload = _dict(obj.get("payload"))
        if obj.get("type") == "turn_context":
            model = _str(payload.get("model")) or model
            continue
        if obj.get("type") != "event_msg" or payload.get("type") != "token_count":
            continue
        info = _dict(payload.get("info"))
        total = _codex_vector(info.get("total_token_usage"))
        if total is None:
            # The first event of a session carries only rate limits.
            continue
        found = True
        if total in totals_seen:
            # Re-emitted after a rate-limit or UI refresh: the same total, no new call.
            continue
        totals_seen.add(total)
        key = (obj.get("timestamp"), total)
        if key in seen_elsewhere:
            # A forked rollout's copy of its parent's event, already counted from the parent.
            previous = total
            continue
        seen_elsewhere.add(key)
        last = _codex_vector(info.get("last_token_usage"))
        if last is None:
            if previous is not None and all(t >= p for t, p in zip(total, previous, strict=True)):
                last = tuple(t - p for t, p in zip(total, previous, strict=True))
            else:
                last = total
        previous = total
        usage = _codex_usage(last)
        result.add(_str(info.get("model")) or model, usage)
    return found


def _read_codex_exec(records: list[Any], result: _Result) -> None:
    """Add ``codex exec --json`` stdout, whose ``turn.completed`` usage is a running total."""
    segment_last: tuple[int, ...] | None = None
    segments: list[tuple[tuple[int, ...], int]] = []
    turns = 0
    for obj in records:
        if not isinstance(obj, dict) or obj.get("type") != "turn.completed":
            continue
        usage = _dict(obj.get("usage"))
        current = (
            _int(usage.get("input_tokens")),
            _int(usage.get("cached_input_tokens")),
            _int(usage.get("output_tokens")),
            # Newer releases (0.171 seen) report it; older ones leave it out (then 0).
            _int(usage.get("reasoning_output_tokens")),
        )
        if segment_last is not None and any(
            c < p for c, p in zip(current, segment_last, strict=True)
        ):
            # The running total fell: a new thread began, so the old one's last total stands.
            segments.append((segment_last, turns))
            turns = 0
        if current != segment_last:
            turns += 1
        segment_last = current
    if segment_last is not None:
        segments.append((segment_last, turns))
    for (given, cached, output, reasoning), counted in segments:
        cached = min(cached, given)
        # ``requests`` counts turns here: exec stdout does not show the API calls of a turn.
        result.add(
            None,
            TokenUsage(
                input=given - cached,
                cache_read=cached,
                output=output,
                reasoning=min(reasoning, output),
                requests=counted,
            ),
        )


def _read_codex(paths: list[Path]) -> _Result:
    result = _Result()
    seen_elsewhere: set[Any] = set()
    for path in paths:
        records = _records(_read_text(path))
        # A file is a rollout or exec stdout; the rollout is the fuller record if both appear.
        if not _read_codex_rollout(records, seen_elsewhere, result):
            _read_codex_exec(records, result)
    return result


# -- Gemini CLI ------------------------------------------------------------------------------


def _gemini_messages(records: list[Any]) -> Iterator[dict[str, Any]]:
    for obj in records:
        if not isinstance(obj, dict):
            continue
        # Metadata with the messages inline: the older single-JSON session, or a checkpoint.
        for holder in (obj, _dict(obj.get("$set"))):
            messages = holder.get("messages")
            if isinstance(messages, list):
                yield from (m for m in messages if isinstance(m, dict))
        if isinstance(obj.get("id"), str) and "$set" not in obj:
            yield obj


def _gemini_size(tokens: dict[str, Any]) -> int:
    total = _int(tokens.get("total"))
    return total or sum(_int(tokens.get(k)) for k in ("input", "output", "thoughts", "tool"))


def _read_gemini(paths: list[Path]) -> _Result:
    # Rewinds ($rewindTo) are ignored on purpose: a rewound reply was still paid for.
    kept: dict[str, dict[str, Any]] = {}
    for path in paths:
        for message in _gemini_messages(_records(_read_text(path))):
            tokens = message.get("tokens")
            message_id = message.get("id")
            if message.get("type") != "gemini" or not isinstance(tokens, dict):
                continue
            if not isinstance(message_id, str):
                continue
            old = kept.get(message_id)
            # Later copies of a message only ever gain tokens; a tie keeps the later copy.
            if old is None or _gemini_size(tokens) >= _gemini_size(old["tokens"]):
                kept[message_id] = message
    result = _Result()
    for message in kept.values():
        result.add(_str(message.get("model")), _gemini_usage(message["tokens"]))
    return result


# -- mini-swe-agent --------------------------------------------------------------------------


def _mini_swe_calls(
    messages: list[Any],
) -> Iterator[tuple[str | None, str | None, dict[str, Any], float | None]]:
    for message in messages:
        if not isinstance(message, dict):
            continue
        extra = _dict(message.get("extra"))
        response = _dict(extra.get("response"))
        if isinstance(response.get("usage"), dict):
            # Chat Completions models, and any model's call that ended in a format error.
            yield (
                _str(response.get("id")),
                _str(response.get("model")),
                response["usage"],
                _float(extra.get("cost")),
            )
        elif isinstance(message.get("usage"), dict):
            # Responses-API models store the response itself as the message.
            yield (
                _str(message.get("id")),
                _str(message.get("model")),
                message["usage"],
                _float(extra.get("cost")),
            )


def _read_mini_swe(paths: list[Path]) -> _Result:
    result = _Result()
    seen_ids: set[str] = set()
    for path in paths:
        records = _records(_read_text(path))
        document = records[0] if len(records) == 1 else None
        if isinstance(document, dict):
            messages = document.get("messages")
            info = _dict(document.get("info"))
        else:
            messages, info = document, {}
        if not isinstance(messages, list):
            continue
        configured = _str(_dict(_dict(info.get("config")).get("model")).get("model_name"))
        file_result = _Result()
        for response_id, model, usage, cost in _mini_swe_calls(messages):
            if response_id is not None:
                if response_id in seen_ids:
                    continue
                seen_ids.add(response_id)
            call = _api_usage(usage)
            call.cost_estimate = cost
            file_result.add(model or configured, call)
        instance_cost = _float(_dict(info.get("model_stats")).get("instance_cost"))
        if instance_cost is not None and len(file_result.usage) == 1:
            # The tool's own total wins over the sum of per-call costs where it can be placed.
            next(iter(file_result.usage.values())).cost_estimate = instance_cost
        call_costs = [u.cost_estimate for u in file_result.usage.values()]
        file_cost = instance_cost
        if file_cost is None and any(c is not None for c in call_costs):
            file_cost = sum(c for c in call_costs if c is not None)
        for name, usage in file_result.usage.items():
            result.add(name, usage)
        if file_cost is not None:
            result.cost_total = (result.cost_total or 0.0) + file_cost
    return result


# -- the public API --------------------------------------------------------------------------

_READERS = {
    "claude_code": _read_claude_code,
    "codex": _read_codex,
    "gemini": _read_gemini,
    "mini_swe": _read_mini_swe,
}


def _read(path: Path, format: str) -> tuple[str, _Result]:
    if format != "auto" and format not in FORMATS:
        raise TokenRecordError(
            f"unknown format {format!r}; expected auto or one of {', '.join(FORMATS)}"
        )
    if not path.exists():
        raise TokenRecordError(f"no such file or directory: {path}")
    if path.is_dir():
        # Sniff each file once: a project directory can hold hundreds of megabytes of records.
        detected = {p: _detect_file(p) for p in _files_under(path)}
        found = {fmt for fmt in detected.values() if fmt is not None}
        fmt = _one_format(path, found) if format == "auto" else format
        files = [p for p, found_fmt in detected.items() if found_fmt == fmt]
        if not files:
            raise TokenRecordError(f"no {fmt} session record under {path}")
    else:
        fmt = detect_format(path) if format == "auto" else format
        files = [path]
    result = _READERS[fmt](files)
    if not result.usage:
        raise TokenRecordError(f"no {fmt} token usage found in {path}")
    return fmt, result


def read_usage(path: str | Path, format: str = "auto") -> dict[str, TokenUsage]:
    """Read a session record's normalised token usage, per model.

    Args:
        path: A record file, or a directory whose files of the format are summed.
        format: ``auto`` (detect), or one of :data:`FORMATS`.

    Returns:
        The usage of each model, keyed by the model name as the record spells it
        (``unknown`` where the record does not name one).

    Raises:
        TokenRecordError: The format is unknown or cannot be told, the path cannot be read, or
            it holds no token usage of that format.
    """
    return _read(Path(path), format)[1].usage


def summarise(path: str | Path, format: str = "auto") -> dict[str, Any]:
    """Build the JSON object ``python -m analysis.tokens`` prints.

    Args:
        path: A record file, or a directory whose files of the format are summed.
        format: ``auto`` (detect), or one of :data:`FORMATS`.

    Returns:
        The totals over all models (``input``, ``cache_read``, ``cache_write``, ``output``,
        ``reasoning``, ``requests``), ``format``, ``path``, ``model`` (null if several),
        ``models`` (per-model counts), ``cost_estimate`` and ``cost_estimate_source``.

    Raises:
        TokenRecordError: As :func:`read_usage`.
    """
    fmt, result = _read(Path(path), format)
    total = TokenUsage(model="")
    for usage in result.usage.values():
        total.add(usage)
    cost = result.cost_total if result.cost_total is not None else total.cost_estimate
    models = {
        name: {k: v for k, v in asdict(u).items() if k != "model"}
        for name, u in sorted(result.usage.items())
    }
    return {
        "format": fmt,
        "path": str(path),
        "input": total.input,
        "cache_read": total.cache_read,
        "cache_write": total.cache_write,
        "output": total.output,
        "reasoning": total.reasoning,
        "requests": total.requests,
        "model": next(iter(result.usage)) if len(result.usage) == 1 else None,
        "models": models,
        "cost_estimate": cost,
        "cost_estimate_source": _COST_SOURCES.get(fmt) if cost is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the command line: print one record's totals as one JSON object.

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 on success, 2 on bad input (with one line on stderr).
    """
    parser = argparse.ArgumentParser(
        prog="python -m analysis.tokens",
        description="Normalised token totals of one coding-agent session record (or directory).",
    )
    parser.add_argument("path", metavar="FILE", help="session record file, or a directory")
    # Checked by hand rather than with choices=, so a wrong value gets the one-line error.
    parser.add_argument(
        "--format", default="auto", help=f"auto (default) or one of: {', '.join(FORMATS)}"
    )
    args = parser.parse_args(argv)
    try:
        report = summarise(args.path, args.format)
    except TokenRecordError as exc:
        print(f"analysis.tokens: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
