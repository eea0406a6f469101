"""Nothing built from hidden inputs reaches what an agent sees: the server kind (issue 24).

The server kind's twin of ``test_leaks_docker.py``. A fake HTTP server in a real sandbox
container reads a marker out of the hidden prompt it is sent and tries to carry it out through
every way a request can fail: an HTTP status it computes from the marker (a number the server
chose after the hidden prompt arrived), a reason phrase, a content type, an error event, a line
that is not JSON, a stream cut after a number of ids it chose, an endless line, an endless head,
a flood of 1xx responses, a head trickled a byte at a time, a reset, stderr and an exit, a
mismatch at a position it chose, and a judge exception quoting it. Each request is sent by the
real load generator in its real sidecar and scored by the real ``_ServerRun.execute``; the
marker (and the status it became) must be absent from the Evaluation's detail, metrics and
flags and from the gateway's ``verdicts.jsonl`` line, and present in the private ``log.json``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from judge import compose_judge_config
from judge.config import SandboxConfig
from judge.kinds.server import ServerKind
from judge.kinds.server.evaluator import HOST, PORT, Side, _ServerRun
from judge.kinds.server.sidecar import LoadGen, ServerProcess
from judge.private import InputSet, Reference
from judge.queue import Job
from judge.sandbox import InfrastructureFault, Sandbox
from judge.verdict import Evaluation, Verdict
from runner.gateway import verdict_line
from tests.support.sandbox import kill_script, script_tree
from tests.support.unique import SESSION

pytestmark = pytest.mark.docker

MARKER = 48611731  # a hidden prompt token; the server spells it LEAK<token>
STATUS = 500 + MARKER % 100  # 531: the HTTP status the server derives from it
CUT = 3 + MARKER % 4  # 6: how many ids the server sends before it cuts a stream
PROMPT = [MARKER, 5, 6]
STEPS = 8

FAKE_SERVER = r"""
import json, os, socket, struct, sys, threading, time
mode, port = sys.argv[1], int(sys.argv[2])

