"""The server kind's load generator: the judge's own client (the standard library and h11).

It runs in a sidecar container that shares only the candidate's (or the baseline's) network
namespace (``judge.kinds.server.sidecar``), reads one JSON command per line on stdin and
answers one JSON line on stdout, so it is spoken to exactly like an engine, and measures with
its own clock. Nothing of swarmlab is imported: the file is mounted read-only into the sidecar
and run as ``python -I -B server_load.py``, with h11's package mounted read-only in ``lib/``
beside it. The judge on the host imports it too (tests, bench), and the server kind's mutant
proxy (``judge/kinds/server/wrap.py``) reads its upstream with the same :class:`Exchange`.

HTTP is spoken by h11 (a strict RFC 9112 parser, pure Python, no I/O of its own) over a socket
of this module's: every response's framing is decoded as the RFC requires of any HTTP/1.1
recipient (``Content-Length``, ``chunked`` with extensions and trailers, a body delimited by
the connection's close, 1xx responses before the final one, obs-fold), and one deadline bounds
the whole request, headers included: the socket's timeout is set to the time left before every
read, so a server trickling a byte at a time is still cut off at the deadline (``timeout``).

Commands:

- ``{"op": "ready", "host", "port", "path", "timeout_s"}``: poll ``GET path`` until it answers
  200 or ``timeout_s`` passes: ``{"ok": true, "ready_s"}`` or ``{"ok": false, "kind":
  "timeout"}`` (the judge decides crash vs. timeout: it sees whether the server still runs).
- ``{"op": "run", "host", "port", "path", "model", "requests": [{"prompt", "max_tokens"}],
  "concurrency", "logprobs", "token_source", "endpoint", "timeout_s"}``: every request
  streamed, at most ``concurrency`` at once: ``{"ok": true, "wall_s", "results": [...]}``, one
  result per request in order: ``{"ok": true, "ids", "tokens", "ttft_s", "itl_s", "total_s",
  "margins"}`` or ``{"ok": false,
  "kind": "timeout"|"crash"|"protocol", "detail"}``.
- ``{"op": "score", "host", "port", "path", "model", "requests": [{"prompt",
  "continuation"}], "concurrency", "teacher_forcing", "timeout_s"}``: the teacher-forced
  log-likelihood of each given continuation (:func:`score_request`): ``{"ok": true, "wall_s",
  "results": [...]}``, per request ``{"ok": true, "logprobs": [one per continuation id]}`` or a
  failure as for ``run``.

Output tokens are counted from the ids received, never from the server's ``usage``. Every read
is bounded (a response's head, an SSE line, a whole response, the count of 1xx responses), so a
server cannot make the judge hold unbounded data or wait past the request's deadline.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

# In the sidecar (and a mutant's proxy) h11 lies in lib/ beside this file; on the host it is
# an installed dependency. Only that folder is added: nothing else of ours is ever there.
_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
if os.path.isdir(os.path.join(_LIB, "h11")) and _LIB not in sys.path:
    sys.path.insert(0, _LIB)

import h11  # noqa: E402

MAX_LINE = 1 << 16  # one SSE line
MAX_RESPONSE = 8 << 20  # one whole response, as received (heads and framing included)
MAX_HEAD = 64 << 10  # one response head (status line and fields), one chunk's size line
MAX_INFORMATIONAL = 16  # 1xx responses before the final one (RFC 9110 sets no number)
MAX_TOKENS_SLACK = 4  # ids beyond max_tokens are kept up to this many (the judge compares them)
RECV = 1 << 16


class RequestFailed(Exception):
    """One request failed: ``kind`` is the judge's word for why (timeout, crash, protocol)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def _token_id(text: object) -> int:
    if isinstance(text, str) and text.startswith("token_id:"):
        return int(text[len("token_id:") :])
    raise ValueError("a logprobs token is not 'token_id:N'")


