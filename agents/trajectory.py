"""A seat's trajectory: what its agent did, as one ATIF trajectory (``atif`` package, v1.8).

Each seat gets ``arms/<arm>/agents/<seat>/trajectory.json``: its CLI's session records (Claude
Code, Codex, Gemini CLI, mini-swe-agent) normalised to ATIF steps — the prompts (the seat's
prompt, keep-going messages), the model's replies, its tool calls with their arguments and
results, each reply's tokens — with the submissions and board posts the seat made placed at
their times (from ``events.sqlite``). The scripted agents (no model) get one too, from their
notes log (moves, waits) and the same submissions and posts, marked ``scripted`` in
``agent.extra``. ``runner.supervisor`` writes it with the token rows, from one reading
(:func:`read_seat`): ``final_metrics`` are the token reader's totals, so the two cannot disagree.

Text is bounded: a message or tool result longer than :data:`TEXT_LIMIT` characters is cut in
the trajectory, and its full text is kept beside it in ``trajectory/<step>-<n>.txt`` (named in
the step's ``extra.full_text``).

Why our own conversion, not ``atif-make``'s: atif-make (0.10) needs Python >= 3.12 (swarmlab
supports 3.11), it converts only Claude Code and Codex (no Gemini CLI, no mini-swe-agent), and its
output is ATIF v1.7, while the ``atif`` models are v1.8. The conversion below is tested against
the CLIs' record fixtures in ``tests/analysis/fixtures/tokens`` (the same ones the token readers
are tested on).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.usage import (
    TokenUsage,
    UsageByModel,
    api_usage,
    as_dict,
    as_str,
    gemini_usage,
    json_records,
)

#: The ATIF version written (the ``atif`` package's models).
SCHEMA_VERSION = "ATIF-v1.8"
#: The longest message or tool result kept inline; the rest is on disk beside the file.
TEXT_LIMIT = 4000
#: The longest text kept in ``steps.text`` (runrecord.schema.STEP_TEXT_CHARS).
SHORT = 200


@dataclass
class Turn:
    """One step before it becomes ATIF: a message, a model reply, or an event of the run.

    Attributes:
        source: ``system``, ``user`` or ``agent`` (ATIF's step sources).
        at: Epoch seconds (0: unknown, kept in the record's order).
        text: The message or reply text.
        kind: The ``steps`` kind (runrecord.schema.STEP_KINDS).
        calls: Tool calls: (id, name, arguments).
        results: Tool results by call id.
        usage: The reply's tokens, if the record gave them.
        model: The model that replied.
        extra: What else to keep in the step's ``extra``.
    """

    source: str
    at: float
    text: str = ""
    kind: str = ""
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)
    usage: TokenUsage | None = None
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def epoch(value: Any) -> float:
    """An ISO 8601 time or epoch number as epoch seconds (0.0: none or unreadable)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) / (1000.0 if value > 1e12 else 1.0)
    if isinstance(value, str) and value:
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return 0.0
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    return 0.0


def _text(content: Any) -> str:
    """A message's text from any of the CLIs' content shapes."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") not in ("tool_use", "tool_result"):
                text = part.get("text") or part.get("thinking") or part.get("output")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(p for p in parts if p)
    if isinstance(content, dict):
        return _text(content.get("text") or content.get("content") or content.get("output"))
    return "" if content is None else json.dumps(content)


def _args(value: Any) -> dict[str, Any]:
    """Tool arguments as an object (a JSON string parsed; anything else wrapped)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"input": value}
        return parsed if isinstance(parsed, dict) else {"input": parsed}
    return {} if value is None else {"input": value}


# -- the CLIs' records -----------------------------------------------------------------------


