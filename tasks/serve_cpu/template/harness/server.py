"""OpenAI-compatible HTTP front (frozen zone: any change to this file is rejected by the judge).

Run as ``python -I -B harness/server.py --host HOST --port PORT`` from the repository root (or
with ``SWARMLAB_SERVER_HOST`` / ``SWARMLAB_SERVER_PORT`` set). It loads the model first and only
then listens, so ``GET /v1/models`` answering 200 means ready. Endpoints:

* ``GET /v1/models`` (and ``/health``): the one model, ``harness.weights.MODEL_NAME``.
* ``POST /v1/completions``: ``{"model", "prompt": [token ids], "max_tokens", "temperature": 0,
  "stream", "logprobs": k, "return_tokens_as_token_ids"}``; greedy only. Streaming answers
  ``text/event-stream``: one ``data: {json}`` chunk per ``Request.emit`` (its ``token_ids``),
  then ``data: [DONE]``. Without ``stream`` one JSON body.
* ``POST /v1/chat/completions``: ``{"model", "messages": [{"role", "content"}], "max_tokens",
  "temperature": 0, "stream", "logprobs": true, "top_logprobs": k, "return_token_ids",
  "return_tokens_as_token_ids"}``, the same engine. This toy model's "tokenizer": a message's
  content is token ids as decimal numbers separated by spaces (every message's, in order, make
  the prompt; no chat template); the reply's content is the new ids written the same way.
  Streaming chunks are ``chat.completion.chunk``s (``choices[0].delta.content``, ``token_ids``
  when ``return_token_ids``, ``logprobs.content`` when asked), then a ``usage`` chunk when
  ``stream_options.include_usage``, then ``data: [DONE]``.
* ``GET /debug/stats``: the scheduler's own counters (``Scheduler.stats()``), for people.

Everything about speed lives behind ``engine.scheduler.Scheduler`` (``submit``, ``start``,
``stats``) and ``engine.model``; this file only speaks the protocol. The judge measures with
its own client and clock; nothing this process says about speed is trusted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `-I` leaves only harness/ on the path
    sys.path.insert(0, str(ROOT))

from engine.model import Model  # noqa: E402
from engine.scheduler import Scheduler  # noqa: E402

from harness.api import Failure, Request  # noqa: E402
from harness.weights import MAX_POS, MODEL_NAME, VOCAB  # noqa: E402

MAX_LOGPROBS = 20


class BadRequest(ValueError):
    """A request the server refuses (HTTP 400, or 404 for an unknown model)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def parse_request(body: dict) -> tuple[Request, bool, bool]:
    """The scheduler's `Request`, whether to stream, and whether tokens are shown as ids."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model", MODEL_NAME)
    if model != MODEL_NAME:
        raise BadRequest(f"model {model!r} does not exist; this server has {MODEL_NAME!r}", 404)
    prompt = body.get("prompt")
    if (
        not isinstance(prompt, list)
        or not prompt
        or not all(type(t) is int and 0 <= t < VOCAB for t in prompt)
    ):
        raise BadRequest(f"prompt must be a non-empty list of token ids in [0, {VOCAB})")
    return _sampling(body, prompt, body.get("logprobs") or 0)


def parse_chat(body: dict) -> tuple[Request, bool, bool, int]:
    """A chat request's `Request`, whether to stream, whether tokens are shown as ids, and
    how many top logprobs to show per token (-1: no logprobs)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model", MODEL_NAME)
    if model != MODEL_NAME:
        raise BadRequest(f"model {model!r} does not exist; this server has {MODEL_NAME!r}", 404)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    prompt: list[int] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise BadRequest("every message needs a string content")
        for word in content.split():
            if not word.isdigit() or not 0 <= int(word) < VOCAB:
                raise BadRequest(f"content must be token ids in [0, {VOCAB}) separated by spaces")
            prompt.append(int(word))
    if not prompt:
        raise BadRequest("the messages hold no token ids")
    top = body.get("top_logprobs") or 0
    if type(top) is not int or not 0 <= top <= MAX_LOGPROBS:
        raise BadRequest(f"top_logprobs must be an integer in [0, {MAX_LOGPROBS}]")
    wanted = body.get("logprobs") is True
    request, stream, as_ids = _sampling(body, prompt, max(1, top) if wanted else 0)
    return request, stream, as_ids, top if wanted else -1