def _margin(top: object) -> float | None:
    """The top-1 minus top-2 logprob of one position's ``top_logprobs`` entry: a dict
    (completions: ``{token: logprob}``) or a list (chat: ``[{"token", "logprob"}, ...]``)."""
    if isinstance(top, list):
        top = {
            i: e.get("logprob") for i, e in enumerate(top) if isinstance(e, dict)
        }  # keyed by position: two entries may name the same token text
    if not isinstance(top, dict) or not top:
        return None
    try:
        values = sorted((float(v) for v in top.values()), reverse=True)
    except (TypeError, ValueError):
        raise ValueError("a top_logprobs value is not a number") from None
    return values[0] - values[1] if len(values) > 1 else float("inf")


def _choice(chunk: object) -> dict | None:
    """A chunk's one choice; None for a chunk that carries none (the final usage chunk, an
    empty choices list).

    Raises:
        ValueError: the chunk is not the contract's shape.
    """
    if not isinstance(chunk, dict):
        raise ValueError("a chunk is not a JSON object")
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        if "usage" in chunk:  # the optional final usage chunk: never trusted, never counted
            return None
        raise ValueError("a chunk has no choices list")
    if len(choices) == 0:
        return None
    if len(choices) != 1 or not isinstance(choices[0], dict):
        raise ValueError("a chunk has more than one choice")
    return choices[0]


def _chat_logprobs(logprobs: object) -> tuple[list[int], list[float | None]]:
    """Ids and margins of a chat chunk's ``logprobs.content`` (vLLM's chat format: one entry
    per token, ``{"token": "token_id:N", "logprob", "top_logprobs": [{"token", "logprob"}]}``)."""
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
        raise ValueError("a chunk has no logprobs.content")
    ids, margins = [], []
    for entry in logprobs["content"]:
        if not isinstance(entry, dict):
            raise ValueError("a logprobs.content entry is not an object")
        ids.append(_token_id(entry.get("token")))
        margins.append(_margin(entry.get("top_logprobs")))
    return ids, margins


def chunk_text(chunk: object, endpoint: str = "completions") -> str:
    """The new text of one parsed SSE chunk: ``choices[0].text`` (completions) or
    ``choices[0].delta.content`` (chat); ``""`` where it has none.

    Raises:
        ValueError: the chunk is not the contract's shape.
    """
    choice = _choice(chunk)
    if choice is None:
        return ""
    if endpoint == "chat":
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise ValueError("a chunk's delta is not an object")
        text = delta.get("content")
    else:
        text = choice.get("text")
    if text is None:
        return ""
    if not isinstance(text, str):
        raise ValueError("a chunk's text is not a string")
    return text


def chunk_tokens(
    chunk: object, source: str, endpoint: str = "completions"
) -> tuple[list[int], list[float | None], bool]:
    """The new token ids of one parsed SSE chunk, their top-2 margins (None where the chunk
    has no logprobs) and whether it carries a finish reason.

    ``source`` ``logprobs``: ids from ``logprobs.tokens`` (completions) or
    ``logprobs.content[i].token`` (chat), as ``"token_id:N"``; ``token_ids``: from
    ``choices[0].token_ids`` (both endpoints: vLLM's ``return_token_ids``).

    Raises:
        ValueError: the chunk is not the contract's shape.
    """
    choice = _choice(chunk)
    if choice is None:
        return [], [], False
    logprobs = choice.get("logprobs")
    chat = endpoint == "chat"
    margins: list[float | None] | None = None
    if source == "logprobs":
        if chat and logprobs is None and not chunk_text(chunk, endpoint):
            return [], [], choice.get("finish_reason") is not None  # vLLM's role-only chunk
        if chat:
            ids, margins = _chat_logprobs(logprobs)
        else:
            if not isinstance(logprobs, dict) or not isinstance(logprobs.get("tokens"), list):
                raise ValueError("a chunk has no logprobs.tokens")
            ids = [_token_id(t) for t in logprobs["tokens"]]
    else:
        raw = choice.get("token_ids")
        if raw is None:
            raw = []
        if not isinstance(raw, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in raw
        ):
            raise ValueError("a chunk's token_ids is not a list of ints")
        ids = list(raw)
    if margins is None:
        margins = [None] * len(ids)
        if chat and isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            got = _chat_logprobs(logprobs)[1]
            margins = [got[i] if i < len(got) else None for i in range(len(ids))]
        elif isinstance(logprobs, dict) and isinstance(logprobs.get("top_logprobs"), list):
            tops = logprobs["top_logprobs"]
            margins = [_margin(tops[i]) if i < len(tops) else None for i in range(len(ids))]
    return ids, margins, choice.get("finish_reason") is not None


