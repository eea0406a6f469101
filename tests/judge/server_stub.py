"""A tiny OpenAI-compatible completions server speaking the server kind's wire contract.

Stdlib only (it runs in the judge's sandbox as a task's ``serve``, and on the host in tests).
Its "model" is a deterministic toy: the next id is a hash of the last three ids, with made-up
logprobs whose top-2 margin is never small. Each token costs ``--step-ms`` of sleep; with
``--serial`` one request is served at a time (a lock), so its aggregate tok/s is flat in the
concurrency, while without it concurrent requests overlap.

Teacher-forced scoring (the ``drift`` correctness path): a non-streaming request with
``"echo": true`` and ``logprobs`` answers ``choices[0].logprobs.token_logprobs`` for every
prompt position (None first) and the one generated token; with vLLM's ``"prompt_logprobs"``
it answers ``choices[0].prompt_logprobs``. The toy's log-likelihood of a token is -0.1 where it
is the toy's own next token, else -3.0, plus ``LOGPROB_SHIFT``. A test's candidate edits
``LOGPROB_SHIFT`` (worse likelihoods, same tokens) or ``GARBAGE`` (true likelihoods, but every
generated id is off by one: the teacher-forced-only exploit).

``python server_stub.py --host H --port P [--serial] [--step-ms MS] [--vocab V]``
(``{host}``/``{port}`` placeholders, or ``$SWARMLAB_SERVER_HOST``/``$SWARMLAB_SERVER_PORT``).
"""

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A task's template keeps True (its baseline is serial); a "batched" candidate edits it.
SERIAL = False
LOGPROB_SHIFT = 0.0
GARBAGE = False


def next_token(context, vocab):
    a, b, c = [0, 0, 0, *context][-3:]
    return (a * 7 + b * 31 + c * 131 + 17) % vocab


def token_logprob(context, tok, vocab):
    """The toy's log-likelihood of ``tok`` after ``context``."""
    return (-0.1 if tok == next_token(context, vocab) else -3.0) + LOGPROB_SHIFT


def score_reply(req, vocab):
    """The non-streaming completion (one token) with echoed prompt logprobs."""
    prompt = list(req["prompt"])
    tok = next_token(prompt, vocab)
    if GARBAGE:
        tok = (tok + 1) % vocab
    ids = [*prompt, tok]
    values = [None] + [token_logprob(ids[:i], ids[i], vocab) for i in range(1, len(ids))]
    choice = {"index": 0, "text": f" t{tok}", "token_ids": [tok], "finish_reason": "length"}
    if req.get("echo") and req.get("logprobs") is not None:
        as_ids = req.get("return_tokens_as_token_ids")
        choice["logprobs"] = {
            "tokens": [f"token_id:{t}" if as_ids else f" t{t}" for t in ids],
            "token_logprobs": values,
        }
    if req.get("prompt_logprobs") is not None:
        choice["prompt_logprobs"] = [None] + [
            {str(ids[i]): {"logprob": values[i], "rank": 1}} for i in range(1, len(prompt))
        ]
    return {"id": "cmpl-stub", "object": "text_completion", "choices": [choice]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default=os.environ.get("SWARMLAB_SERVER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("SWARMLAB_SERVER_PORT", 0)))
    parser.add_argument("--serial", action="store_true")
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--vocab", type=int, default=512)
    opts = parser.parse_args()
    lock = threading.Lock() if (opts.serial or SERIAL) else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "stub"}]}).encode()
            self.send_response(200 if self.path in ("/v1/models", "/health") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            req = json.loads(self.rfile.read(length))
            if not req.get("stream", True):
                body = json.dumps(score_reply(req, opts.vocab)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            if lock is not None:
                with lock:
                    self.generate(req)
            else:
                self.generate(req)
            self.close_connection = True

        def generate(self, req):
            context = list(req["prompt"])
            for i in range(int(req["max_tokens"])):
                time.sleep(opts.step_ms / 1000)
                tok = next_token(context, opts.vocab)
                if GARBAGE:
                    tok = (tok + 1) % opts.vocab
                context.append(tok)
                logprobs = None
                if req.get("logprobs"):
                    other = (tok + 1) % opts.vocab
                    logprobs = {
                        "tokens": [f"token_id:{tok}"],
                        "token_logprobs": [-0.1],
                        "top_logprobs": [{f"token_id:{tok}": -0.1, f"token_id:{other}": -2.5}],
                    }
                last = i == int(req["max_tokens"]) - 1
                chunk = {
                    "id": "cmpl-stub",
                    "object": "text_completion",
                    "model": req.get("model", ""),
                    "choices": [
                        {
                            "index": 0,
                            "text": f" t{tok}",
                            "token_ids": [tok],
                            "logprobs": logprobs,
                            "finish_reason": "length" if last else None,
                        }
                    ],
                }
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    ThreadingHTTPServer.request_queue_size = 1024  # a burst of connects is not reset
    server = ThreadingHTTPServer((opts.host, opts.port), Handler)
    server.daemon_threads = True
    print(f"stub serving on {server.server_address}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