def _sampling(body: dict, prompt: list[int], logprobs) -> tuple[Request, bool, bool]:
    """The settings both endpoints share, checked."""
    max_tokens = body.get("max_tokens", 16)
    if type(max_tokens) is not int or max_tokens < 1:
        raise BadRequest("max_tokens must be a positive integer")
    if len(prompt) + max_tokens > MAX_POS:
        raise BadRequest(f"prompt + max_tokens exceeds the context of {MAX_POS} positions")
    temperature = body.get("temperature", 0)
    if temperature not in (0, 0.0, None):
        raise BadRequest("only greedy decoding (temperature 0) is served")
    if type(logprobs) is not int or not 0 <= logprobs <= MAX_LOGPROBS:
        raise BadRequest(f"logprobs must be an integer in [0, {MAX_LOGPROBS}]")
    request = Request(prompt=list(prompt), max_tokens=max_tokens, logprobs=logprobs)
    return request, bool(body.get("stream")), bool(body.get("return_tokens_as_token_ids"))


def _token_text(token: int, as_ids: bool) -> str:
    return f"token_id:{token}" if as_ids else f"<{token}>"


def logprobs_json(tokens: list[int], logprobs, as_ids: bool) -> dict:
    """The completions API's ``logprobs`` object for these tokens."""
    return {
        "tokens": [_token_text(t, as_ids) for t in tokens],
        "token_logprobs": [float(chosen) for chosen, _ in logprobs],
        "top_logprobs": [
            {_token_text(int(t), as_ids): float(lp) for t, lp in top} for _, top in logprobs
        ],
        "text_offset": [],
    }


def chat_logprobs_json(tokens: list[int], logprobs, as_ids: bool, top: int) -> dict:
    """The chat API's ``logprobs`` object for these tokens (``top`` alternatives each)."""
    return {
        "content": [
            {
                "token": _token_text(t, as_ids),
                "logprob": float(chosen),
                "bytes": None,
                "top_logprobs": [
                    {"token": _token_text(int(u), as_ids), "logprob": float(lp), "bytes": None}
                    for u, lp in alternatives[:top]
                ],
            }
            for t, (chosen, alternatives) in zip(tokens, logprobs, strict=True)
        ]
    }


def chat_text(tokens: list[int], first: bool) -> str:
    """New ids as chat content: decimal numbers separated by spaces (none before the first)."""
    return " ".join(str(t) for t in tokens) if first else "".join(f" {t}" for t in tokens)


class ChatFormat:
    """How one chat request's answer is written: the chat API's chunks and body."""

    def __init__(self, body: dict, as_ids: bool, top: int) -> None:
        self.as_ids, self.top = as_ids, top
        self.token_ids = bool(body.get("return_token_ids"))
        options = body.get("stream_options")
        self.usage = isinstance(options, dict) and bool(options.get("include_usage"))
        self.sent = 0

    def choice(self, tokens: list[int], logprobs, finish, key: str) -> dict:
        text = chat_text(tokens, self.sent == 0)
        self.sent += len(tokens)
        out: dict = {"index": 0, key: {"role": "assistant", "content": text}}
        if self.token_ids:
            out["token_ids"] = tokens
        out["logprobs"] = (
            None
            if self.top < 0 or logprobs is None
            else chat_logprobs_json(tokens, logprobs, self.as_ids, self.top)
        )
        out["finish_reason"] = finish
        return out