class Exchange:
    """One HTTP/1.1 request on a connection of its own and its response, parsed by h11, all
    of it under one deadline (``time.perf_counter`` seconds).

    Failures are :class:`RequestFailed`: ``timeout`` (the deadline passed, whatever was still
    arriving), ``crash`` (refused, reset, or closed before a byte of response), ``protocol``
    (anything h11 refuses as HTTP/1.1, a response with both ``Content-Length`` and
    ``Transfer-Encoding``, more than :data:`MAX_INFORMATIONAL` 1xx responses, more than
    ``max_bytes`` received, a message cut short).
    """

    def __init__(
        self, host: str, port: int, deadline: float, max_bytes: int = MAX_RESPONSE
    ) -> None:
        self.host, self.port, self.deadline, self.max_bytes = host, port, deadline, max_bytes
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.sock: socket.socket | None = None
        self.received = 0

    def left(self) -> float:
        """Seconds left before the deadline; ``timeout`` once none are."""
        remaining = self.deadline - time.perf_counter()
        if remaining <= 0:
            raise RequestFailed("timeout", "no complete answer in time")
        return remaining

    def send(
        self, method: str, path: str, body: bytes | None, headers: list[tuple[str, str]]
    ) -> None:
        """Connect and send the whole request (``Content-Length`` framed)."""
        fields = [("Host", f"{self.host}:{self.port}"), *headers]
        if body is not None:
            fields.append(("Content-Length", str(len(body))))
        data = self.conn.send(h11.Request(method=method, target=path, headers=fields)) or b""
        if body:
            data += self.conn.send(h11.Data(data=body)) or b""
        data += self.conn.send(h11.EndOfMessage()) or b""
        try:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.left())
            with contextlib.suppress(OSError):  # small writes leave at once
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.settimeout(self.left())
            self.sock.sendall(data)
        except TimeoutError:
            raise RequestFailed("timeout", "the request could not be sent in time") from None
        except OSError as exc:
            raise RequestFailed("crash", f"connection failed: {type(exc).__name__}") from None

    def next_event(self) -> object:
        """The response's next h11 event, reading as needed, each read under the deadline."""
        assert self.sock is not None
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise RequestFailed("protocol", f"not HTTP/1.1: {exc}") from None
            if event is not h11.NEED_DATA:
                return event
            if self.received > self.max_bytes:
                raise RequestFailed("protocol", "the response is too long")
            try:
                self.sock.settimeout(self.left())
                data = self.sock.recv(RECV)
            except TimeoutError:
                raise RequestFailed("timeout", "no complete answer in time") from None
            except OSError as exc:
                raise RequestFailed("crash", f"connection cut: {type(exc).__name__}") from None
            if not data and self.received == 0:
                raise RequestFailed("crash", "the connection closed without a response")
            self.received += len(data)
            self.conn.receive_data(data)

    def response(self) -> h11.Response:
        """The final response's head: 1xx responses are skipped (at most
        :data:`MAX_INFORMATIONAL`), conflicting framing refused."""
        informational = 0
        while True:
            event = self.next_event()
            if isinstance(event, h11.InformationalResponse):
                informational += 1
                if informational > MAX_INFORMATIONAL:
                    raise RequestFailed("protocol", "too many 1xx responses")
                continue
            if not isinstance(event, h11.Response):
                raise RequestFailed("protocol", f"no response head ({type(event).__name__})")
            names = {name for name, _ in event.headers}
            if b"content-length" in names and b"transfer-encoding" in names:
                # RFC 9112 6.3: "ought to be handled as an error" (request smuggling).
                raise RequestFailed("protocol", "both Content-Length and Transfer-Encoding")
            return event

    def body(self) -> Iterator[bytes]:
        """The response's body, decoded, as it arrives; ends with the message (not with the
        connection: a server may keep that open)."""
        while True:
            event = self.next_event()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise RequestFailed("protocol", f"a body cut short ({type(event).__name__})")

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()


