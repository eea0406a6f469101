"""What the HTTP front hands the scheduler (frozen zone: any change is rejected by the judge).

The front (``harness/server.py``) makes one ``Request`` per ``POST /v1/completions`` and calls
``Scheduler.submit``; the scheduler answers through the request's methods, from any thread.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field

# One token's logprobs: the chosen token's own, then the top-k (token id, logprob), best first.
TokenLogprobs = tuple[float, list[tuple[int, float]]]


@dataclass(frozen=True)
class Failure:
    """The scheduler could not serve the request (the stream ends with an error event)."""

    message: str


@dataclass
class Request:
    """One completion request: a prompt of token ids, greedy, `max_tokens` new tokens."""

    prompt: list[int]
    max_tokens: int
    logprobs: int = 0  # 0: none; k: the top-k logprobs of every new token
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue, repr=False)
    cancelled: bool = False  # set by the front when the client went away

    def emit(self, tokens: list[int], logprobs: list[TokenLogprobs] | None = None) -> None:
        """Stream new tokens (one SSE chunk); `logprobs`, when asked for, one entry per token."""
        self.events.put((list(tokens), logprobs))

    def finish(self) -> None:
        """No more tokens: the front ends the stream (``data: [DONE]``)."""
        self.events.put(None)

    def fail(self, message: str) -> None:
        """End the request with an error."""
        self.events.put(Failure(message))