def event(ids):
    chunk = {"choices": [{"index": 0, "text": "", "token_ids": ids, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None, None
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head.split(b" ")[1], body

SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"

def serve(conn):
    path, body = read_request(conn)
    if path is None:
        return
    if path != b"/v1/completions":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        return
    secret = json.loads(body)["prompt"][0]
    leak = f"LEAK{secret}".encode()
    sys.stderr.write(f"stderr {leak.decode()}\n"); sys.stderr.flush()
    if mode == "status":
        status = 500 + secret % 100
        conn.sendall(b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s"
                     % (status, leak, len(leak), leak))
    elif mode == "reason":
        conn.sendall(b"HTTP/1.1 200 " + leak + b"\r\nContent-Type: text/" + leak + b"\r\n\r\n")
    elif mode == "error_event":
        conn.sendall(SSE + b'data: {"error": "' + leak + b'"}\n\n')
    elif mode == "notjson":
        conn.sendall(SSE + b"data: " + leak + b"\n\n")
    elif mode == "cut":
        conn.sendall(SSE + b"".join(event([1]) for _ in range(3 + secret % 4)))
    elif mode == "endless_line":
        conn.sendall(SSE + b"data: ")
        while True:
            conn.sendall(leak * 4096)
    elif mode == "endless_head":
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Leak: ")
        while True:
            conn.sendall(leak * 4096)
    elif mode == "flood":
        while True:
            conn.sendall(b"HTTP/1.1 100 " + leak + b"\r\n\r\n")
    elif mode == "trickle":
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            for byte in b"X-Leak: " + leak + b"\r\n":
                conn.sendall(bytes([byte]))
                time.sleep(0.05)
    elif mode == "reset":
        conn.sendall(SSE + event([1]))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    elif mode == "exit":
        os._exit(3)
    elif mode == "mismatch":  # valid, but wrong at a position the server chose
        ids = [0] * STEPS
        ids[secret % STEPS] = 1
        conn.sendall(SSE + event(ids) + b"data: [DONE]\n\n")

STEPS = int(sys.argv[3])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", port))
sock.listen(16)
while True:
    conn, _ = sock.accept()
    def one(conn=conn):
        try:
            serve(conn)
        except OSError:
            pass
        finally:
            conn.close()
    threading.Thread(target=one, daemon=True).start()
"""

MODES = {
    "status": "protocol",
    "reason": "protocol",
    "error_event": "protocol",
    "notjson": "protocol",
    "cut": "protocol",
    "endless_line": "protocol",
    "endless_head": "protocol",
    "flood": "protocol",
    "trickle": "timeout",
    "reset": "crash",
    "exit": "crash",
    "mismatch": "mismatch",
}


@pytest.fixture(scope="module")
def box(tmp_path_factory, base_image):
    tree = script_tree(tmp_path_factory.mktemp("fake-server"), {"fake_server.py": FAKE_SERVER})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"server-leaks-{SESSION}")
    try:
        yield sandbox, sandbox.container("candidate", tree)
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    where = tmp_path_factory.mktemp("server-leaks-judge")
    # No confirmation: the first timeout is charged (a retry needs a baseline server).
    return compose_judge_config(
        ["task=serve_cpu", f"judge.private_dir={where}", "judge.confirm_timing_failures=false"]
    ), where


def _evaluate(cfg, box, mode: str, job_id: int) -> tuple[Evaluation, str]:
    config, where = cfg
    sandbox, container = box
    s = InputSet("case:fake", [PROMPT], STEPS)
    ref = Reference(np.zeros((1, STEPS), dtype=np.int64), np.ones((1, STEPS)), 0.0, 0.1)
    home = SimpleNamespace(evals=where / "evals", references={s.name: ref}, inputs={s.name: s})
    evaluator = SimpleNamespace(cfg=config, home=home, kind=ServerKind())
    job = Job(id=job_id, arm="a", agent="w", label="", repo="", commit="c", attempts=1,
              enqueued_at=0.0)  # fmt: skip
    run = _ServerRun(evaluator, job)  # type: ignore[arg-type]

    def pipeline() -> None:
        # The last mode's server is gone before this one takes the port.
        container.run([sandbox.python, "-I", "-c", kill_script("fake_server.py")], timeout=30)
        argv = [sandbox.python, "-I", "-B", "fake_server.py", mode, str(PORT), str(STEPS)]
        server = ServerProcess(container, argv, {}, "fake")
        loadgen = LoadGen(sandbox, container, mode.replace("_", "-"))
        run.cand = Side("candidate", container, server, loadgen, "/v1/completions")
        ready = {"op": "ready", "host": HOST, "port": PORT, "path": "/v1/models"}
        assert run.cand.loadgen.call({**ready, "timeout_s": 20}, timeout=40)["ok"]
        if mode == "judge_exception":
            run.hidden_sent = True
            raise ValueError(f"a judge bug quoting the prompt: LEAK{MARKER} {PROMPT}")
        got = run.load(run.cand, s, 1, "case fake")
        run.verify(got.ids, ref.tokens, ref.margins, "case fake")

    run.pipeline = pipeline  # type: ignore[method-assign]
    evaluation = run.execute()
    return evaluation, (run.workdir / "log.json").read_text()


@pytest.mark.parametrize("mode", [*MODES, "judge_exception"])
def test_no_failure_path_carries_a_hidden_input_to_the_agent(cfg, box, mode):
    job_id = 1 + sorted([*MODES, "judge_exception"]).index(mode)
    evaluation, private_log = _evaluate(cfg, box, mode, job_id)
    if mode == "judge_exception":
        assert evaluation.verdict == Verdict.ERROR
    else:
        assert evaluation.verdict == Verdict.WRONG, evaluation.detail
        assert evaluation.reason == MODES[mode], evaluation.detail
    seen = json.dumps(
        [evaluation.detail, evaluation.metrics, evaluation.flags, verdict_line(1, evaluation)]
    )
    for secret in (str(MARKER), "LEAK", str(STATUS), f"after {CUT}"):
        assert secret not in seen, (mode, evaluation.detail)
    # The load generator's own words did name what the server chose: kept, privately.
    if mode == "status":
        assert f"HTTP status {STATUS}" in private_log
    if mode == "cut":
        assert f"after {CUT}" in private_log


def test_the_load_generators_own_words_stay_private(box):
    """An error of the judge's own client (here an op it does not know, named by a marker) is
    ERROR in judge-made words; its text, which could quote a reply, is kept for the log."""
    sandbox, container = box
    loadgen = LoadGen(sandbox, container, "own-words")
    try:
        with pytest.raises(InfrastructureFault) as caught:
            loadgen.call({"op": f"LEAK{MARKER}"}, timeout=30)
    finally:
        loadgen.close()
    assert str(caught.value) == "the own-words load generator failed (unknown op)"
    assert f"LEAK{MARKER}" in str(caught.value.private)  # type: ignore[attr-defined]