def header(response: h11.Response, name: bytes) -> bytes:
    """A response field's value (h11 gives names lowercase), ``b""`` where it has none."""
    for key, value in response.headers:
        if key == name:
            return bytes(value)
    return b""


class SseLines:
    """An event stream's lines from body bytes that arrive split anywhere (a line ends with
    LF, a CR before it dropped); a line over :data:`MAX_LINE` is ``protocol``."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        if b"\n" not in data:
            if len(self.buf) > MAX_LINE:
                raise RequestFailed("protocol", "an SSE line is too long")
            return []
        *lines, self.buf = self.buf.split(b"\n")
        if len(self.buf) > MAX_LINE or any(len(line) > MAX_LINE for line in lines):
            raise RequestFailed("protocol", "an SSE line is too long")
        return [line.rstrip(b"\r") for line in lines]


def stream_request(
    host: str,
    port: int,
    path: str,
    body: dict,
    deadline: float,
    source: str = "token_ids",
    endpoint: str = "completions",
) -> dict:
    """One streaming completion, measured on this process's clock (``time.perf_counter``).

    ``source`` ``text`` (a server that returns no ids): the compared "ids" are the code points
    of the whole generated text, read to the end (``MAX_RESPONSE`` bounds it), and ``tokens``
    counts the chunks that carried text (the judge credits a timed candidate run with its
    paired baseline run's count instead); otherwise ``tokens`` is ``len(ids)``, and reading
    stops past ``max_tokens`` + the slack.

    Returns:
        ``{"ok": True, "ids", "tokens", "ttft_s", "itl_s", "total_s", "margins"}``.

    Raises:
        RequestFailed: no answer by ``deadline`` (timeout), refused or cut connection (crash),
            anything but the contract's SSE stream (protocol).
    """
    payload = json.dumps(body).encode()
    start = time.perf_counter()
    exchange = Exchange(host, port, deadline)
    try:
        exchange.send(
            "POST",
            path,
            payload,
            [
                ("Content-Type", "application/json"),
                ("Accept", "text/event-stream"),
                ("Connection", "close"),
            ],
        )
        response = exchange.response()
        if response.status_code != 200:
            raise RequestFailed("protocol", f"HTTP status {response.status_code}")
        if b"text/event-stream" not in header(response, b"content-type"):
            raise RequestFailed("protocol", "the response is not text/event-stream")
        ids: list[int] = []
        margins: list[float | None] = []
        text_mode = source == "text"
        count = 0  # tokens received: ids, or (text mode) chunks that carried text
        arrivals: list[float] = []
        ttft = None
        lines = SseLines()
        done = False
        for data in exchange.body():
            for text in lines.feed(data):
                if not text or text.startswith(b":"):
                    continue  # event separator or comment
                if not text.startswith(b"data:"):
                    continue  # event:/id:/retry: fields carry nothing the judge reads
                payload_line = text[5:].strip()
                if payload_line == b"[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                try:
                    chunk = json.loads(payload_line)
                    if text_mode:
                        new = [ord(c) for c in chunk_text(chunk, endpoint)]
                        gaps: list[float | None] = [None] * len(new)
                    else:
                        new, gaps, _ = chunk_tokens(chunk, source, endpoint)
                except (ValueError, RecursionError):
                    raise RequestFailed("protocol", "a malformed chunk") from None
                if not new:
                    continue
                if ttft is None:
                    ttft = now - start
                arrivals.append(now)
                ids.extend(new)
                margins.extend(gaps)
                count += 1 if text_mode else len(new)
                if not text_mode and count > int(body.get("max_tokens", 0)) + MAX_TOKENS_SLACK:
                    done = True  # far past what was asked for: the judge calls it wrong already
                    break
                # Text mode reads on: how a server chunks its text says nothing of its tokens
                # (a cut here would misjudge one streaming a character at a time); the
                # response's size bounds it.
            if done:
                break
        if not done:
            raise RequestFailed("protocol", f"stream ended without [DONE] after {len(ids)}")
        end = time.perf_counter()
        itl = [b - a for a, b in itertools.pairwise(arrivals)]
        return {
            "ok": True,
            "ids": ids,
            "tokens": count,
            "ttft_s": ttft if ttft is not None else end - start,
            "itl_s": itl,
            "total_s": end - start,
            "margins": margins if body.get("logprobs") and not text_mode else None,
        }
    finally:
        exchange.close()


def chat_text(prompt: list[int] | str) -> str:
    """A prompt as a chat message's text: a text prompt as is; ids as decimal numbers
    separated by single spaces (``server.chat_prompt: ids``, a toy model's "tokenizer" that
    reads them back exactly)."""
    if isinstance(prompt, str):
        return prompt
    return " ".join(str(int(t)) for t in prompt)


def request_body(
    model: str,
    prompt: list[int] | str,
    max_tokens: int,
    logprobs: bool,
    endpoint: str = "completions",
    source: str = "token_ids",
) -> dict:
    """The contract's greedy streaming request (``logprobs`` only for the baseline's margins).

    ``endpoint`` ``chat``: ``/v1/chat/completions``'s body, the prompt as one user message
    (:func:`chat_text`), logprobs as the chat API asks for them (``"logprobs": true,
    "top_logprobs": 2``). ``source`` ``text``: no ids asked for (the server has none).
    """
    body: dict = {"model": model}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": chat_text(prompt)}]
    else:
        body["prompt"] = prompt
    body.update(max_tokens=max_tokens, temperature=0, stream=True)
    if endpoint == "chat":
        body["stream_options"] = {"include_usage": True}
    if source == "text":
        return body
    body["return_token_ids"] = True
    if logprobs:
        if endpoint == "chat":
            body.update(logprobs=True, top_logprobs=2, return_tokens_as_token_ids=True)
        else:
            body.update(logprobs=2, return_tokens_as_token_ids=True)
    return body


def score_body(
    model: str, prompt: list[int], continuation: list[int], teacher_forcing: str
) -> dict:
    """A non-streaming request for the log-likelihood of ``continuation`` after ``prompt``.

    Both are sent as one prompt, with ``max_tokens: 1`` (the one generated token is ignored;
    not every server allows 0). ``echo``: ``"echo": true, "logprobs": 1`` (the completions
    API's own way; vLLM, llama.cpp's server); ``prompt_logprobs``: vLLM's extra parameter
    ``"prompt_logprobs": 1``.
    """
    body = {
        "model": model,
        "prompt": list(prompt) + list(continuation),
        "max_tokens": 1,
        "temperature": 0,
        "stream": False,
        "return_tokens_as_token_ids": True,
    }
    if teacher_forcing == "prompt_logprobs":
        body["prompt_logprobs"] = 1
    else:
        body.update(echo=True, logprobs=1)
    return body


def _logprob(value: object) -> float:
    """One position's log-likelihood: a finite float <= 0 (a server claiming more is lying)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("a logprob is not a number")
    out = float(value)
    if not out <= 1e-6 or out != out or out == float("-inf"):
        raise ValueError("a logprob is not a finite number <= 0")
    return out


