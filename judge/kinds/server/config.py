"""The ``server`` kind's node of a task config: the prompt-set fields every prompt kind has,
and ``server`` (how the judge reaches and speaks to the task's server)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.schema import PromptTaskConfig


@dataclass
class ServerConfig:
    """The ``server`` kind's settings: how the judge reaches and speaks to the task's server.

    The judge starts ``serve`` with ``{host}`` and ``{port}`` filled in (also
    ``$SWARMLAB_SERVER_HOST`` and ``$SWARMLAB_SERVER_PORT``; the host is 127.0.0.1 inside the
    sandbox) and waits up to ``ready_timeout_s`` for ``GET ready_path`` to answer 200. Its own
    load generator then streams OpenAI-compatible completions (docs/tasks.md, "The server
    kind").

    Attributes:
        model: the ``model`` field every request carries.
        ready_path: the readiness URL path (200 when the server is up).
        ready_timeout_s: how long the server may take to come up (longer: WRONG ``timeout``).
        endpoint: ``completions`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``,
            the prompt as one user message; not with ``correctness: drift``).
        chat_prompt: with ``chat``, how a prompt of ids becomes the message's text: ``ids``
            (the ids as decimal numbers separated by single spaces), the only value so far.
        concurrency: the concurrency levels measured; ``timing.batch`` is the headline's.
        token_ids: where generated ids are read: each chunk's ``token_ids``, or
            ``logprobs`` (``logprobs.tokens``, chat: ``logprobs.content[i].token``, as
            ``"token_id:N"``), or ``text`` (a server that returns no ids: the generated text
            is compared with the baseline's exactly, no near ties).
        correctness: ``tokens``: every request's generated ids equal the baseline's (near
            ties by top-2 margins); ``drift``: for servers that are not batch-invariant
            (vLLM on a GPU), at least ``exact_fraction`` of each set's requests generate the
            baseline's ids exactly AND the candidate's teacher-forced mean per-token
            log-likelihood of the baseline's continuations drops by at most
            ``drift_tolerance`` below the baseline's own (both always: docs/tasks.md).
        drift_tolerance: with ``drift``, the largest allowed drop (nats per token) of the mean
            log-likelihood of the baseline's continuations, candidate vs baseline.
        exact_fraction: with ``drift``, the fraction of a set's requests (rounded up, at least
            one) whose generated ids must equal the baseline's exactly.
        teacher_forcing: with ``drift``, how the server is asked for the log-likelihood of a
            given continuation: ``echo`` (``"echo": true, "logprobs": 1``, read from
            ``choices[0].logprobs.token_logprobs``) or ``prompt_logprobs`` (vLLM's extra
            parameter, read from ``choices[0].prompt_logprobs``).
    """

    model: str = "model"
    ready_path: str = "/v1/models"
    ready_timeout_s: float = 60.0
    endpoint: str = "completions"
    chat_prompt: str = "ids"
    concurrency: list[int] = field(default_factory=lambda: [1, 16])
    token_ids: str = "token_ids"
    correctness: str = "tokens"
    drift_tolerance: float = 0.02
    exact_fraction: float = 0.5
    teacher_forcing: str = "echo"


@dataclass
class ServerTaskConfig(PromptTaskConfig):
    """A ``server`` task: a prompt task with its ``server`` node."""

    # None when the task has no `server:` block (as before kinds owned their nodes).
    server: ServerConfig | None = None
