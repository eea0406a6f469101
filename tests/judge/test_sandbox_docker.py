"""What a candidate can and cannot reach from inside the judge's sandbox (real engine)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from judge.config import SandboxConfig
from judge.pipeline import attempt_tag
from judge.sandbox import EngineFailure, Sandbox, judge_cpuset, remove_stale_sandboxes
from tasks.schema import PROJECT_ROOT
from tests.support.sandbox import kill_script, script_tree
from tests.support.unique import SESSION

pytestmark = pytest.mark.docker

HARNESS = PROJECT_ROOT / "tasks" / "decode_cpu" / "template" / "harness"
SERVE = ["{python}", "-I", "-B", "harness/serve.py"]

PROBE = r"""
import json, os, socket
out = {}
out["uid"] = os.getuid()
out["interfaces"] = [name for _, name in socket.if_nameindex()]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 9))  # a UDP connect sends no packet
    out["udp_connect"] = "ok"
except OSError as exc:
    out["udp_connect"] = exc.errno
def can_write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return True
    except OSError:
        return False
out["write_code"] = can_write("/work/candidate/engine/__init__.py")
out["write_root"] = can_write("/evil")
out["write_build"] = can_write("/build/ok")
out["secret_visible"] = os.path.exists(SECRET)
out["docker_sock"] = os.path.exists("/var/run/docker.sock")
status = open("/proc/self/status").read()
out["cap_eff"] = [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0]
out["no_new_privs"] = [l.split()[1] for l in status.splitlines() if l.startswith("NoNewPrivs")][0]
out["cpus"] = sorted(os.sched_getaffinity(0))
print(json.dumps(out))
"""


def _tree(tmp_path: Path, engine_source: str) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(HARNESS, tree / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "engine").mkdir()
    (tree / "engine" / "__init__.py").write_text(engine_source)
    for p in [tree, *tree.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return tree


def test_candidate_sees_nothing_of_the_judge_and_no_network(tmp_path):
    secret_dir = tmp_path / "judge-private"
    secret_dir.mkdir()
    secret = secret_dir / "seeds.json"
    secret.write_text('{"hidden_seed": 1}')
    tree = _tree(tmp_path, "")
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"probe-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        code, output = box.run(
            [sandbox.python, "-I", "-c", PROBE.replace("SECRET", repr(str(secret)))], 60
        )
    finally:
        sandbox.close()
    assert code == 0, output
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["uid"] == 65534
    assert seen["interfaces"] == ["lo"]
    assert seen["udp_connect"] != "ok"
    assert not seen["write_code"] and not seen["write_root"] and seen["write_build"]
    assert not seen["secret_visible"] and not seen["docker_sock"]
    assert int(seen["cap_eff"], 16) == 0 and seen["no_new_privs"] == "1"
    assert seen["cpus"] == [int(judge_cpuset("auto"))]


GARBAGE = """
import os
class Engine:
    def load(self):
        return {}
    def prefill(self, prompts):
        self.n = len(prompts)
    def decode(self, steps, margins=False):
        return [[1] * steps for _ in range(self.n)], None
    def reset(self):
        pass
"""


def test_engine_prints_cannot_corrupt_the_protocol_and_garbage_is_named(tmp_path):
    chatty = GARBAGE.replace(
        "return {}", "print('tok/s 9999'); os.write(1, b'garbage\\n'); return {}"
    )
    tree = _tree(tmp_path, chatty)
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"garbage-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        engine = box.engine(sandbox.serve_argv(SERVE), "e")
        reply, _ = engine.request({"op": "load"}, 30)
        assert reply.fields == {"ok": True, "info": {}}
        engine.request({"op": "prefill", "prompts": [[1, 2], [3]]}, 10)
        reply, _ = engine.request({"op": "decode", "steps": 3}, 10)
        assert reply["tokens"].tolist() == [[1, 1, 1], [1, 1, 1]]
        # A serve command that is not the harness and prints garbage on stdout.
        raw = box.engine(
            [
                sandbox.python,
                "-I",
                "-c",
                "print('tok/s: 9999', flush=True); import sys; sys.stdin.read()",
            ],
            "raw",
        )
        with pytest.raises(EngineFailure) as caught:
            raw.request({"op": "load"}, 10)
        assert caught.value.kind == "protocol"
        # An engine that never answers.
        silent = box.engine([sandbox.python, "-I", "-c", "import time; time.sleep(60)"], "silent")
        with pytest.raises(EngineFailure) as caught:
            silent.request({"op": "load"}, 1.0)
        assert caught.value.kind == "timeout"
    finally:
        sandbox.close()


LAST_WORDS = r"""
import sys, time
for i, line in enumerate(sys.stdin):
    sys.stderr.write(f"words{i}\n"); sys.stderr.flush()
    sys.stdout.write('{"ok": true}\n'); sys.stdout.flush()
    if len(sys.argv) > 1:
        time.sleep(3600)  # deaf: it never reads its closed stdin