def continuation_logprobs(
    reply: object, prompt: list[int], continuation: list[int], teacher_forcing: str
) -> list[float]:
    """The logprob of every continuation id from a parsed ``score_body`` reply.

    ``echo``: ``choices[0].logprobs.token_logprobs`` covers the sent prompt, then the
    generated token; the continuation's positions are ``len(prompt)`` onwards. Where
    ``logprobs.tokens`` are ``"token_id:N"`` they must echo exactly the ids sent (a server
    scoring other tokens is caught). ``prompt_logprobs``: ``choices[0].prompt_logprobs`` is a
    list (None first), each entry ``{"<id>": {"logprob": x, ...}}`` that holds the sent id.

    Raises:
        ValueError: the reply is not that shape.
    """
    sent = list(prompt) + list(continuation)
    if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list):
        raise ValueError("the reply has no choices list")
    if len(reply["choices"]) != 1 or not isinstance(reply["choices"][0], dict):
        raise ValueError("the reply has not exactly one choice")
    choice = reply["choices"][0]
    if teacher_forcing == "prompt_logprobs":
        rows = choice.get("prompt_logprobs")
        if not isinstance(rows, list) or len(rows) < len(sent):
            raise ValueError("the reply has no prompt_logprobs for every sent id")
        out = []
        for pos in range(len(prompt), len(sent)):
            entry = rows[pos]
            chosen = entry.get(str(sent[pos])) if isinstance(entry, dict) else None
            if not isinstance(chosen, dict):
                raise ValueError("a prompt_logprobs entry lacks the sent id")
            out.append(_logprob(chosen.get("logprob")))
        return out
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("token_logprobs"), list):
        raise ValueError("the reply has no logprobs.token_logprobs")
    values = logprobs["token_logprobs"]
    if len(values) < len(sent):
        raise ValueError("the reply echoes fewer positions than were sent")
    tokens = logprobs.get("tokens")
    as_ids = (
        isinstance(tokens, list)
        and len(tokens) >= len(sent)
        and all(isinstance(x, str) and x.startswith("token_id:") for x in tokens[: len(sent)])
    )
    if as_ids and [_token_id(x) for x in tokens[: len(sent)]] != sent:
        raise ValueError("the echoed tokens are not the ids sent")
    return [_logprob(values[pos]) for pos in range(len(prompt), len(sent))]


