"""Issue 31's two probes, run as the agent's own user in real containers with real seat quotas,
against a gateway serving both arms (real git, real SQLite): neither crashes nor stalls it.

1. A seat uses up its filesystem's inodes with empty files, then renames two requests into its
   outbox (a rename takes no inode). Before the fix the reply could not be written
   (``ENOSPC`` in the inbox, which lay in the seat's own filesystem) and ``poll`` raised: the
   runner ended. Now the inbox is the runner's, outside the seat: both are answered, the
   submission is judged and its verdict delivered.
2. A seat makes a commit, puts a named pipe in its object's place and submits it. Before the
   fix the host's ``git upload-pack`` waited in ``open()`` until the fetch timed out (here an
   hour), inside the loop that serves every seat. Now the copy refuses the pipe at once, the
   refusal is recorded, and the other seats are answered meanwhile.

Containers are removed and seats released whether a test passes or fails.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from isolation.backends import RUN_LABEL, AgentSpec, get_backend
from isolation.gitutil import git
from isolation.quota import QuotaPlan
from isolation.workspace import AgentWorkspace, Seat, prepare_arm, release_quotas, template_repo
from judge.queue import JudgeQueue
from runner.events import EventLog
from runner.gateway import Gateway
from tests.runner.test_gateway import finish, lines, reply, send

QUOTA_MB = 64
AGENT_UID = 1000
# Waits end on what is awaited; these only bound a test that would otherwise hang.
PROBE_S = 600
ANSWER_S = 300

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        QuotaPlan.here(QUOTA_MB).problem is not None,
        reason=f"seat quotas are not enforceable here: {QuotaPlan.here(QUOTA_MB).problem}",
    ),
]


@pytest.fixture
def run(tmp_path, base_image):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, tmp_path / "template.git")
    run_dir = tmp_path / "run"
    quota = QuotaPlan.here(QUOTA_MB)
    uid = AGENT_UID
    arms = [
        prepare_arm(run_dir, "swarm", source, start,
                    [Seat("w1", "worker"), Seat("w2", "worker")], uid, uid, quota=quota),
        prepare_arm(run_dir, "solo", source, start, [Seat("w1", "worker")], uid, uid,
                    quota=quota),
    ]  # fmt: skip
    events = EventLog(run_dir / "events.sqlite")
    events.set_meta(run_id="probe")
    backend = get_backend("docker")
    label = f"probe-{os.getpid()}-{time.time_ns()}"
    env = SimpleNamespace(
        run_dir=run_dir,
        arms={a.name: a for a in arms},
        events=events,
        queue=JudgeQueue(tmp_path / "judge" / "queue.sqlite"),
        backend=backend,
        label=label,
    )
    try:
        yield env
    finally:
        backend.cleanup(label)
        assert release_quotas(arms) == []


def start(env, arm: str, agent: str, script: str):
    ws = env.arms[arm]
    spec = AgentSpec(
        arm=arm, agent=agent, workspace=ws.agents[agent], arm_workspace=ws,
        command=["sh", "-c", script], cpuset="0", memory="256m", pids_limit=64,
        labels={RUN_LABEL: env.label},
    )  # fmt: skip
    return env.backend.start(spec)


def await_log(handle, word: str) -> str:
    until = time.monotonic() + PROBE_S
    while word not in (out := handle.logs_tail(50)):
        if not handle.running():
            time.sleep(1)  # its last words
            out = handle.logs_tail(50)
            assert word in out, (handle.exit_code(), out)
            break
        assert time.monotonic() < until, f"the probe did not get to {word!r}: {out}"
        time.sleep(0.5)
    return out


def commit(ws: AgentWorkspace, speed: int) -> str:
    """A commit made on the host in a clone the agent's uid owns (as the agent would)."""
    (ws.repo / "engine" / "model.py").write_text(f"SPEED = {speed}\n")
    git("-c", "safe.directory=*", "commit", "-qam", f"speed {speed}", cwd=ws.repo)
    return git("-c", "safe.directory=*", "rev-parse", "HEAD", cwd=ws.repo)


def refused(env, agent: str, arm: str) -> list[dict]:
    return [
        json.loads(r["detail"])
        for r in env.events.table("lifecycle")
        if r["event"] == "request_refused" and (r["arm"], r["agent"]) == (arm, agent)
    ]


FLOOD = """
cd /work/repo && echo 'SPEED = 2' > engine/model.py && git commit -qam two
sha=$(git rev-parse HEAD)
printf '{"id":"sub1","op":"submit","commit":"%s"}' "$sha" > /work/outbox/sub1.json.tmp
printf '{"id":"post1","op":"post","text":"after the flood"}' > /work/outbox/post1.json.tmp
mkdir /work/notes/flood
i=0
while true 2>/dev/null >/work/notes/flood/$i; do i=$((i+1)); done
echo "files=$i"
mv /work/outbox/sub1.json.tmp /work/outbox/sub1.json
mv /work/outbox/post1.json.tmp /work/outbox/post1.json
echo flooded
sleep 600
"""