def claude_code_turns(files: list[Path]) -> list[Turn]:
    """Claude Code's project JSONL: each API call as ``agents.clis.claude_code`` splits the lines
    into calls (one line per content block, lines of one call sharing its ids) is one step, with
    the usage the token reader counts for it; user lines are the prompts and the tool results."""
    from agents.clis.claude_code import claude_code_calls

    turns: list[Turn] = []
    calls_at: dict[str, Turn] = {}
    for counted, lines in claude_code_calls(files):
        turn = Turn("agent", 0.0, model=counted.model, usage=counted.usage)
        texts: list[str] = []
        for entry in lines:
            line = entry.line or {}
            at = epoch(line.get("timestamp"))
            turn.at = min(turn.at, at) if turn.at and at else turn.at or at
            content = as_dict(line.get("message")).get("content")
            for block in content if isinstance(content, list) else [content]:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    call_id = str(block.get("id"))
                    if call_id not in calls_at:  # a streamed line repeats the blocks before it
                        turn.calls.append(
                            (call_id, str(block.get("name")), _args(block.get("input")))
                        )
                        calls_at[call_id] = turn
                elif isinstance(block, dict) and block.get("type") == "thinking":
                    thought = str(block.get("thinking") or "")
                    if thought and thought not in turn.extra.get("reasoning", ""):
                        turn.extra["reasoning"] = turn.extra.get("reasoning", "") + thought
                else:
                    text = _text([block])
                    if text and text not in texts:
                        texts.append(text)
        turn.text = "\n".join(texts)
        turns.append(turn)
    users: set[str] = set()  # a resumed session replays its history under the same uuids
    for path in sorted(files):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for entry in json_records(text):
            if not isinstance(entry, dict) or entry.get("type") != "user":
                continue
            uuid = as_str(entry.get("uuid"))
            if uuid is not None and uuid in users:
                continue
            users.add(uuid or "")
            content = as_dict(entry.get("message")).get("content")
            blocks = content if isinstance(content, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            for block in results:
                owner = calls_at.get(str(block.get("tool_use_id")))
                if owner is not None:
                    owner.results[str(block.get("tool_use_id"))] = _text(block.get("content"))
            said = _text(content)
            if said and not results:
                turns.append(Turn("user", epoch(entry.get("timestamp")), said, kind="user"))
    return turns


def codex_turns(records: list[Any], seen: set[Any]) -> list[Turn]:
    """Codex's rollout JSONL: ``response_item`` messages, reasoning, function calls and their
    outputs; each ``token_count`` event's ``last_token_usage`` belongs to the reply before it."""
    turns: list[Turn] = []
    calls_at: dict[str, Turn] = {}
    model: str | None = None
    totals_seen: set[str] = set()
    current: Turn | None = None  # the reply being built (calls and text until the next user)
    for entry in records:
        if not isinstance(entry, dict):
            continue
        payload = as_dict(entry.get("payload"))
        at = epoch(entry.get("timestamp"))
        kind = entry.get("type")
        copy = (entry.get("timestamp"), json.dumps(payload, sort_keys=True))
        if copy in seen and kind != "turn_context":
            continue  # a forked rollout's copy of its parent's item, read from the parent
        seen.add(copy)
        if kind == "turn_context":
            model = as_str(payload.get("model")) or model
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = as_dict(payload.get("info"))
            last = as_dict(info.get("last_token_usage"))
            total = json.dumps(info.get("total_token_usage"), sort_keys=True)
            if not last or total in totals_seen:
                continue  # re-emitted (a rate-limit refresh): no new call (as agents.clis.codex)
            totals_seen.add(total)
            if current is None:
                current = Turn("agent", at, model=model)
                turns.append(current)
            call = api_usage(
                {
                    "input_tokens": last.get("input_tokens"),
                    "input_tokens_details": {"cached_tokens": last.get("cached_input_tokens")},
                    "output_tokens": last.get("output_tokens"),
                    "output_tokens_details": {
                        "reasoning_tokens": last.get("reasoning_output_tokens")
                    },
                }
            )
            if current.usage is None:
                current.usage = call
            else:
                current.usage.add(call)
        elif kind == "response_item":
            item = payload.get("type")
            if item == "message" and payload.get("role") in ("user", "developer", "system"):
                role = "user" if payload.get("role") == "user" else "system"
                turns.append(Turn(role, at, _text(payload.get("content")), kind=role))
                current = None
            elif item in ("message", "reasoning", "function_call", "custom_tool_call"):
                if current is None or current.usage is not None:
                    current = Turn("agent", at, model=model)
                    turns.append(current)
                if item == "message":
                    text = _text(payload.get("content"))
                    current.text = f"{current.text}\n{text}" if current.text else text
                elif item == "reasoning":
                    summary = payload.get("summary")
                    current.extra["reasoning"] = _text(summary)
                else:
                    call_id = str(payload.get("call_id"))
                    arguments = payload.get("arguments", payload.get("input"))
                    current.calls.append((call_id, str(payload.get("name")), _args(arguments)))
                    calls_at[call_id] = current
            elif item in ("function_call_output", "custom_tool_call_output"):
                call_id = str(payload.get("call_id"))
                owner = calls_at.get(call_id)
                if owner is not None:
                    output = payload.get("output")
                    parsed = _args(output) if isinstance(output, str) else as_dict(output)
                    owner.results[call_id] = _text(parsed.get("output", output))
    return turns


def gemini_turns(records: list[Any], seen: set[Any]) -> list[Turn]:
    """Gemini CLI's chat record (one JSON document, or JSON lines of messages): ``user`` and
    ``gemini`` messages, each reply's ``toolCalls`` (with their ``result`` where written) and
    ``tokens``."""
    messages: list[dict[str, Any]] = []
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("messages"), list):
            messages.extend(m for m in record["messages"] if isinstance(m, dict))
        elif isinstance(record, dict) and record.get("type") in ("user", "gemini", "info"):
            messages.append(record)
    # The JSONL form rewrites a message as it streams: its last version stands, in its place.
    latest: dict[str, dict[str, Any]] = {}
    for n, message in enumerate(messages):
        ident = as_str(message.get("id"))
        if ident is not None and ident in seen:
            continue  # the same session in its other form (.json and .jsonl)
        latest[ident or f"#{n}"] = message
    seen.update(latest)
    turns: list[Turn] = []
    for message in latest.values():
        at = epoch(message.get("timestamp"))
        if message.get("type") == "user":
            turns.append(Turn("user", at, _text(message.get("content")), kind="user"))
        elif message.get("type") == "gemini":
            turn = Turn(
                "agent", at, _text(message.get("content")), model=as_str(message.get("model"))
            )
            for call in message.get("toolCalls") or []:
                if not isinstance(call, dict):
                    continue
                call_id = str(call.get("id"))
                turn.calls.append((call_id, str(call.get("name")), _args(call.get("args"))))
                if call.get("result") is not None:
                    turn.results[call_id] = _text(call.get("result"))
            tokens = as_dict(message.get("tokens"))
            if tokens:
                turn.usage = gemini_usage(tokens)
            turns.append(turn)
    return turns


