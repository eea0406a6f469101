"""A private arm's seats are as far apart as two arms (issue 28), proven with real containers
through the docker backend while a real gateway serves their outboxes, every probe running as
its agent: the probes of ``test_backends_docker.py`` between arms, here between the seats of one
``visibility: private`` arm.

Two rounds, so that nothing depends on timing: in the first every seat writes a secret into its
notes, commits it, submits the commit and posts it on the board; in the second (after the
gateway answered all of them) every seat looks for the other seats' secrets everywhere it can
read, their board posts, their submissions (by ref and by sha) and their folders' host paths.
"""

from __future__ import annotations

import json
import os
import threading
import time
from types import SimpleNamespace

import pytest

from isolation.backends import RUN_LABEL, AgentSpec, get_backend, wait_until_stopped
from isolation.gitutil import git
from isolation.workspace import Seat, prepare_arm, template_repo
from judge.queue import JudgeQueue
from runner.events import EventLog
from runner.gateway import Gateway
from tests.runner.test_private_arm import finish_next

pytestmark = pytest.mark.docker

PYTHON = "/usr/bin/python3"  # Debian's, from the host's /usr mounted read-only
AGENT_UID = 1000
SEATS = ("w1", "w2", "w3")
# Bounds a probe that would otherwise hang; the waits end on what they wait for.
PROBE_S = 300

# Round one, as the agent: a secret in its notes, a commit holding it, submitted and posted.
WRITE = r"""
import json, subprocess, sys
args = json.loads(sys.argv[1])

def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return {"rc": done.returncode, "out": done.stdout.strip(), "err": done.stderr.strip()}

secret = args["secret"]
open("/work/notes/secret.md", "w").write(secret + "\n")
open("/work/repo/SECRET.md", "w").write(secret + "\n")
out = {"add": run("git", "-C", "/work/repo", "add", "SECRET.md")}
out["commit"] = run("git", "-C", "/work/repo", "commit", "-qm", secret)
out["head"] = run("git", "-C", "/work/repo", "rev-parse", "HEAD")["out"]
out["submit"] = run("submit", "-m", secret)
out["post"] = run("board", "post", "--kind", "note", secret)
print(json.dumps(out))
"""

# Round two, as the agent: every place it can read, searched for the other seats' secrets.
READ = r"""
import json, os, subprocess, sys
args = json.loads(sys.argv[1])

def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return {"rc": done.returncode, "out": done.stdout.strip(), "err": done.stderr.strip()}

out = {"visible": {p: os.path.exists(p) for p in args["hidden"]}}
out["board"] = [json.loads(line) for line in open("/work/board/board.jsonl")]
out["verdicts"] = open("/work/inbox/verdicts.jsonl").read()
out["refs"] = run("git", "--git-dir", "/work/submissions.git", "for-each-ref",
                  "--format=%(refname) %(objectname)")["out"].splitlines()
out["fetch_all"] = run("git", "-C", "/work/repo", "fetch", "-q", "/work/submissions.git",
                       "refs/submissions/*:refs/remotes/subs/*")
# Another seat's commit asked for by its sha, from every repository the seat can reach.
out["by_sha"] = {}
for sha in args["others"]:
    out["by_sha"][sha] = {
        "fetch": run("git", "-C", "/work/repo", "fetch", "-q", "/work/submissions.git", sha)["rc"],
        "subs": run("git", "--git-dir", "/work/submissions.git", "cat-file", "-e", sha)["rc"],
        "repo": run("git", "-C", "/work/repo", "cat-file", "-e", sha)["rc"],
    }
# Every readable file of the contract's folders and /tmp, searched for the other seats' secrets
# (git objects are compressed: the by-sha checks above cover them).
found = []
for top in ("/work/repo", "/work/notes", "/work/outbox", "/work/inbox", "/work/board",
            "/work/submissions.git", "/tmp"):
    for folder, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            try:
                data = open(path, "rb").read()
            except OSError:
                continue
            found += [[path, s] for s in args["secrets"] if s.encode() in data]
out["found"] = found
out["mounts"] = [line.split()[3] for line in open("/proc/self/mountinfo")]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def private_arm(tmp_path_factory, base_image):
    """A private arm of three workers (and a shared solo arm beside it) on a tiny template,
    each seat's folders owned by the agent uid, a real event log, judge queue and gateway."""
    base = tmp_path_factory.mktemp("private")
    template = base / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, base / "template.git")
    uid = AGENT_UID if os.geteuid() == 0 else None
    run_dir = base / "run"
    seats = [Seat(name, "worker") for name in SEATS]
    arm = prepare_arm(run_dir, "indep", source, start, seats, uid, uid, visibility="private")
    events = EventLog(run_dir / "events.sqlite")
    queue = JudgeQueue(base / "judge" / "queue.sqlite")
    return SimpleNamespace(
        arm=arm,
        run_dir=run_dir,
        events=events,
        queue=queue,
        gateway=Gateway(events, queue, [arm]),
        run=f"test-private-{os.getpid()}-{time.time_ns()}",
    )