class Handler(BaseHTTPRequestHandler):
    """One connection; the scheduler (shared) lives on the server object."""

    server_version = "serve-cpu/1"

    def setup(self) -> None:
        super().setup()
        # Small SSE writes must leave at once (Nagle + delayed ACK would hold them ~40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args) -> None:
        pass  # one line per request on stderr would cost more than a token

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/v1/models", "/health"):
            self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "swarmlab"}],
                },
            )
        elif path == "/debug/stats":
            self._json(200, self.server.scheduler.stats())
        else:
            self._error(404, f"no route {path}")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._error(404, f"no route {path}")
            return
        chat = None
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            if path == "/v1/completions":
                request, stream, as_ids = parse_request(body)
            else:
                request, stream, as_ids, top = parse_chat(body)
                chat = ChatFormat(body, as_ids, top)
        except BadRequest as exc:
            self._error(exc.status, str(exc))
            return
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, f"the body is not JSON: {exc}")
            return
        self.server.scheduler.submit(request)
        try:
            if stream:
                self._stream(request, as_ids, chat)
            else:
                self._whole(request, as_ids, chat)
        except OSError:  # the client went away: let the scheduler drop the request
            request.cancelled = True

    def _chunk(self, cid: str, created: int, text: str, tokens, logprobs, finish) -> dict:
        return {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": MODEL_NAME,
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "token_ids": tokens,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                }
            ],
        }

    def _chat_chunk(self, cid: str, created: int, choices: list, usage=None) -> dict:
        out = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": MODEL_NAME,
            "choices": choices,
        }
        if usage is not None:
            out["usage"] = usage
        return out

    def _stream(self, request: Request, as_ids: bool, chat: ChatFormat | None = None) -> None:
        cid, created = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        count = 0
        while True:
            event = request.events.get()
            if event is None:
                break
            if isinstance(event, Failure):
                error = {"error": {"message": event.message, "type": "server_error"}}
                self.wfile.write(f"data: {json.dumps(error)}\n\n".encode())
                return
            tokens, logprobs = event
            count += len(tokens)
            finish = "length" if count >= request.max_tokens else None
            if chat is not None:
                choice = chat.choice(tokens, logprobs, finish, "delta")
                chunk = self._chat_chunk(cid, created, [choice])
            else:
                text = "".join(_token_text(t, False) for t in tokens)
                lp = None if logprobs is None else logprobs_json(tokens, logprobs, as_ids)
                chunk = self._chunk(cid, created, text, tokens, lp, finish)
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if chat is not None and chat.usage:
            chunk = self._chat_chunk(cid, created, [], _usage(request, count))
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _whole(self, request: Request, as_ids: bool, chat: ChatFormat | None = None) -> None:
        tokens: list[int] = []
        logprobs: list = []
        while True:
            event = request.events.get()
            if event is None:
                break
            if isinstance(event, Failure):
                self._json(500, {"error": {"message": event.message, "type": "server_error"}})
                return
            tokens.extend(event[0])
            if event[1] is not None:
                logprobs.extend(event[1])
        if chat is not None:
            choice = chat.choice(
                tokens, logprobs if request.logprobs else None, "length", "message"
            )
            body = self._chat_chunk(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), [choice])
            body["object"] = "chat.completion"
            body["usage"] = _usage(request, len(tokens))
            self._json(200, body)
            return
        lp = logprobs_json(tokens, logprobs, as_ids) if request.logprobs else None
        text = "".join(_token_text(t, False) for t in tokens)
        body = self._chunk(f"cmpl-{uuid.uuid4().hex}", int(time.time()), text, tokens, lp, "length")
        body["usage"] = {
            "prompt_tokens": len(request.prompt),
            "completion_tokens": len(tokens),
            "total_tokens": len(request.prompt) + len(tokens),
        }
        self._json(200, body)


def _usage(request: Request, completion: int) -> dict:
    prompt = len(request.prompt)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Server(ThreadingHTTPServer):
    """A thread per connection; one scheduler for all of them."""

    daemon_threads = True
    request_queue_size = 256  # the default 5 drops connects when many clients start at once

    def __init__(self, address: tuple[str, int], scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        super().__init__(address, Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("SWARMLAB_SERVER_HOST", "127.0.0.1"))
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("SWARMLAB_SERVER_PORT", "8000"))
    )
    args = parser.parse_args(argv)
    scheduler = Scheduler(Model())  # loads the weights before the socket exists
    scheduler.start()
    server = Server((args.host, args.port), scheduler)
    print(f"serving {MODEL_NAME} on http://{args.host}:{server.server_port}", file=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