def mini_swe_turns(records: list[Any], seen: set[Any]) -> list[Turn]:
    """mini-swe-agent's ``.traj.json``: chat ``messages`` (system, user, assistant with
    ``tool_calls`` or an action in its text, tool results); each reply's usage in
    ``extra.response``."""
    turns: list[Turn] = []
    calls_at: dict[str, Turn] = {}
    for record in records:
        for message in as_dict(record).get("messages") or []:
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            extra = as_dict(message.get("extra"))
            response = as_dict(extra.get("response"))
            at = epoch(extra.get("timestamp") or response.get("created"))
            # A call's usage: under extra.response (Chat Completions; also a user message after
            # a format error), or the message itself (Responses API), as agents.clis.mini_swe.
            usage = as_dict(response.get("usage")) or as_dict(message.get("usage"))
            if role in ("system", "user"):
                if usage:  # the model's reply that failed to parse, answered by this message
                    turns.append(Turn("agent", at, "(reply not parsed)", usage=api_usage(usage)))
                turns.append(Turn(role, at, _text(message.get("content")), kind=role))
            elif role == "assistant":
                turn = Turn(
                    "agent", at, _text(message.get("content")), model=as_str(response.get("model"))
                )
                for call in message.get("tool_calls") or []:
                    function = as_dict(as_dict(call).get("function"))
                    call_id = str(as_dict(call).get("id"))
                    turn.calls.append(
                        (call_id, str(function.get("name")), _args(function.get("arguments")))
                    )
                    calls_at[call_id] = turn
                if not turn.calls:
                    for n, action in enumerate(extra.get("actions") or []):
                        command = as_dict(action).get("command")
                        if command:
                            turn.calls.append(
                                (f"action-{len(turns)}-{n}", "bash", {"command": command})
                            )
                if usage:
                    turn.usage = api_usage(usage)
                turns.append(turn)
            elif message.get("object") == "response":  # a Responses-API reply, stored whole
                turn = Turn(
                    "agent",
                    at or epoch(message.get("created_at")),
                    model=as_str(message.get("model")),
                )
                for item in message.get("output") or []:
                    item = as_dict(item)
                    if item.get("type") == "function_call":
                        call_id = str(item.get("call_id"))
                        turn.calls.append(
                            (call_id, str(item.get("name")), _args(item.get("arguments")))
                        )
                        calls_at[call_id] = turn
                    elif item.get("type") == "message":
                        turn.text += _text(item.get("content"))
                if usage:
                    turn.usage = api_usage(usage)
                turns.append(turn)
            elif message.get("type") == "function_call_output":
                owner = calls_at.get(str(message.get("call_id")))
                if owner is not None:
                    owner.results[str(message.get("call_id"))] = _text(message.get("output"))
            elif role == "tool":
                owner = calls_at.get(str(message.get("tool_call_id")))
                if owner is not None:
                    owner.results[str(message.get("tool_call_id"))] = _text(message.get("content"))
    return turns