def run_round(env, script: str, args: dict[str, dict]) -> dict[str, dict]:
    """Every seat runs ``script`` at once with its own ``args`` while the gateway serves them;
    each seat's printed JSON."""
    backend = get_backend("docker")
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            env.gateway.poll()
            time.sleep(0.05)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    handles = {}
    try:
        for name in SEATS:
            spec = AgentSpec(
                arm=env.arm.name,
                agent=name,
                workspace=env.arm.agents[name],
                arm_workspace=env.arm,
                command=[PYTHON, "-I", "-c", script, json.dumps(args[name])],
                env={"SWARMLAB_AGENT": name},
                cpuset="0",
                memory="256m",
                pids_limit=64,
                labels={RUN_LABEL: env.run},
            )
            handles[name] = backend.start(spec)
        found = {}
        for name, handle in handles.items():
            code = wait_until_stopped(handle, PROBE_S)
            logs = handle.logs_tail(200)
            assert code == 0, f"{name} exited {code}:\n{logs}"
            found[name] = json.loads(logs.strip().splitlines()[-1])
    finally:
        stop.set()
        server.join()
        backend.cleanup(env.run)
    env.gateway.poll()
    return found


@pytest.fixture(scope="module")
def rounds(private_arm):
    env = private_arm
    secrets = {name: f"secret-of-{name}-{os.urandom(6).hex()}" for name in SEATS}
    wrote = run_round(env, WRITE, {n: {"secret": secrets[n]} for n in SEATS})
    for out in wrote.values():
        assert out["submit"]["rc"] == 0 and out["post"]["rc"] == 0, out
    heads = {name: out["head"] for name, out in wrote.items()}
    for _ in SEATS:  # the judge's part, by hand: each submission passes
        finish_next(env.queue, tokens_per_s=1.0)
    env.gateway.poll()
    arm = env.arm
    args = {}
    for name in SEATS:
        others = [n for n in SEATS if n != name]
        hidden = [str(env.run_dir), str(arm.root), str(arm.submissions), str(arm.origin)]
        for other in others:
            ws = arm.agents[other]
            hidden += [str(p) for p in (ws.root, ws.repo, ws.notes, ws.outbox, ws.inbox)]
            hidden += [str(arm.private_dir(other)), str(arm.submissions_of(other))]
            hidden += [str(arm.board_dir_of(other)), str(arm.origin_of(other))]
        args[name] = {
            "hidden": hidden,
            "others": [heads[o] for o in others],
            "secrets": [secrets[o] for o in others],
        }
    read = run_round(env, READ, args)
    return SimpleNamespace(env=env, secrets=secrets, heads=heads, wrote=wrote, read=read)


def test_a_seat_sees_no_other_seats_board_posts(rounds):
    for name, out in rounds.read.items():
        assert [(m["author"], m["text"]) for m in out["board"]] == [(name, rounds.secrets[name])]
    # The arm's log holds all three: one arm, three boards.
    assert len(rounds.env.events.messages("indep")) == len(SEATS)


def test_a_seat_fetches_its_own_submissions_only(rounds):
    for name, out in rounds.read.items():
        assert out["fetch_all"]["rc"] == 0, out["fetch_all"]
        ((ref, sha),) = (line.split() for line in out["refs"])
        assert ref.startswith(f"refs/submissions/{name}/") and sha == rounds.heads[name]
        for other_sha, tried in out["by_sha"].items():
            assert tried == {"fetch": tried["fetch"], "subs": 1, "repo": 1}, (name, other_sha)
            assert tried["fetch"] != 0, (name, other_sha)
    # The arm's own repository (the judge's, mounted nowhere) holds every seat's.
    refs = git("for-each-ref", "--format=%(objectname)", cwd=rounds.env.arm.submissions).split()
    assert sorted(refs) == sorted(rounds.heads.values())


def test_a_seat_reads_no_other_seats_notes_commits_or_folders(rounds):
    arm = rounds.env.arm
    for name, out in rounds.read.items():
        assert out["found"] == [], (name, out["found"])
        assert not any(out["visible"].values()), [p for p, v in out["visible"].items() if v]
        others = [str(arm.private_dir(o)) for o in SEATS if o != name]
        others += [str(arm.agents[o].root) for o in SEATS if o != name]
        others += [str(arm.agents[o].inbox) for o in SEATS if o != name]
        for root in out["mounts"]:
            assert not any(root == o or root.startswith(o + "/") for o in others), root


def test_a_seat_gets_its_own_verdicts_only(rounds):
    for name, out in rounds.read.items():
        (verdict,) = [json.loads(line) for line in out["verdicts"].splitlines()]
        assert (verdict["commit"], verdict["verdict"]) == (rounds.heads[name], "PASS")