def test_a_seat_out_of_inodes_is_still_answered_and_the_run_goes_on(run):
    env = run
    solo, swarm = env.arms["solo"].agents["w1"], env.arms["swarm"].agents["w1"]
    handle = start(env, "solo", "w1", FLOOD)
    out = await_log(handle, "flooded")
    assert int(out.split("files=")[1].split()[0]) > 1000, out
    assert os.statvfs(solo.root).f_ffree == 0  # the seat's filesystem has no inode left
    gateway = Gateway(env.events, env.queue, list(env.arms.values()))
    theirs = send(swarm, {"op": "post", "text": "the other arm"}, name="other")
    gateway.poll()  # raised OSError (ENOSPC) before the fix: the runner ended
    assert reply(swarm, theirs)["ok"]
    assert reply(solo, "post1")["ok"]
    answer = reply(solo, "sub1")
    assert answer["ok"], answer
    assert [m["text"] for m in lines(env.arms["solo"].board_file)] == ["after the flood"]
    (row,) = env.events.table("submissions")
    finish(env.queue, row["job_id"], tok_s=2.0)
    assert gateway.poll() == 1
    assert [v["submission"] for v in lines(solo.verdicts_file)] == [answer["submission"]]
    assert handle.running()  # the seat itself goes on too


FIFO = """
cd /work/repo
sha=$(echo fifo | git commit-tree "$(git write-tree)" -p HEAD)
obj=.git/objects/$(echo "$sha" | cut -c1-2)/$(echo "$sha" | cut -c3-)
rm -f "$obj" && mkfifo "$obj" && test -p "$obj"
printf '{"id":"fifo1","op":"submit","commit":"%s"}' "$sha" > /work/outbox/fifo1.json.tmp
mv /work/outbox/fifo1.json.tmp /work/outbox/fifo1.json
echo "planted $obj"
sleep 600
"""


def test_a_fifo_as_a_commit_object_is_refused_and_holds_no_other_seat(run):
    env = run
    offender = env.arms["swarm"].agents["w1"]
    handle = start(env, "swarm", "w1", FIFO)
    out = await_log(handle, "planted")
    fifo = offender.repo / out.split("planted ")[1].split()[0]
    # An hour to copy: before the fix the loop waited that long in the FIFO's open().
    gateway = Gateway(
        env.events, env.queue, list(env.arms.values()), fetch_timeout=3600, fetch_grace=0
    )
    w2, solo = env.arms["swarm"].agents["w2"], env.arms["solo"].agents["w1"]
    others = [
        (w2, send(w2, {"op": "post", "text": "w2, same arm"}, name="p-w2")),
        (w2, send(w2, {"op": "submit", "commit": commit(w2, 3)}, name="s-w2")),
        (solo, send(solo, {"op": "post", "text": "solo, other arm"}, name="p-solo")),
        (solo, send(solo, {"op": "submit", "commit": commit(solo, 4)}, name="s-solo")),
    ]
    stop, errors = threading.Event(), []

    def serve() -> None:  # the runner's loop, in a thread: a stall must not hang the test
        while not stop.is_set():
            try:
                gateway.poll()
            except BaseException as exc:
                errors.append(exc)
                return
            time.sleep(0.05)

    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    wanted = [*others, (offender, "fifo1")]
    try:
        until = time.monotonic() + ANSWER_S
        while not all((ws.replies / f"{rid}.json").exists() for ws, rid in wanted):
            assert not errors, errors
            assert time.monotonic() < until, "the gateway stalled: " + ", ".join(
                rid for ws, rid in wanted if not (ws.replies / f"{rid}.json").exists()
            )
            time.sleep(0.2)
    finally:
        stop.set()
        _unblock(fifo)  # before the fix: lets the waiting git go, so the loop can end
        loop.join(60)
    assert not errors, errors
    assert all(reply(ws, rid)["ok"] for ws, rid in others)
    answer = reply(offender, "fifo1")
    assert answer["ok"] is False and "not a regular file" in answer["error"], answer
    (event,) = refused(env, "w1", "swarm")
    assert event["request"] == "fifo1" and "not a regular file" in event["error"]
    assert sorted((s["arm"], s["agent"]) for s in env.events.table("submissions")) == [
        ("solo", "w1"),
        ("swarm", "w2"),
    ]
    assert fifo.is_fifo() and handle.running()


def _unblock(fifo: Path) -> None:
    try:
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # never waits, even without a reader
    except OSError:
        return
    os.close(fd)