def score_request(
    host: str,
    port: int,
    path: str,
    body: dict,
    deadline: float,
    prompt_len: int,
    teacher_forcing: str = "echo",
) -> dict:
    """One teacher-forced scoring request (``score_body``), the whole reply read bounded.

    Returns:
        ``{"ok": True, "logprobs", "total_s"}``.

    Raises:
        RequestFailed: as :func:`stream_request` (timeout, crash, protocol).
    """
    payload = json.dumps(body).encode()
    start = time.perf_counter()
    exchange = Exchange(host, port, deadline)
    try:
        exchange.send(
            "POST",
            path,
            payload,
            [("Content-Type", "application/json"), ("Connection", "close")],
        )
        response = exchange.response()
        if response.status_code != 200:
            raise RequestFailed("protocol", f"HTTP status {response.status_code}")
        pieces, size = [], 0
        for data in exchange.body():
            size += len(data)
            if size > MAX_RESPONSE:
                raise RequestFailed("protocol", "the scoring reply is too long")
            pieces.append(data)
    finally:
        exchange.close()
    sent = body["prompt"]
    try:
        values = continuation_logprobs(
            json.loads(b"".join(pieces)), sent[:prompt_len], sent[prompt_len:], teacher_forcing
        )
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise RequestFailed("protocol", f"scoring reply: {exc}") from None
    return {"ok": True, "logprobs": values, "total_s": time.perf_counter() - start}


