"""Gemini CLI (``agent=gemini``): Google's CLI, one bundled Node program from npm.

**Install.** ``bundle/gemini.js`` (engines ``node >= 20``) runs on the host's
``/usr/bin/node``, which the container sees through its read-only ``/usr`` mount (checked:
``ClientMissing`` names what is missing).

**Invocation.** ``node gemini.js --prompt=PROMPT --output-format stream-json --approval-mode
yolo --skip-trust --model M``, ``GEMINI_API_KEY`` / ``GOOGLE_GEMINI_BASE_URL`` (the
``@google/genai`` SDK's base URL: it calls
``{base}/v1beta/models/M:streamGenerateContent?alt=sse``), and read-only system settings
(``agents/client_config/gemini/settings.json``, mounted and named by
``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, above any the agent writes): API-key auth, telemetry,
usage statistics, auto-update and its notification, session cleanup, the IDE and the
``google_web_search`` and ``web_fetch`` tools off. ``GEMINI_CLI_NO_RELAUNCH`` keeps it one
process. Resume: ``--resume latest``.

**Record.** ``$HOME/.gemini/tmp/<project name>/chats/session-*.jsonl`` (or the older single
``.json``): a message is appended again under the same ``id`` each time it changes (tokens
arrive, tool calls finish, a history checkpoint); one copy per id is kept, the one with the
largest total. ``input`` (``promptTokenCount``) includes ``cached``; ``output``
(``candidatesTokenCount``) excludes ``thoughts``, which are added to ``output`` and reported as
``reasoning``; ``tool`` (``toolUsePromptTokenCount``) is input the model read from tools and is
added to ``input``.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.clis.base import CONTAINER_ROOT, Client, ClientMissing
from agents.clis.registry import register_cli
from agents.usage import (
    UsageByModel,
    as_dict,
    as_int,
    as_str,
    gemini_usage,
    json_records,
    read_text,
)


def _gemini_messages(records: list[Any]) -> Iterator[dict[str, Any]]:
    for obj in records:
        if not isinstance(obj, dict):
            continue
        # Metadata with the messages inline: the older single-JSON session, or a checkpoint.
        for holder in (obj, as_dict(obj.get("$set"))):
            messages = holder.get("messages")
            if isinstance(messages, list):
                yield from (m for m in messages if isinstance(m, dict))
        if isinstance(obj.get("id"), str) and "$set" not in obj:
            yield obj


def _gemini_size(tokens: dict[str, Any]) -> int:
    total = as_int(tokens.get("total"))
    return total or sum(as_int(tokens.get(k)) for k in ("input", "output", "thoughts", "tool"))


def read_gemini(paths: list[Path]) -> UsageByModel:
    """Gemini CLI chat records' usage (the rules are in the module's docstring)."""
    # Rewinds ($rewindTo) are ignored on purpose: a rewound reply was still paid for.
    kept: dict[str, dict[str, Any]] = {}
    for path in paths:
        for message in _gemini_messages(json_records(read_text(path))):
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
    result = UsageByModel()
    for message in kept.values():
        result.add(as_str(message.get("model")), gemini_usage(message["tokens"]))
    return result


NODE_MAJOR = 20  # the Gemini CLI's engines field: node >= 20


@functools.cache
def _node_version(path: str) -> str:
    """``node --version`` of the program at ``path`` ('' when it is missing or fails)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _node_major(path: str) -> int:
    version = _node_version(path).lstrip("v").split(".")[0]
    return int(version) if version.isdigit() else 0


@dataclass(frozen=True)
class Gemini(Client):
    """The Gemini CLI, run by ``interpreter``."""

    def binary(self, root: Path | None = None) -> Path:
        """The installed ``gemini.js``; also checks the host's Node.js, which runs it.

        Raises:
            ClientMissing: not installed, or no Node.js >= :data:`NODE_MAJOR` at ``interpreter``.
        """
        path = super().binary(root)
        if self.interpreter and _node_major(self.interpreter) < NODE_MAJOR:
            raise ClientMissing(
                f"{self.name} ({self.spec}) runs on Node.js >= {NODE_MAJOR} at {self.interpreter}"
                f" (the agent container borrows the host's /usr), found"
                f" {_node_version(self.interpreter) or 'none'}: install Node.js there"
            )
        return path

    def _command(self, prompt: str, model: str, *extra: str) -> list[str]:
        # --prompt=TEXT: a prompt that starts with "-" is still the prompt.
        return [
            self.interpreter,
            self.container_binary,
            f"--prompt={prompt}",
            "--output-format",
            "stream-json",
            "--approval-mode",
            "yolo",
            "--skip-trust",
            "--model",
            model,
            *extra,
        ]

    def command(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        return self._command(prompt, model or self.default_model)

    def resume_command(
        self,
        message: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        return self._command(message, model or self.default_model, "--resume", "latest")

    @property
    def resume_mechanism(self) -> str:
        return "gemini -p --resume latest"

    def claims_document(self, obj: Any) -> bool:
        return isinstance(obj, dict) and "sessionId" in obj and "projectHash" in obj

    def claims_line(self, obj: Any) -> bool:
        if not isinstance(obj, dict):
            return False
        if "$rewindTo" in obj or "$set" in obj or "projectHash" in obj:
            return True
        return obj.get("type") == "gemini" and isinstance(obj.get("id"), str)

    def read_records(self, paths: list[Path]) -> UsageByModel:
        return read_gemini(paths)


GEMINI = register_cli(
    Gemini(
        name="gemini",
        package="@google/gemini-cli",
        version="0.61.0",
        binary_path="node_modules/@google/gemini-cli/bundle/gemini.js",
        key_env="GEMINI_API_KEY",
        base_url_env="GOOGLE_GEMINI_BASE_URL",
        default_base_url="https://generativelanguage.googleapis.com",
        default_model="gemini-2.5-pro",
        records=".gemini/tmp",
        interpreter="/usr/bin/node",
        settings_dir="agents/client_config/gemini",
        api="gemini",
        fixed_env={
            # Read-only settings above the user's: API key auth, no telemetry, no usage
            # statistics, no update checks, no session cleanup, no IDE, every folder trusted.
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": f"{CONTAINER_ROOT}/gemini-settings/settings.json",
            # One process: no relaunch of itself as a child that the parent would outlive.
            "GEMINI_CLI_NO_RELAUNCH": "true",
        },
    )
)
