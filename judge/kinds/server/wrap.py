"""A generated server mutant's proxy (copied into the mutant's tree, run there).

``python -I -B wrap.py``: starts the task's real server (``mutant.json``'s ``serve``,
placeholders filled in here) on the next port, and serves the judge's address itself as an
HTTP proxy in front of it, cheating the way ``mutant.json`` names. It never reads the server's
source, so it works for a server in any language. Nothing of swarmlab is imported: the
judge's own HTTP client, ``server_load.py``, is copied beside it (with h11 in ``lib/``), and
the proxy reads its upstream with that client's :class:`Exchange`: every framing decoded
(chunked, 1xx, Content-Length, close), and a relayed request is finished when the upstream
message is complete, not when the upstream connection closes. (A server that keeps the
connection alive after a stream, as uvicorn does for 5 s, once held the relay that long: the
finished request counted as still in flight and ``b1_slow`` never slowed a lone request.)
"""

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # server_load.py (and, through it, lib/h11) beside this file
import server_load  # noqa: E402
from server_load import Exchange, RequestFailed, SseLines  # noqa: E402

with open(os.path.join(HERE, "mutant.json"), encoding="utf-8") as fh:
    CFG = json.load(fh)
MODE = CFG["mode"]
HOST = os.environ.get("SWARMLAB_SERVER_HOST", "127.0.0.1")
PORT = int(os.environ.get("SWARMLAB_SERVER_PORT", "8000"))
INNER = PORT + 1
STATE = {
    "first": True,
    "in_flight": 0,
    "cache": {},
    "partner": None,
    "burst": False,  # has it served two requests at once yet
    "last_alone": False,  # was the last request to arrive alone in flight
    "bag": [],  # b1_random_slow: which of the next lone requests are slow
}
# Modes that slow a lone request by a factor of its own time, when their rule says so.
LONE_SLOW = ("b1_slow_after_burst", "b1_slow_untimed", "b1_random_slow")
LOCK = threading.Lock()
SERIAL = threading.Lock()
# Modes that cheat before the stream (or not at all in it): the body relayed as it comes.
PASS_THROUGH = ("serial", "slow_first", "network", "cache", "odd_chunks")
# Modes that answer a completion without asking the real server.
OWN_ANSWER = ("slow_headers", "slow_body", "flood_1xx", "status_leak")
UPSTREAM_S = 600.0  # the proxy's own deadline for one upstream request
TRICKLE_S = 0.05  # slow_headers / slow_body: one byte per this
ODD_SIZES = (5, 64, 17, 256, 33)  # odd_chunks: its chunk sizes, in turn (events are ~200 B)


def start_checks():
    if MODE == "network":
        try:
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1; connect() sends no packet
        except OSError as exc:
            sys.exit(f"mutant network: no route out of the sandbox ({exc})")


def child_argv():
    fill = {
        "{python}": sys.executable,
        "{build}": os.environ.get("SWARMLAB_BUILD", "/build"),
        "{host}": HOST,
        "{port}": str(INNER),
    }
    out = []
    for part in CFG["serve"]:
        for key, value in fill.items():
            part = part.replace(key, value)
        out.append(part)
    return out


def swap_partner(body):
    """Pair this request with another arriving within a moment and trade prompts (a chat
    request's ``messages``)."""
    field = "prompt" if "prompt" in body else "messages"
    with LOCK:
        waiting = STATE["partner"]
        if waiting is None:
            slot = {"body": body, "got": None, "event": threading.Event()}
            STATE["partner"] = slot
        else:
            STATE["partner"] = None
            waiting["got"] = body.get(field)
            mine = waiting["body"].get(field)
            waiting["event"].set()
            return dict(body, **{field: mine})
    if slot["event"].wait(0.3):
        return dict(body, **{field: slot["got"]})
    with LOCK:
        if STATE["partner"] is slot:
            STATE["partner"] = None
    if slot["got"] is not None:
        return dict(body, **{field: slot["got"]})
    return body


def split_chunk(line):
    """One SSE chunk's text as one chunk per character (the same text, more chunks): what a
    server counted by its chunks would gain from."""
    chunk = json.loads(line[len(b"data: ") :])
    choices = chunk.get("choices") or []
    if len(choices) != 1:
        return [line]
    chat = isinstance(choices[0].get("delta"), dict)
    key = "content" if chat else "text"
    text = (choices[0]["delta"] if chat else choices[0]).get(key)
    if not isinstance(text, str) or len(text) < 2:
        return [line]
    out = []
    for i, char in enumerate(text):
        piece = json.loads(json.dumps(chunk))
        one = piece["choices"][0]
        (one["delta"] if chat else one)[key] = char
        if i < len(text) - 1:
            one["finish_reason"] = None
        out.append(b"data: " + json.dumps(piece).encode() + b"\n\n")
    return out