READERS = {
    "codex": codex_turns,
    "gemini": gemini_turns,
    "mini_swe": mini_swe_turns,
}


def record_turns(files: Iterable[Path], fmt: str) -> list[Turn]:
    """Every file's turns, in time order (a file that cannot be read adds none)."""
    if fmt == "claude_code":
        return sorted(claude_code_turns(list(files)), key=lambda t: t.at)
    reader = READERS.get(fmt)
    if reader is None:
        return []
    turns: list[Turn] = []
    seen: set[Any] = set()  # what one file repeats of another (see each reader)
    for path in sorted(files):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        turns.extend(reader(json_records(text), seen))
    return sorted(turns, key=lambda t: t.at)


# -- the run's own events, and the scripted agents ---------------------------------------------


def event_turns(submissions: list[dict[str, Any]], posts: list[dict[str, Any]]) -> list[Turn]:
    """The seat's submissions and board posts (rows of events.sqlite) as steps at their times."""
    turns = [
        Turn(
            "agent",
            float(s["at"]),
            f"submit {str(s['commit_sha'])[:12]}: {s.get('message') or ''}".strip(),
            kind="submit",
            extra={
                "swarmlab": "submit",
                "request_id": s["request_id"],
                "commit": s["commit_sha"],
                "job_id": s.get("job_id"),
            },
        )
        for s in submissions
    ]
    turns += [
        Turn(
            "agent",
            float(p["at"]),
            f"[{p['kind']}] {p['text']}",
            kind="post",
            extra={"swarmlab": "post", "message_id": p["id"], "post_kind": p["kind"]},
        )
        for p in posts
    ]
    return turns


_NOTE = re.compile(r"^- (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (.*)$")


def scripted_turns(notes_log: Path) -> list[Turn]:
    """A scripted agent's notes log (``- <local time> <line>``) as its moves and waits."""
    try:
        lines = notes_log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    turns = []
    for line in lines:
        match = _NOTE.match(line)
        if not match:
            continue
        at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
        text = match.group(2)
        kind = "wait" if text.startswith(("waiting", "nothing left")) else "move"
        turns.append(Turn("agent", at, text, kind=kind, extra={"swarmlab": kind}))
    return turns


# -- ATIF ------------------------------------------------------------------------------------


@dataclass
class SeatTrajectory:
    """One reading of a seat: its ATIF document, the ``steps`` rows, and the full texts."""

    document: dict[str, Any]
    rows: list[dict[str, Any]]
    full_texts: dict[str, str]


def _bounded(text: str, step: int, n: int, full: dict[str, str]) -> tuple[str, str | None]:
    if len(text) <= TEXT_LIMIT:
        return text, None
    name = f"{step:06d}-{n}.txt"
    full[name] = text
    return text[:TEXT_LIMIT] + f"\n[... {len(text) - TEXT_LIMIT} more characters in {name}]", name


