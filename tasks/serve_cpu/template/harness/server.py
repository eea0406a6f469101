"""OpenAI-compatible HTTP front (frozen zone: any change to this file is rejected by the judge).

Run as ``python -I -B harness/server.py --host HOST --port PORT`` from the repository root (or
with ``SWARMLAB_SERVER_HOST`` / ``SWARMLAB_SERVER_PORT`` set). It loads the model first and only
then listens, so ``GET /v1/models`` answering 200 means ready. Endpoints:

* ``GET /v1/models`` (and ``/health``): the one model, ``harness.weights.MODEL_NAME``.
* ``POST /v1/completions``: ``{"model", "prompt": [token ids], "max_tokens", "temperature": 0,
  "stream", "logprobs": k, "return_tokens_as_token_ids"}``; greedy only. Streaming answers
  ``text/event-stream``: one ``data: {json}`` chunk per ``Request.emit`` (its ``token_ids``),
  then ``data: [DONE]``. Without ``stream`` one JSON body.
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
    max_tokens = body.get("max_tokens", 16)
    if type(max_tokens) is not int or max_tokens < 1:
        raise BadRequest("max_tokens must be a positive integer")
    if len(prompt) + max_tokens > MAX_POS:
        raise BadRequest(f"prompt + max_tokens exceeds the context of {MAX_POS} positions")
    temperature = body.get("temperature", 0)
    if temperature not in (0, 0.0, None):
        raise BadRequest("only greedy decoding (temperature 0) is served")
    logprobs = body.get("logprobs") or 0
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
        if path != "/v1/completions":
            self._error(404, f"no route {path}")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            request, stream, as_ids = parse_request(body)
        except BadRequest as exc:
            self._error(exc.status, str(exc))
            return
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, f"the body is not JSON: {exc}")
            return
        self.server.scheduler.submit(request)
        try:
            if stream:
                self._stream(request, as_ids)
            else:
                self._whole(request, as_ids)
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

    def _stream(self, request: Request, as_ids: bool) -> None:
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
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
            text = "".join(_token_text(t, False) for t in tokens)
            lp = None if logprobs is None else logprobs_json(tokens, logprobs, as_ids)
            finish = "length" if count >= request.max_tokens else None
            chunk = self._chunk(cid, created, text, tokens, lp, finish)
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _whole(self, request: Request, as_ids: bool) -> None:
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
        lp = logprobs_json(tokens, logprobs, as_ids) if request.logprobs else None
        text = "".join(_token_text(t, False) for t in tokens)
        body = self._chunk(f"cmpl-{uuid.uuid4().hex}", int(time.time()), text, tokens, lp, "length")
        body["usage"] = {
            "prompt_tokens": len(request.prompt),
            "completion_tokens": len(tokens),
            "total_tokens": len(request.prompt) + len(tokens),
        }
        self._json(200, body)


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