"""


def test_an_engines_last_words_reach_the_judge_whatever_order_docker_delivers_them(tmp_path):
    """Docker copies an exec's stderr and stdout separately: a line written to stderr before
    the reply arrived after it in ~7 of 100 replies here (and once in CI, where a failed
    engine's private log then held no stderr). ``last_words`` reads the stream to its end."""
    tree = script_tree(tmp_path, {"last_words.py": LAST_WORDS})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"words-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        for _ in range(40):
            engine = box.engine([sandbox.python, "-I", "last_words.py"], "e")
            engine.request({"op": "load"}, 30)
            assert "words0" in engine.last_words()
            engine.close()
        deaf = box.engine([sandbox.python, "-I", "last_words.py", "deaf"], "deaf")
        deaf.request({"op": "load"}, 30)
        assert "words0" in deaf.last_words(wait_s=1.0)  # bounded: it never exits
        deaf.close(wait_s=0)
    finally:
        sandbox.close()


HUNG = r"""
import os, sys, time
if os.fork() == 0:
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", "hung-child"])
sys.stdin.readline()
print('{"ok": true}', flush=True)
time.sleep(3600)  # hung: it never reads its closed stdin
"""

PROCESSES = """
import os
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            print(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
        except OSError:
            pass
"""


def test_closing_a_hung_engine_kills_it_and_its_children(tmp_path):
    """A hung engine ignores the EOF that ends a well-behaved one: close() kills it and what
    it started (the judge used to wait 5 s for it, twice in every timeout's retry)."""
    tree = script_tree(tmp_path, {"hung.py": HUNG})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"hung-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        engine = box.engine([sandbox.python, "-I", "hung.py"], "hung")
        engine.request({"op": "load"}, 30)
        code, before = box.run([sandbox.python, "-I", "-c", PROCESSES], 30)
        assert code == 0 and "hung.py" in before and "hung-child" in before
        engine.close()
        assert not box.client.api.exec_inspect(engine.exec_id)["Running"]
        code, after = box.run([sandbox.python, "-I", "-c", PROCESSES], 30)
        assert code == 0 and "hung.py" not in after and "hung-child" not in after, after
    finally:
        sandbox.close()


DEAF = r"""
import sys, time
sys.stdin.readline()
print('{"ok": true}', flush=True)
while True:  # deaf from now on: stdin is never read again, stderr written without end
    sys.stderr.write("x\n")
    sys.stderr.flush()
    time.sleep(0.002)
"""


def test_an_engine_that_stops_reading_its_stdin_times_out_and_never_holds_the_judge(tmp_path):
    """An engine that stops reading its stdin while it floods stderr: the judge used to read
    that stderr with no deadline before each request, then ``sendall`` the request into a
    stdin nobody reads, with no timeout (the judge hung for good, every job behind it too).
    Every send and read now has the request's deadline: a ``timeout``, charged to the
    engine's side like a slow reply, every time it is asked."""
    tree = script_tree(tmp_path, {"deaf.py": DEAF})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"deaf-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        engine = box.engine([sandbox.python, "-I", "deaf.py"], "deaf")
        engine.request({"op": "load"}, 30)
        big = {"op": "put", "data": "x" * (4 << 20)}  # more than any pipe and socket buffer
        for _ in range(2):
            with pytest.raises(EngineFailure) as failure:
                engine.request(big, 3.0)
            assert failure.value.kind == "timeout", failure.value
        assert "x" in engine.stderr_tail  # its stderr was read all along
        engine.close(wait_s=1.0)
    finally:
        sandbox.close()


FLOOD = r"""
import sys
sys.stdin.readline()
print('{"ok": true}', flush=True)
while True:  # then output without end, which the judge stops reading
    sys.stdout.write("x" * 4096)
    sys.stdout.flush()
"""


@pytest.mark.parametrize("end", ["close", "hang_up"])
def test_an_engine_flooding_its_output_does_not_block_its_container(tmp_path, end):
    """An engine that floods output nobody reads: when it was killed, the Docker daemon's copy
    of that output blocked, and with it every later exec in the container (close() took 10.5
    s, its kill's exec waiting) and the container's removal (20 s). Hung up first (close()
    does; Sandbox.close() does for engines left open, before the removal kills them), the
    container runs commands again and the engine is gone. Without the hang-up, the command
    below waits out its whole timeout."""
    tree = script_tree(tmp_path, {"flood.py": FLOOD})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"flood-{end}-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        engine = box.engine([sandbox.python, "-I", "flood.py"], "flood")
        engine.request({"op": "load"}, 30)
        time.sleep(1)  # the socket's buffers fill: the daemon's copy now waits on the judge
        if end == "close":
            engine.close()
        else:  # what Sandbox.close() does to an engine left open, then its removal's kill
            engine.hang_up()
            assert engine.kill()
        code, after = box.run([sandbox.python, "-I", "-c", PROCESSES], 60)
        assert code == 0, "the container's next command never ran"
        assert "flood.py" not in after, after
        assert not box.client.api.exec_inspect(engine.exec_id)["Running"]
    finally:
        sandbox.close()


def test_a_command_still_flooding_at_its_timeout_does_not_block_its_container(tmp_path):
    """A command (a build) that hangs writing output past its timeout: its socket is shut
    down, not only closed (docker-py's reader kept it open), so the command that kills it and
    the next one run (the kill's exec waited out its own timeout before)."""
    tree = script_tree(tmp_path, {"flood.py": FLOOD})
    sandbox = Sandbox(SandboxConfig(), "cpu", owner="test", tag=f"flood-run-{SESSION}")
    try:
        box = sandbox.container("candidate", tree)
        code, _ = box.run([sandbox.python, "-I", "flood.py"], timeout=1)
        assert code is None
        time.sleep(1)  # nobody reads it now: the socket's buffers fill
        code, out = box.run([sandbox.python, "-I", "-c", kill_script("flood.py")], 60)
        assert code == 0, f"the command that stops it never ran: {out}"
        code, after = box.run([sandbox.python, "-I", "-c", PROCESSES], 60)
        assert code == 0 and "flood.py" not in after, after
    finally:
        sandbox.close()


@pytest.mark.parametrize("freezer", ["auto", "api"])
def test_frozen_freezes_every_process_and_thaws_them(tmp_path, freezer):
    tree = _tree(tmp_path, GARBAGE)
    sandbox = Sandbox(
        SandboxConfig(), "cpu", owner="test", tag=f"freeze-{freezer}-{SESSION}", freezer=freezer
    )
    try:
        box = sandbox.container("candidate", tree)
        engine = box.engine(sandbox.serve_argv(SERVE), "e")
        engine.request({"op": "load"}, 30)  # the exec fully started before any freeze

        def state() -> str:
            if box._freezer_file is None:
                paused = box.client.api.inspect_container(box.id)["State"]["Paused"]
                return "frozen" if paused else "thawed"
            _, _, _, events, frozen = box._freezer_file
            return "frozen" if frozen in events.read_text().split("\n") else "thawed"

        pairs, start = 10, time.perf_counter()
        for _ in range(pairs):
            with box.frozen():
                assert box.paused and state() == "frozen"
            assert not box.paused and state() == "thawed"
        per_pair_ms = (time.perf_counter() - start) / pairs * 1000
        how = "api" if box._freezer_file is None else str(box._freezer_file[0])
        print(f"freezer={freezer} ({how}): {per_pair_ms:.1f} ms per freeze/thaw pair")
        if freezer == "api":
            assert box._freezer_file is None
        engine.request({"op": "prefill", "prompts": [[1, 2]]}, 10)  # it runs after the thaw
        reply, _ = engine.request({"op": "decode", "steps": 2}, 10)
        assert reply["tokens"].tolist() == [[1, 1]]
    finally:
        sandbox.close()


def test_a_requeued_attempt_starts_while_the_last_ones_teardown_still_runs(tmp_path):
    """A re-queued attempt of a job opens its sandbox while the last attempt's deferred
    teardown may still be removing that one's containers. Both once had the name
    ``{owner}-{job}``: the new start removed the old container by name as Docker was removing
    it (409 "removal of container already in progress"), an ERROR for a load-induced retry.
    Every attempt's names are its own now; a dead worker's are still found by their label."""
    owner = f"requeue-{SESSION}"
    tree = script_tree(tmp_path, {"idle.py": "pass\n"})
    first = Sandbox(SandboxConfig(), "cpu", owner=owner, tag=attempt_tag(owner, "7"))
    second = Sandbox(SandboxConfig(), "cpu", owner=owner, tag=attempt_tag(owner, "7"))
    try:
        first.container("candidate", tree)
        lazy = threading.Thread(target=first.close)  # the staged pipeline's deferred teardown
        lazy.start()
        box = second.container("candidate", tree)
        lazy.join()
        assert box.alive() and not first.containers
        assert remove_stale_sandboxes(owner, "cpu") == 1  # by the owner's label, not a name
        assert not box.alive()
    finally:
        first.close()
        second.close()
