"""Token usage of one model call as the vendor reported it in its response: what the model
proxy (``isolation.model_proxy``) saw on the wire, read independently of the CLI's own record.

A CLI's session record is the seat's account of its calls; the response bodies are the
vendor's. The two agree when every call the seat made was its CLI's (the real-seat tests check
that they do); a seat that also called the model some other way (its token works from any
process in its container) shows up as tokens on the wire that no record holds.

Each vendor API's module reads its own protocol (``agents.apis``: Anthropic Messages, OpenAI
Responses and Chat Completions, Gemini), plain JSON or server-sent events; these functions
dispatch to the API named, or, without a name, to each registered API in turn (a body speaks
one protocol: only its API finds anything in it). Counts are normalised as
:mod:`analysis.tokens` does (``input`` excludes cached tokens, ``output`` includes reasoning).
"""

from __future__ import annotations

from agents.apis import api_names, get_api
from agents.usage import TokenUsage

__all__ = ["stream_error", "wire_usage"]


def _apis(api: str | None) -> list[str]:
    return [api] if api else api_names()


def stream_error(body: bytes, content_type: str = "", api: str | None = None) -> str | None:
    """The error a vendor sent inside a response that began as 200 (Anthropic's ``error``
    event, e.g. ``overloaded_error``; OpenAI's ``error`` or ``response.failed``; an ``error``
    object in a Gemini or Chat Completions chunk), or None.

    Args:
        body: the response body as the proxy kept it.
        content_type: its ``Content-Type``.
        api: the vendor API's registry name; None tries every registered API.
    """
    for name in _apis(api):
        if (error := get_api(name).stream_error(body, content_type)) is not None:
            return error
    return None


def wire_usage(body: bytes, content_type: str = "", api: str | None = None) -> TokenUsage | None:
    """The usage one response reported (``requests=1``, ``model`` as the response names it),
    or None when it reported none (an error, a model listing, a token count).

    Args:
        body: the response body as the proxy kept it.
        content_type: its ``Content-Type``.
        api: the vendor API's registry name; None tries every registered API.
    """
    for name in _apis(api):
        if (usage := get_api(name).wire_usage(body, content_type)) is not None:
            return usage
    return None