def score(cmd: dict) -> dict:
    """The ``score`` command: every request's continuation scored, ``concurrency`` at once."""
    requests = cmd["requests"]
    concurrency = max(1, min(int(cmd.get("concurrency", len(requests))), len(requests) or 1))
    forcing = str(cmd.get("teacher_forcing", "echo"))
    host, port, path = str(cmd["host"]), int(cmd["port"]), str(cmd["path"])
    deadline = time.perf_counter() + float(cmd["timeout_s"])

    def one(r: dict) -> dict:
        body = score_body(str(cmd["model"]), r["prompt"], r["continuation"], forcing)
        try:
            return score_request(host, port, path, body, deadline, len(r["prompt"]), forcing)
        except RequestFailed as exc:
            return {"ok": False, "kind": exc.kind, "detail": str(exc)}

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(one, requests))
    return {"ok": True, "wall_s": time.perf_counter() - start, "results": results}


def run(cmd: dict) -> dict:
    """The ``run`` command: every request of ``cmd`` streamed, at most ``concurrency`` at once."""
    requests = cmd["requests"]
    concurrency = max(1, min(int(cmd.get("concurrency", len(requests))), len(requests) or 1))
    logprobs = bool(cmd.get("logprobs"))
    source = str(cmd.get("token_source", "token_ids"))
    endpoint = str(cmd.get("endpoint", "completions"))
    host, port, path = str(cmd["host"]), int(cmd["port"]), str(cmd["path"])
    bodies = [
        # Ids read from logprobs need logprobs on every request, timed ones included.
        request_body(
            str(cmd["model"]),
            r["prompt"],
            int(r["max_tokens"]),
            logprobs or source == "logprobs",
            endpoint,
            source,
        )
        for r in requests
    ]
    # A barrier so the first `concurrency` requests leave together, not as threads start.
    gate = threading.Barrier(concurrency)
    deadline = time.perf_counter() + float(cmd["timeout_s"])

    def one(i: int) -> dict:
        if i < concurrency:
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait(timeout=10)
        try:
            return stream_request(host, port, path, bodies[i], deadline, source, endpoint)
        except RequestFailed as exc:
            return {"ok": False, "kind": exc.kind, "detail": str(exc)}

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(one, range(len(bodies))))
    return {"ok": True, "wall_s": time.perf_counter() - start, "results": results}


def ready(cmd: dict) -> dict:
    """The ``ready`` command: poll ``GET path`` until 200 or ``timeout_s`` (each poll bounded
    by what is left of it, at most 2 s, at least 50 ms)."""
    start = time.perf_counter()
    deadline = start + float(cmd["timeout_s"])
    host, port, path = str(cmd["host"]), int(cmd["port"]), str(cmd["path"])
    while True:
        now = time.perf_counter()
        exchange = Exchange(host, port, max(min(deadline, now + 2.0), now + 0.05), MAX_LINE)
        try:
            exchange.send("GET", path, None, [("Connection", "close")])
            if exchange.response().status_code == 200:
                return {"ok": True, "ready_s": time.perf_counter() - start}
        except RequestFailed:
            pass
        finally:
            exchange.close()
        if time.perf_counter() >= deadline:
            return {"ok": False, "kind": "timeout"}
        time.sleep(0.05)


def handle(cmd: dict) -> dict:
    """One command's answer (a judge bug in a command is answered, never raised)."""
    try:
        if cmd.get("op") == "ready":
            return ready(cmd)
        if cmd.get("op") == "run":
            return run(cmd)
        if cmd.get("op") == "score":
            return score(cmd)
        if cmd.get("op") == "ping":
            return {"ok": True, "clock": time.perf_counter()}
        detail = f"unknown op {cmd.get('op')!r}"
        return {"ok": False, "kind": "judge", "error": "unknown op", "detail": detail}
    except Exception as exc:  # the judge's own fault: said, the process stays up
        detail = f"{type(exc).__name__}: {exc}"  # may quote a reply: the judge logs it privately
        return {"ok": False, "kind": "judge", "error": type(exc).__name__, "detail": detail}


def main() -> None:
    # Ignore SIGPIPE-like noise: a closed stdin ends the loop, nothing else does.
    socket.setdefaulttimeout(None)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = handle(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
