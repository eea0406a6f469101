"""A generated server mutant's proxy (stdlib only; copied into the mutant's tree, run there).

``python -I -B server_wrap.py``: starts the task's real server (``mutant.json``'s ``serve``,
placeholders filled in here) on the next port, and serves the judge's address itself as an
HTTP proxy in front of it, cheating the way ``mutant.json`` names. It never reads the server's
source, so it works for a server in any language. Nothing of swarmlab is imported.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "mutant.json"), encoding="utf-8") as fh:
    CFG = json.load(fh)
MODE = CFG["mode"]
HOST = os.environ.get("SWARMLAB_SERVER_HOST", "127.0.0.1")
PORT = int(os.environ.get("SWARMLAB_SERVER_PORT", "8000"))
INNER = PORT + 1
STATE = {"first": True, "in_flight": 0, "cache": {}, "partner": None}
LOCK = threading.Lock()
SERIAL = threading.Lock()
# Modes that cheat before the stream (or not at all in it): relayed as raw bytes.
PASS_THROUGH = ("serial", "slow_first", "network", "cache")


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


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", INNER, timeout=5)
            conn.request("GET", self.path)
            resp = conn.getresponse()
            data, status = resp.read(), resp.status
            conn.close()
        except OSError:
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
        with LOCK:
            first, STATE["first"] = STATE["first"], False
            STATE["in_flight"] += 1
            alone = STATE["in_flight"] == 1
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

    def relay_whole(self, body):
        """A non-streaming request (the judge's teacher-forced scoring): passed through, the
        likelihoods made worse by one nat per token in mode ``worse_logprobs``."""
        conn = http.client.HTTPConnection("127.0.0.1", INNER, timeout=600)
        conn.request(
            "POST", self.path, body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        data, status = resp.read(), resp.status
        ctype = resp.getheader("Content-Type", "application/json")
        conn.close()
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
        self.send_header("Content-Type", ctype)
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
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        if MODE == "cache" and key in STATE["cache"]:
            for line in STATE["cache"][key]:
                self.wfile.write(line)
            self.wfile.flush()
            return
        sent = dict(body)
        if MODE == "swap":
            sent = swap_partner(sent)
        if MODE == "ignore_max_tokens":
            sent["max_tokens"] = int(body.get("max_tokens", 1)) + 4
        conn = http.client.HTTPConnection("127.0.0.1", INNER, timeout=600)
        conn.request(
            "POST", self.path, body=json.dumps(sent), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        if MODE in PASS_THROUGH:
            # Bytes as they come, no line handling: the proxy's own cost per token is what a
            # lone request pays on top of the real server (gen_serial's single stream sat at
            # 1.066x against a 5% limit with a readline/flush per chunk).
            kept = []
            while True:
                data = resp.read1(1 << 16)
                if not data:
                    break
                self.wfile.write(data)
                self.wfile.flush()
                kept.append(data)
            conn.close()
            if MODE == "cache":
                STATE["cache"][key] = kept
            return
        kept, chunks = [], 0
        half = max(1, int(body.get("max_tokens", 2)) // 2)
        while True:
            line = resp.fp.readline(1 << 20)
            if not line:
                break
            if line.startswith(b"data: [DONE]") and MODE == "b1_slow" and alone:
                # A lone request ends as late again as it took: twice as slow in all.
                time.sleep(time.perf_counter() - start)
            if line.startswith(b"data: [DONE]") and MODE == "fake_usage":
                usage = {
                    "usage": {
                        "prompt_tokens": 1,
                        "completion_tokens": 999999,
                        "total_tokens": 999999,
                    }
                }
                extra = b"data: " + json.dumps(usage).encode() + b"\n\n"
                self.wfile.write(extra)
                kept.append(extra)
            if line.startswith(b"data: {"):
                chunks += 1
                if MODE == "garbage":
                    line = garbage_chunk(line)
                if MODE == "truncate" and chunks > half:
                    self.wfile.flush()
                    conn.close()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if MODE == "split":
                    pieces = split_chunk(line)
                    for piece in pieces:
                        self.wfile.write(piece)
                    self.wfile.flush()
                    kept.extend(pieces)
                    continue
            self.wfile.write(line)
            self.wfile.flush()
            kept.append(line)
        conn.close()
        if MODE == "cache":
            STATE["cache"][key] = kept


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