def build(
    turns: list[Turn],
    *,
    seat: str,
    agent_name: str,
    source: str,
    usage: UsageByModel | None = None,
    scripted: bool = False,
) -> SeatTrajectory:
    """Number the turns (time order) into an ATIF trajectory and its ``steps`` rows.

    Args:
        turns: The seat's turns, from its records and the run's events.
        seat: The seat's name (the trajectory's session id).
        agent_name: The CLI or program.
        source: The ``steps.source`` (the record format, or ``scripted``).
        usage: The token reader's totals, written as ``final_metrics`` (so the file and the
            ``tokens`` table say the same).
        scripted: A scripted agent's (no model).

    Returns:
        The document (validated by ``atif.Trajectory``), the rows, the full texts by name.
    """
    import atif  # the models validate what is written; imported here: only writers need it

    ordered = sorted(turns, key=lambda t: t.at)
    steps: list[atif.Step] = []
    rows: list[dict[str, Any]] = []
    full: dict[str, str] = {}
    for number, turn in enumerate(ordered, start=1):
        message, name = _bounded(turn.text, number, 0, full)
        extra = dict(turn.extra)
        if name:
            extra["full_text"] = [name]
        kind = turn.kind or ("tool" if turn.calls else "agent")
        calls = None
        observation = None
        if turn.calls:
            calls = [
                atif.ToolCall(tool_call_id=i, function_name=f, arguments=a)
                for i, f, a in turn.calls
            ]
            results = []
            for n, (call_id, _, _) in enumerate(turn.calls, start=1):
                if call_id not in turn.results:
                    continue
                content, name = _bounded(turn.results[call_id], number, n, full)
                if name:
                    extra.setdefault("full_text", []).append(name)
                results.append(atif.ObservationResult(source_call_id=call_id, content=content))
            if results:
                observation = atif.Observation(results=results)
            pending = [i for i, _, _ in turn.calls if i not in turn.results]
            if pending:
                extra["pending_calls"] = pending
        metrics = None
        if turn.usage is not None:
            u = turn.usage
            metrics = atif.Metrics(
                prompt_tokens=u.input + u.cache_read + u.cache_write,
                completion_tokens=u.output,
                cached_tokens=u.cache_read,
                extra={"cache_write": u.cache_write, "reasoning": u.reasoning},
            )
        reasoning = extra.pop("reasoning", None)
        steps.append(
            atif.Step(
                step_id=number,
                timestamp=(
                    datetime.fromtimestamp(turn.at, UTC).isoformat().replace("+00:00", "Z")
                    if turn.at
                    else None
                ),
                source=turn.source,
                model_name=turn.model if turn.source == "agent" else None,
                message=message,
                reasoning_content=reasoning or None,
                tool_calls=calls,
                observation=observation,
                metrics=metrics,
                extra=extra or None,
            )
        )
        rows.append(
            {
                "step": number,
                "at": turn.at,
                "kind": kind,
                "tool": ",".join(f for _, f, _ in turn.calls),
                "tokens": (
                    turn.usage.input
                    + turn.usage.cache_read
                    + turn.usage.cache_write
                    + turn.usage.output
                )
                if turn.usage
                else None,
                "text": " ".join((turn.text or ",".join(f for _, f, _ in turn.calls)).split())[
                    :SHORT
                ],
                "source": source,
            }
        )
    totals = TokenUsage(model="")
    for part in usage.usage.values() if usage else []:
        totals.add(part)
    models = sorted(usage.usage) if usage else []
    trajectory = atif.Trajectory(
        schema_version=SCHEMA_VERSION,
        session_id=seat,
        agent=atif.Agent(
            name=agent_name,
            version="scripted" if scripted else "unknown",
            model_name=models[0] if len(models) == 1 else None,
            extra={"scripted": scripted, "seat": seat, "models": models},
        ),
        steps=steps,
        final_metrics=atif.FinalMetrics(
            total_prompt_tokens=totals.input + totals.cache_read + totals.cache_write,
            total_completion_tokens=totals.output,
            total_cached_tokens=totals.cache_read,
            total_steps=len(steps),
            extra={"requests": totals.requests, "cache_write": totals.cache_write},
        ),
    )
    document = trajectory.model_dump(mode="json", exclude_none=True)
    return SeatTrajectory(document, rows, full)


def write(folder: Path, seat: SeatTrajectory) -> Path:
    """Write ``trajectory.json`` and the full texts (``trajectory/``) into a seat's folder.

    Returns:
        The trajectory file's path.
    """
    path = folder / "trajectory.json"
    if seat.full_texts:
        texts = folder / "trajectory"
        texts.mkdir(parents=True, exist_ok=True)
        for name, text in seat.full_texts.items():
            (texts / name).write_text(text, encoding="utf-8")
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(seat.document, indent=1), encoding="utf-8")
    partial.replace(path)  # a reader never sees a half-written file
    return path