def garbage_chunk(line):
    """One SSE chunk with every generated id one higher (the scoring requests untouched)."""
    chunk = json.loads(line[len(b"data: ") :])
    for choice in chunk.get("choices") or []:
        if isinstance(choice.get("token_ids"), list):
            choice["token_ids"] = [t + 1 for t in choice["token_ids"]]
        lp = choice.get("logprobs") or {}
        if isinstance(lp.get("tokens"), list):
            lp["tokens"] = [
                f"token_id:{int(x[9:]) + 1}" if str(x).startswith("token_id:") else x
                for x in lp["tokens"]
            ]
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def upstream(method, path, body):
    """One request to the real server, sent; its final response's head read (h11)."""
    exchange = Exchange("127.0.0.1", INNER, time.perf_counter() + UPSTREAM_S)
    data = None if body is None else json.dumps(body).encode()
    headers = [] if body is None else [("Content-Type", "application/json")]
    try:
        exchange.send(method, path, data, headers)
        return exchange, exchange.response()
    except BaseException:
        exchange.close()
        raise


class OddChunks:
    """``odd_chunks``: the body re-framed as chunks of :data:`ODD_SIZES` bytes in turn, so
    events straddle chunk boundaries, every third size line carrying an extension, and a
    trailer field after the last chunk: all of it RFC 9112, all of it to be decoded."""

    def __init__(self, wfile):
        self.wfile, self.turn = wfile, 0

    def write(self, data):
        framed = []  # one write: the odd framing is the point, not a syscall per chunk
        while data:
            size = ODD_SIZES[self.turn % len(ODD_SIZES)]
            ext = b";swarmlab=odd" if self.turn % 3 == 0 else b""
            self.turn += 1
            piece, data = data[:size], data[size:]
            framed.append(b"%x%s\r\n%s\r\n" % (len(piece), ext, piece))
        self.wfile.write(b"".join(framed))

    def flush(self):
        self.wfile.flush()

    def end(self):
        self.wfile.write(b"0\r\nX-Swarmlab-Trailer: odd\r\n\r\n")
        self.wfile.flush()


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            exchange, response = upstream("GET", self.path, None)
            try:
                data, status = b"".join(exchange.body()), response.status_code
            finally:
                exchange.close()
        except RequestFailed:
            data, status = b"not up", 503
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if MODE == "hang":
            while True:
                time.sleep(3600)
        if MODE in OWN_ANSWER:
            self.close_connection = True
            with contextlib.suppress(OSError):  # the judge gave up on it
                self.own_answer(body)
            return
        with LOCK:
            first, STATE["first"] = STATE["first"], False
            STATE["in_flight"] += 1
            alone = STATE["in_flight"] == 1
            STATE["burst"] = STATE["burst"] or not alone
            self.repeat = alone and STATE["last_alone"]  # a lone request right after another
            STATE["last_alone"] = alone
            self.extra = self.lone_slowdown(body) if alone else 0
        try:
            if MODE == "slow_first" and first:
                time.sleep(1.0)
            if MODE == "serial":
                with SERIAL:
                    self.relay(body, alone)
            else:
                self.relay(body, alone)
        finally:
            with LOCK:
                STATE["in_flight"] -= 1
        self.close_connection = True

    def lone_slowdown(self, body):
        """How many times its own time a lone request waits more (call under LOCK): after the
        server has served a concurrent burst (a fresh server is as fast as ever); at every
        ``max_tokens`` but the b1 block's; or 2 of every 5, drawn at random, ``slow_factor``
        times in all."""
        if MODE == "b1_slow_after_burst":
            return 1 if STATE["burst"] else 0
        if MODE == "b1_slow_untimed":
            return 0 if body.get("max_tokens") == CFG.get("timed_steps") else 1
        if MODE == "b1_random_slow":
            if not STATE["bag"]:
                slow = float(CFG.get("slow_factor", 3.0)) - 1
                STATE["bag"] = [slow, slow, 0, 0, 0]
                random.shuffle(STATE["bag"])
            return STATE["bag"].pop()
        return 0

    def own_answer(self, body):
        """The modes that abuse HTTP itself, before any token: a head or a body trickled a
        byte at a time (each read gets a byte in time, the request never completes), a flood
        of 1xx responses, an HTTP status (and reason phrase) computed from the hidden prompt."""
        if MODE == "slow_headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while True:
                for byte in b"X-Slow: aaaaaaaaaaaaaaaa\r\n":
                    self.wfile.write(bytes([byte]))
                    time.sleep(TRICKLE_S)
        if MODE == "slow_body":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            self.wfile.write(b": ")
            while True:  # an SSE comment that never ends
                self.wfile.write(b"z")
                time.sleep(TRICKLE_S)
        if MODE == "flood_1xx":
            while True:
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)
        if MODE == "status_leak":
            prompt = body.get("prompt", body.get("messages"))
            secret = prompt[0] if isinstance(prompt, list) and prompt else 0
            if not isinstance(secret, int):
                secret = len(json.dumps(secret))
            leak = b"LEAK%d" % secret
            status = 500 + secret % 100
            self.wfile.write(
                b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s" % (status, leak, len(leak), leak)
            )

    def relay_whole(self, body):
        """A non-streaming request (the judge's teacher-forced scoring): passed through, the
        likelihoods made worse by one nat per token in mode ``worse_logprobs``."""
        exchange, response = upstream("POST", self.path, body)
        try:
            data, status = b"".join(exchange.body()), response.status_code
        finally:
            exchange.close()
        ctype = server_load.header(response, b"content-type") or b"application/json"
        if MODE == "worse_logprobs" and status == 200:
            reply = json.loads(data)
            for choice in reply.get("choices") or []:
                lp = choice.get("logprobs") or {}
                values = lp.get("token_logprobs") or []
                lp["token_logprobs"] = [None if v is None else v - 1.0 for v in values]
                for entry in choice.get("prompt_logprobs") or []:
                    for value in (entry or {}).values():
                        value["logprob"] -= 1.0
            data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype.decode("latin-1"))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def relay(self, body, alone):
        if body.get("stream") is False:
            self.relay_whole(body)
            return
        start = time.perf_counter()
        key = json.dumps(
            [body.get("prompt", body.get("messages")), body.get("max_tokens"), body.get("logprobs")]
        )
        out = self.wfile
        if MODE == "odd_chunks":
            # Informational responses first, as a server may send (RFC 9110 15.2).
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </v1/models>; rel=preload\r\n\r\n")
            out = OddChunks(self.wfile)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if MODE == "odd_chunks":
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Swarmlab-Trailer")
        self.send_header("Connection", "close")
        self.end_headers()
        if MODE == "cache" and key in STATE["cache"]:
            for line in STATE["cache"][key]:
                out.write(line)
            out.flush()
            return
        sent = dict(body)
        if MODE == "swap":
            sent = swap_partner(sent)
        if MODE == "ignore_max_tokens":
            sent["max_tokens"] = int(body.get("max_tokens", 1)) + 4
        exchange, _ = upstream("POST", self.path, sent)
        try:
            self.relay_stream(exchange, body, out, key, start, alone)
        except RequestFailed:
            pass  # the real server failed: the judge sees the stream end without [DONE]
        finally:
            exchange.close()
        if MODE == "odd_chunks":
            out.end()

    def relay_stream(self, exchange, body, out, key, start, alone):
        """The real server's stream, to its last byte (its message's end, not its
        connection's: a keep-alive server holds that open), cheating by mode on the way."""
        if MODE in PASS_THROUGH:
            # Bytes as they come, no line handling: the proxy's own cost per token is what a
            # lone request pays on top of the real server (gen_serial's single stream sat at
            # 1.066x against a 5% limit with a readline/flush per chunk).
            kept = []
            for data in exchange.body():
                out.write(data)
                out.flush()
                kept.append(data)
            if MODE == "cache":
                STATE["cache"][key] = kept
            return
        kept, chunks = [], 0
        half = max(1, int(body.get("max_tokens", 2)) // 2)
        lines = SseLines()
        for data in exchange.body():
            for text in lines.feed(data):
                line = text + b"\n"
                if line.startswith(b"data: [DONE]") and MODE == "b1_slow" and alone:
                    # A lone request ends as late again as it took: twice as slow in all.
                    time.sleep(time.perf_counter() - start)
                if line.startswith(b"data: [DONE]") and MODE in LONE_SLOW and self.extra:
                    time.sleep(self.extra * (time.perf_counter() - start))
                if line.startswith(b"data: [DONE]") and MODE == "fake_usage":
                    usage = {
                        "usage": {
                            "prompt_tokens": 1,
                            "completion_tokens": 999999,
                            "total_tokens": 999999,
                        }
                    }
                    extra = b"data: " + json.dumps(usage).encode() + b"\n\n"
                    out.write(extra)
                    kept.append(extra)
                if line.startswith(b"data: {"):
                    chunks += 1
                    if MODE == "garbage" or (MODE == "lone_repeat_leak" and self.repeat):
                        line = garbage_chunk(line)
                    if MODE == "truncate" and chunks > half:
                        out.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if MODE == "split":
                        pieces = split_chunk(line)
                        for piece in pieces:
                            out.write(piece)
                        out.flush()
                        kept.extend(pieces)
                        continue
                out.write(line)
                out.flush()
                kept.append(line)


class Server(ThreadingHTTPServer):
    # listen()'s backlog (default 5) is read at construction: 16 requests arriving at once
    # overflowed it and a connection was reset (read by the judge as a crash).
    request_queue_size = 1024
    daemon_threads = True


def main():
    start_checks()
    env = dict(os.environ, SWARMLAB_SERVER_PORT=str(INNER))
    child = subprocess.Popen(child_argv(), env=env)
    server = Server((HOST, PORT), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
