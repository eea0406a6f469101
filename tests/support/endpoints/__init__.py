"""Local model endpoints that speak the vendors' real wire protocols and play a short script,
so that a vendor's real CLI can be tested end to end without a key or a network.

- :class:`AnthropicEndpoint`: the Messages API (``POST /v1/messages``, streamed), for Claude
  Code.
- :class:`ResponsesEndpoint`: the OpenAI Responses API (``POST /v1/responses``, streamed), for
  the Codex CLI.
- :class:`ChatCompletionsEndpoint`: the OpenAI Chat Completions API (``POST
  /v1/chat/completions``, plain or streamed), for mini-swe-agent (through LiteLLM).
- :class:`GeminiEndpoint`: the Gemini API (``POST /v1beta/models/M:streamGenerateContent``,
  server-sent events), for the Gemini CLI.

Each records every request and the usage it reported per reply
(:meth:`ScriptedEndpoint.usage_by_model`, in ``analysis.tokens.TokenUsage`` terms), so a test
compares that with what the CLI wrote into its own session record. :func:`session_script` is
the session the real-client tests play: edit a file and commit, call ``submit``, answer.

``python -m tests.support.endpoints anthropic|openai|gemini [--host H] [--port P] [--record FILE]``
serves the session script until interrupted, then writes the record (requests, replies, usage).
"""

from __future__ import annotations

from tests.support.endpoints.anthropic import AnthropicEndpoint
from tests.support.endpoints.base import (
    USAGE_KEYS,
    Reply,
    RequestLog,
    ScriptedEndpoint,
    Step,
    shell,
    text,
)
from tests.support.endpoints.gemini import GeminiEndpoint
from tests.support.endpoints.openai_chat import ChatCompletionsEndpoint
from tests.support.endpoints.openai_responses import ResponsesEndpoint

__all__ = [
    "ENDPOINTS",
    "USAGE_KEYS",
    "AnthropicEndpoint",
    "ChatCompletionsEndpoint",
    "GeminiEndpoint",
    "Reply",
    "RequestLog",
    "ResponsesEndpoint",
    "ScriptedEndpoint",
    "Step",
    "session_script",
    "shell",
    "text",
]

ENDPOINTS: dict[str, type[ScriptedEndpoint]] = {
    "anthropic": AnthropicEndpoint,
    "openai": ResponsesEndpoint,
    "openai_chat": ChatCompletionsEndpoint,
    "gemini": GeminiEndpoint,
}

EDIT_COMMAND = (
    "printf 'SPEED = 2\\n' > engine/model.py && git commit -qam 'scripted: speed 2' && "
    "git rev-parse HEAD"
)
SUBMIT_COMMAND = "submit -m 'scripted session'"
FINAL_ANSWER = "Committed the change and submitted it to the judge."

# Distinct, non-round numbers per reply, so that a total cannot match by accident. Anthropic
# reports cache writes and no reasoning; OpenAI reports reasoning and no cache writes.
_USAGE = {
    # Chat Completions (mini-swe-agent): prompt_tokens includes cached ones; no cache writes.
    "openai_chat": (
        {"input": 1693, "cache_read": 0, "output": 131, "reasoning": 71},
        {"input": 313, "cache_read": 1536, "output": 79, "reasoning": 29},
        {"input": 197, "cache_read": 1920, "output": 43, "reasoning": 17},
    ),
    "anthropic": (
        {"input": 1207, "cache_write": 2311, "cache_read": 0, "output": 83},
        {"input": 379, "cache_write": 157, "cache_read": 3529, "output": 61},
        {"input": 233, "cache_write": 89, "cache_read": 3697, "output": 29},
    ),
    "openai": (
        {"input": 1841, "cache_read": 0, "output": 117, "reasoning": 64},
        {"input": 293, "cache_read": 1792, "output": 89, "reasoning": 37},
        {"input": 171, "cache_read": 2048, "output": 53, "reasoning": 19},
    ),
    # Gemini: the prompt count includes cached tokens, thoughts are counted apart; no cache writes.
    "gemini": (
        {"input": 1533, "cache_read": 0, "output": 97, "reasoning": 41},
        {"input": 277, "cache_read": 1664, "output": 71, "reasoning": 23},
        {"input": 149, "cache_read": 1921, "output": 47, "reasoning": 13},
    ),
}


def session_script(
    vendor: str, edit: str = EDIT_COMMAND, submit: str = SUBMIT_COMMAND
) -> list[Step]:
    """Edit and commit (a shell command), ``submit``, then a final answer; each reply with
    its own usage numbers."""
    first, second, third = _USAGE[vendor]
    return [
        shell(edit, first, note="I will make the change and commit it."),
        shell(submit, second, note="Now I submit the commit."),
        text(FINAL_ANSWER, third),
    ]
