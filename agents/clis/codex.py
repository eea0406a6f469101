"""Codex (``agent=codex``): OpenAI's CLI, a static musl native binary from npm.

**Invocation.** ``codex exec --json --dangerously-bypass-approvals-and-sandbox
--skip-git-repo-check -m M -c model_provider=swarmlab -c model_providers.swarmlab={base_url=...,
env_key=OPENAI_API_KEY, wire_api="responses"} -c otel.metrics_exporter=none
-c analytics.enabled=false -c features.plugins=false -c web_search="disabled" PROMPT``: the
container is the sandbox (Codex's own needs landlock/seccomp, which a capability-less container
does not give it); a provider of our own naming reads the key from ``env_key`` without
``codex login`` and speaks HTTP streaming (no websocket); without
``otel.metrics_exporter=none`` Codex spends ~5 s at exit on a DNS lookup of its metrics host
that the internal network never answers. Resume: ``codex exec resume --last`` ("resume the most
recent recorded session", filtered by the working directory).

**Retries.** ``error`` events whose message starts with ``Reconnecting`` (no delay announced).

**Record.** The rollout (``$HOME/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) writes
``token_count`` events whose ``total_token_usage`` is cumulative and which are re-emitted
unchanged; an event counts only when the total moved, and then with its ``last_token_usage``
(the difference of totals when that is missing). A forked rollout opens with a copy of its
parent's events, which counts once when both files are read together. ``codex exec --json``
stdout reports on ``turn.completed`` the thread's running total, so the last value is taken (a
total that falls starts a new thread, whose last value is added). ``input_tokens`` includes
``cached_input_tokens`` and ``output_tokens`` includes ``reasoning_output_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.clis.base import CONTAINER_PATH, Client
from agents.clis.claude_code import stream_json_events
from agents.clis.registry import register_cli
from agents.usage import TokenUsage, UsageByModel, as_dict, as_int, as_str, json_records, read_text

_ROLLOUT_TYPES = {"session_meta", "turn_context", "event_msg", "response_item", "compacted"}
_EXEC_PREFIXES = {"thread", "turn", "item"}

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
    return tuple(as_int(value.get(name)) for name in _CODEX_FIELDS)


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


def _read_codex_rollout(records: list[Any], seen_elsewhere: set[Any], result: UsageByModel) -> bool:
    """Add a rollout's token_count events to ``result``; return whether it had any."""
    model: str | None = None
    previous: tuple[int, ...] | None = None
    totals_seen: set[tuple[int, ...]] = set()
    found = False
    for obj in records:
        if not isinstance(obj, dict):
            continue
        payload = as_dict(obj.get("payload"))
        if obj.get("type") == "turn_context":
            model = as_str(payload.get("model")) or model
            continue
        if obj.get("type") != "event_msg" or payload.get("type") != "token_count":
            continue
        info = as_dict(payload.get("info"))
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
        result.add(as_str(info.get("model")) or model, usage)
    return found


def _read_codex_exec(records: list[Any], result: UsageByModel) -> None:
    """Add ``codex exec --json`` stdout, whose ``turn.completed`` usage is a running total."""
    segment_last: tuple[int, ...] | None = None
    segments: list[tuple[tuple[int, ...], int]] = []
    turns = 0
    for obj in records:
        if not isinstance(obj, dict) or obj.get("type") != "turn.completed":
            continue
        usage = as_dict(obj.get("usage"))
        current = (
            as_int(usage.get("input_tokens")),
            as_int(usage.get("cached_input_tokens")),
            as_int(usage.get("output_tokens")),
            # Newer releases (0.171 seen) report it; older ones leave it out (then 0).
            as_int(usage.get("reasoning_output_tokens")),
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


def read_codex(paths: list[Path]) -> UsageByModel:
    """Codex rollouts' and exec stdout's usage (the rules are in the module's docstring)."""
    result = UsageByModel()
    seen_elsewhere: set[Any] = set()
    for path in paths:
        records = json_records(read_text(path))
        # A file is a rollout or exec stdout; the rollout is the fuller record if both appear.
        if not _read_codex_rollout(records, seen_elsewhere, result):
            _read_codex_exec(records, result)
    return result


@dataclass(frozen=True)
class Codex(Client):
    """Codex; ``path_dirs`` holds its ``rg``."""

    def _exec(self) -> list[str]:
        prefix = [f"{self.container_dir}/{self._resolve(d)}" for d in self.path_dirs]
        return [
            "/usr/bin/env",
            f"PATH={':'.join([*prefix, CONTAINER_PATH])}",
            self.container_binary,
            "exec",
        ]

    def _options(self, model: str, environ: Mapping[str, str] | None) -> list[str]:
        provider = (
            f'{{name="swarmlab",base_url="{self.base_url(environ)}",'
            f'env_key="{self.key_env}",wire_api="responses"}}'
        )
        return [
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "-m",
            model,
            "-c",
            "model_provider=swarmlab",
            "-c",
            f"model_providers.swarmlab={provider}",
            "-c",
            "check_for_update_on_startup=false",
            "-c",
            "otel.metrics_exporter=none",
            "-c",
            "analytics.enabled=false",
            "-c",
            "features.plugins=false",
            # No web search: the vendor would search the web for the seat (see the proxy).
            "-c",
            'web_search="disabled"',
        ]

    def command(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        return [*self._exec(), *self._options(model or self.default_model, environ), prompt]

    def resume_command(
        self,
        message: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        options = self._options(model or self.default_model, environ)
        return [*self._exec(), "resume", "--last", *options, message]

    @property
    def resume_mechanism(self) -> str:
        return "codex exec resume --last"

    def count_retries(self, output: str) -> dict[str, Any]:
        count = 0
        for event in stream_json_events(output):
            message = str(event.get("message") or "")
            if event.get("type") == "error" and message.startswith("Reconnecting"):
                count += 1
        return {"count": count, "statuses": {"stream": count} if count else {}}

    def claims_line(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        kind = obj.get("type")
        if kind in _ROLLOUT_TYPES and isinstance(obj.get("payload"), dict):
            return True
        return isinstance(kind, str) and "." in kind and kind.split(".", 1)[0] in _EXEC_PREFIXES

    def read_records(self, paths: list[Path]) -> UsageByModel:
        return read_codex(paths)


_VENDOR = "node_modules/@openai/codex-linux-{arch}/vendor/{triple}"

CODEX = register_cli(
    Codex(
        name="codex",
        package="@openai/codex",
        version="0.171.0",
        binary_path=_VENDOR + "/bin/codex",
        key_env="OPENAI_API_KEY",
        base_url_env="OPENAI_BASE_URL",
        default_base_url="https://api.openai.com/v1",
        default_model="gpt-5.5",
        records=".codex/sessions",
        path_dirs=(_VENDOR + "/codex-path",),
    )
)
