"""Issue 31's two probes inside a real run (``python -m runner experiment=swarm_vs_solo``, real
containers, real seat quotas), done by the solo seat's own program as its agent would, while
every swarm seat keeps posting on its board:

1. it stages a post and a submission in its outbox, fills its seat with empty files until no
   inode is left (its own ``submit`` tool then cannot write a request), and renames the two
   requests in (a rename takes no inode). Before the fix the runner crashed writing the reply
   into the seat's inbox; now both are answered.
2. it makes a commit, puts a named pipe in its object's place and submits it. Before the fix
   the gateway's git waited on the pipe for ``fetch_timeout`` (120 s) inside the one loop that
   serves every seat; now the submission is refused at once and recorded.

The run then ends on its own, on counts (each arm's two evaluations judged, fast: their builds
fail), and the test checks the issue's "Done when": exit 0, status ``finished``, the summary,
the offender's refusal recorded with its reason, and every swarm post answered in seconds, also
those asked after the pipe was submitted. Whatever it starts is stopped, pass or fail.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from isolation.quota import QuotaPlan
from runner.events import EventLog
from tasks.schema import PROJECT_ROOT

QUOTA_MB = 64
# Bounds only, for a run that would otherwise hang: the run ends on counts.
CEILING_MINUTES = 20
WAIT_S = 600
# Every swarm post is answered well within this (the gateway polls four times a second); the
# bug held every seat's requests for fetch_timeout, 120 s.
ANSWER_S = 30

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        QuotaPlan.here(QUOTA_MB).problem is not None,
        reason=f"seat quotas are not enforceable here: {QuotaPlan.here(QUOTA_MB).problem}",
    ),
]

# Each seat's program (run by the host's Python in its container, passed as hex: the runner
# fills ``{...}`` in the command). It writes what it saw to /work/notes/probe.json, and a
# restarted seat does nothing again.
AGENT = r'''
import errno, json, os, shutil, subprocess, time
ARM, ME = os.environ["SWARMLAB_ARM"], os.environ["SWARMLAB_AGENT"]
REPO, NOTES, OUT, INBOX = "/work/repo", "/work/notes", "/work/outbox", "/work/inbox"
REPORT = os.path.join(NOTES, "probe.json")


def sh(*argv, check=True):
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=check)


def commit(n):
    """A commit whose build fails: judged at once, and counted."""
    with open(os.path.join(REPO, "probe_%d.py" % n), "w") as f:
        f.write("not python %s %s %d\n" % (ARM, ME, n))
    sh("git", "add", "-A")
    sh("git", "commit", "-qm", "probe %d" % n)
    return sh("git", "rev-parse", "HEAD").stdout.strip()


def stage(tag, **body):
    rid = "%d-%s" % (time.time_ns(), tag)
    with open(os.path.join(OUT, rid + ".json.tmp"), "w") as f:
        json.dump(dict(body, id=rid), f)
    return rid


def send(rid):
    os.rename(os.path.join(OUT, rid + ".json.tmp"), os.path.join(OUT, rid + ".json"))


def reply(rid):
    path = os.path.join(INBOX, "replies", rid + ".json")
    for _ in range(3000):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            time.sleep(0.1)
    return None


def solo():
    seen = {}
    first = commit(1)
    post = stage("inodes-post", op="post", text="posted with no inode left")
    submit = stage("inodes-submit", op="submit", commit=first, message="no inode left")
    fill = os.path.join(NOTES, "fill")
    os.mkdir(fill)
    n = 0
    try:
        while True:
            os.close(os.open(os.path.join(fill, str(n)), os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
    except OSError as exc:
        seen["fill_errno"] = exc.errno
    seen["files"] = n
    seen["free_inodes"] = os.statvfs(NOTES).f_favail
    tool = sh("submit", "-m", "by the tool", first, check=False)
    seen["tool"] = [tool.returncode, tool.stderr]
    send(post)
    send(submit)
    seen["inodes"] = {"post": [post, reply(post)], "submit": [submit, reply(submit)]}
    shutil.rmtree(fill)
    tree = sh("git", "rev-parse", "HEAD^{tree}").stdout.strip()
    sha = sh("git", "commit-tree", "-p", "HEAD", "-m", "a pipe for an object", tree).stdout.strip()
    obj = os.path.join(REPO, ".git", "objects", sha[:2], sha[2:])
    os.unlink(obj)
    os.mkfifo(obj)
    fifo = stage("fifo-submit", op="submit", commit=sha, message="a pipe for an object")
    send(fifo)
    seen["fifo"] = [fifo, reply(fifo)]
    os.unlink(obj)  # as an agent would, once refused
    last = sh("submit", "-m", "after the probes", commit(2), check=False)
    seen["last"] = [last.returncode, last.stdout, last.stderr]
    return seen


def swarm():
    posts = 0
    while not os.path.exists(os.path.join(NOTES, "go")):
        sh("board", "post", "%s post %d" % (ME, posts))
        posts += 1
        time.sleep(0.3)
    seen = {"posts": posts}
    if ME == "w1":
        seen["submits"] = [sh("submit", "-m", "probe %d" % n, commit(n)).stdout for n in (1, 2)]
    return seen


if not os.path.exists(REPORT):
    try:
        seen = solo() if ARM == "solo" else swarm()
    except Exception as exc:
        seen = {"error": repr(exc)}
    with open(REPORT + ".tmp", "w") as f:
        json.dump(seen, f)
    os.rename(REPORT + ".tmp", REPORT)
while True:
    time.sleep(60)
'''


def _rows(db: Path, sql: str) -> list[tuple]:
    """What the running runner's event log holds so far (nothing before it is made)."""
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(db, timeout=30)) as con:
            return con.execute(sql).fetchall()
    except sqlite3.OperationalError:  # its tables not made yet
        return []


