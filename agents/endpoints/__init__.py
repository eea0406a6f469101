"""Local model endpoints that speak the vendors' real wire protocols and play a short script,
so that a vendor's real CLI can be tested end to end without a key or a network.

- :class:`AnthropicEndpoint`: the Messages API (``POST /v1/messages``, streamed), for Claude
  Code.
- :class:`ResponsesEndpoint`: the OpenAI Responses API (``POST /v1/responses``, streamed), for
  the Codex CLI.

Each records every request and the usage it reported per reply
(:meth:`ScriptedEndpoint.usage_by_model`, in ``analysis.tokens.TokenUsage`` terms), so a test
compares that with what the CLI wrote into its own session record. :func:`session_script` is
the session the real-client tests play: edit a file and commit, call ``submit``, answer.

``python -m agents.endpoints anthropic|openai [--host H] [--port P] [--record FILE]`` serves
the session script until interrupted, then writes the record (requests, replies, usage).
"""

from __future__ import annotations

from agents.endpoints.anthropic import AnthropicEndpoint
from agents.endpoints.base import USAGE_KEYS, Reply, RequestLog, ScriptedEndpoint, Step, shell, text
from agents.endpoints.openai_responses import ResponsesEndpoint

__all__ = [
    "ENDPOINTS",
    "USAGE_KEYS",
    "AnthropicEndpoint",
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