def _wait_for(predicate, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before {what}: {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _sent_at(request_id: str) -> float:
    """When a tool made the request: its id starts with the nanoseconds (after arm/agent/)."""
    return int(request_id.rsplit("/", 1)[-1].split("-", 1)[0]) / 1e9


def _containers(run_id: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=org.swarmlab.run={run_id}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip


def test_both_probes_in_a_real_run_leave_the_others_answered(
    judge_private_dir, base_image, tmp_path
):
    run_dir = tmp_path / "run"
    db = run_dir / "events.sqlite"
    program = AGENT.encode().hex()
    command = f"['{{python}}',-I,-c,'import sys; exec(bytes.fromhex(sys.argv[1]))','{program}']"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "experiment=swarm_vs_solo", "judge.preflight=skip",
         f"judge.private_dir={judge_private_dir}", f"hydra.run.dir={run_dir}",
         f"budget.minutes={CEILING_MINUTES}", "budget.evaluations=2", "budget.drain_minutes=1",
         "rejudge.runs=0", "rejudge.baseline_runs=0", "progress_every_s=5",
         f"isolation.disk_quota_mb={QUOTA_MB}", f"agent.command={command}"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    run_id = None
    try:
        # The pipe's submission refused, and a swarm post asked after it answered: then the
        # swarm seats may submit (the test's file in their notes), and the run can end.
        report = run_dir / "arms/solo/agents/w1/notes/probe.json"

        def refused() -> list[tuple]:
            if report.exists() and "error" in json.loads(report.read_text()):
                pytest.fail(f"the offender's program failed: {report.read_text()}")
            return _rows(db, "SELECT arm, agent, detail FROM lifecycle"
                             " WHERE event = 'request_refused'")  # fmt: skip

        _wait_for(refused, "the pipe's refusal", proc)
        [(_, _, detail)] = refused()
        fifo_sent = int(json.loads(detail)["request"].split("-", 1)[0]) / 1e9

        def swarm_after() -> bool:
            return any(
                _sent_at(rid) > fifo_sent
                for (rid,) in _rows(db, "SELECT request_id FROM messages WHERE arm = 'swarm'")
            )

        _wait_for(swarm_after, "a swarm post asked after the pipe's submission", proc)
        for notes in (run_dir / "arms" / "swarm" / "agents").glob("*/notes"):
            (notes / "go").write_text("")
        _, err = proc.communicate(timeout=CEILING_MINUTES * 60 + 600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        run_id = EventLog(db).meta().get("run_id") if db.exists() else None
        left = _containers(run_id) if run_id else []
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
        subprocess.run(
            [sys.executable, "-m", "isolation.quota", "release", str(run_dir)],
            cwd=PROJECT_ROOT, capture_output=True,
        )  # fmt: skip

    # The run went to its normal end, on counts.
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert left == []
    events = EventLog(db)
    meta = events.meta()
    assert meta["status"] == "finished" and meta["ended_by"] == "evaluations"
    rows = {r["arm"]: r for r in csv.DictReader((run_dir / "summary.csv").open())}
    assert sorted(rows) == ["solo", "swarm"]
    assert [rows[a]["evaluations"] for a in ("solo", "swarm")] == ["2", "2"]

    # What the offender saw, in its seat.
    seen = json.loads(report.read_text())
    assert "error" not in seen, seen
    assert seen["fill_errno"] == 28 and seen["free_inodes"] == 0 and seen["files"] > 1000, seen
    assert seen["tool"][0] == 2 and "No space left on device" in seen["tool"][1], seen
    post, submit = seen["inodes"]["post"], seen["inodes"]["submit"]
    assert post[1]["ok"] is True and submit[1]["ok"] is True, seen
    fifo, answer = seen["fifo"]
    assert answer["ok"] is False and "not a regular file" in answer["error"], seen
    assert seen["last"][0] == 0, seen

    # Recorded: the probe-1 requests carried out, the pipe's submission refused with its reason,
    # and nothing else of anyone refused.
    lifecycle = events.table("lifecycle")
    refusals = [r for r in lifecycle if r["event"] == "request_refused"]
    assert [(r["arm"], r["agent"]) for r in refusals] == [("solo", "w1")], refusals
    detail = json.loads(refusals[0]["detail"])
    assert detail["request"] == fifo and "not a regular file" in detail["error"], detail
    solo_subs = [s for s in events.table("submissions") if s["arm"] == "solo"]
    assert solo_subs[0]["request_id"] == f"solo/w1/{submit[0]}"
    assert any(m["request_id"] == f"solo/w1/{post[0]}" for m in events.messages("solo"))
    assert not any(r["event"] in ("reply_not_written", "verdict_not_written") for r in lifecycle)

    # Every other seat's requests answered in their usual time, those asked after the pipe's
    # submission too.
    swarm_posts = [m for m in events.messages("swarm") if m["request_id"]]
    waits = [m["at"] - _sent_at(m["request_id"]) for m in swarm_posts]
    assert len(swarm_posts) >= 10 and max(waits) < ANSWER_S, sorted(waits)[-5:]
    fifo_at = int(fifo.split("-", 1)[0]) / 1e9
    assert any(_sent_at(m["request_id"]) > fifo_at for m in swarm_posts)
    swarm_subs = [s for s in events.table("submissions") if s["arm"] == "swarm"]
    assert len(swarm_subs) == 2
