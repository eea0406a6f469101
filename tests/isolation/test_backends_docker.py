"""Agent backends: the registry, the local backend (development only), and the docker backend
on the real engine.

The security tests start real containers through the docker backend — two arms, two agents
each, every probe running as its agent — while a real gateway serves their outboxes: what an
agent can see, write and reach, and what it cannot do through the tools either.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from isolation import DockerUnavailable, host_python_mounts
from isolation.backends import (
    AGENT_GITCONFIG,
    ARM_LABEL,
    RUN_LABEL,
    TOOLS_DIR,
    AgentBackend,
    AgentSpec,
    agent_backend,
    backend_names,
    docker_mounts,
    get_backend,
    wait_until_stopped,
)
from isolation.gitutil import git
from isolation.workspace import Seat, prepare_arm, template_repo
from judge.queue import JudgeQueue
from runner.events import EventLog
from runner.gateway import Gateway

PYTHON = "/usr/bin/python3"  # Debian's, from the host's /usr mounted read-only
AGENT_UID = 1000

# Runs inside each agent's container as the agent. argv[1]: JSON with the host paths it must
# not see and what to try. Never sends a packet: connect() on a UDP socket only picks a route.
PROBE = r"""
import errno, json, os, socket, subprocess, sys, time
args = json.loads(sys.argv[1])

def code(exc):
    return errno.errorcode.get(exc.errno, str(exc))

def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return {"rc": done.returncode, "out": done.stdout.strip(), "err": done.stderr.strip()}

out = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "home": os.environ["HOME"]}
out["env"] = {k: v for k, v in os.environ.items() if k.startswith("SWARMLAB_")}
out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 9))
    out["udp_connect"] = "connected"
except OSError as exc:
    out["udp_connect"] = code(exc)
s.close()
out["visible"] = {p: os.path.exists(p) for p in args["hidden"]}
out["work"] = sorted(os.listdir("/work"))
out["mounts"] = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    out["mounts"].append([f[4], f[3], f[5].split(",")[0]])
out["writes"] = {}
for path in args["writes"]:
    try:
        with open(path, "a") as handle:
            handle.write("")
        out["writes"][path] = "ok"
    except OSError as exc:
        out["writes"][path] = code(exc)
out["pid1"] = open("/proc/1/comm").read().strip()

# A forged post: another author and role in the body.
rid = "forged-" + args["agent"]
with open("/work/outbox/" + rid + ".json.tmp", "w") as handle:
    json.dump({"id": rid, "op": "post", "text": "forged by " + args["agent"],
               "author": args["impersonate"], "role": "critic", "kind": "note"}, handle)
os.rename("/work/outbox/" + rid + ".json.tmp", "/work/outbox/" + rid + ".json")
deadline = time.time() + 30
while not os.path.exists("/work/inbox/replies/" + rid + ".json") and time.time() < deadline:
    time.sleep(0.05)
out["forged_reply"] = json.load(open("/work/inbox/replies/" + rid + ".json"))

with open("/work/repo/PROBE.md", "w") as handle:
    handle.write("probe of " + args["agent"] + "\n")
out["commit"] = run("git", "-C", "/work/repo", "commit", "-qam", "probe", "--allow-empty")
run("git", "-C", "/work/repo", "add", "PROBE.md")
run("git", "-C", "/work/repo", "commit", "-qm", "probe")
out["head"] = run("git", "-C", "/work/repo", "rev-parse", "HEAD")["out"]
out["submit"] = run("submit", "-m", "probe")
out["post"] = run("board", "post", "--kind", "note", "hello from", args["agent"])
out["board"] = run("board", "read", "--json")
# Relays: fetch what the gateway copied into the arm's submission repo.
out["relay"] = run("git", "-C", "/work/repo", "fetch", "-q", "/work/submissions.git",
                   "refs/submissions/*:refs/remotes/subs/*")
out["relayed"] = run("git", "-C", "/work/repo", "for-each-ref", "--format=%(objectname)",
                     "refs/remotes/subs")["out"].split()
print(json.dumps(out))
"""

CONTRACT = {
    "/work/repo": ("repo", "rw"),
    "/work/notes": ("notes", "rw"),
    "/work/outbox": ("outbox", "rw"),
    "/work/inbox": ("inbox", "ro"),
    "/work/board": ("board", "ro"),
    "/work/submissions.git": ("submissions", "ro"),
}


# -- registry and the local backend (no engine needed) ---------------------------------------


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match=r"no agent backend named 'k8s'; known: .*docker.*local"):
        get_backend("k8s")
    assert {"docker", "local"} <= set(backend_names())


def test_backends_register_by_name():
    @agent_backend("test-null")
    class Null(AgentBackend):
        def start(self, spec):
            raise NotImplementedError

        def cleanup(self, run):
            return 0

    assert isinstance(get_backend("test-null"), Null) and Null.name == "test-null"


@pytest.fixture(scope="module")
def run_env(tmp_path_factory):
    """Two arms (swarm: worker + critic, solo: two workers) on a tiny template, the agents'
    folders owned by the agent uid, a real event log and judge queue, and a fake judge
    private folder with a secret beside them."""
    base = tmp_path_factory.mktemp("agents")
    template = base / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, start = template_repo(template, base / "template.git")
    uid = AGENT_UID if os.geteuid() == 0 else None
    run_dir = base / "run"
    arms = [
        prepare_arm(
            run_dir, "swarm", source, start, [Seat("w1", "worker"), Seat("c1", "critic")], uid, uid
        ),
        prepare_arm(
            run_dir, "solo", source, start, [Seat("w1", "worker"), Seat("w2", "worker")], uid, uid
        ),
    ]
    judge = base / "judge-private"
    (judge / "hidden").mkdir(parents=True)
    (judge / "hidden" / "seeds.json").write_text('{"seed": 424242}')
    events = EventLog(run_dir / "events.sqlite")
    queue = JudgeQueue(judge / "queue.sqlite")
    return SimpleNamespace(
        run_dir=run_dir,
        arms={a.name: a for a in arms},
        start=start,
        judge=judge,
        events=events,
        queue=queue,
        run=f"test-{os.getpid()}-{time.time_ns()}",
    )


def spec_for(env, arm: str, agent: str, command: list[str], **extra) -> AgentSpec:
    arm_ws = env.arms[arm]
    return AgentSpec(
        arm=arm,
        agent=agent,
        workspace=arm_ws.agents[agent],
        arm_workspace=arm_ws,
        command=command,
        env={"SWARMLAB_AGENT": agent},
        cpuset="0",
        memory="256m",
        pids_limit=64,
        labels={RUN_LABEL: env.run},
        **extra,
    )


def test_local_backend_warns_and_runs_with_host_paths(run_env, capfd):
    spec = spec_for(
        run_env,
        "swarm",
        "c1",
        [
            "sh",
            "-c",
            'echo "$SWARMLAB_OUTBOX $HOME $(id -u)"; command -v submit;'
            ' git -C "$SWARMLAB_REPO" rev-parse HEAD; sleep 30',
        ],
    )
    backend = get_backend("local")
    with pytest.warns(RuntimeWarning, match="does NOT isolate"):
        handle = backend.start(spec)
    assert "does NOT isolate" in capfd.readouterr().err
    ws = spec.workspace
    deadline = time.monotonic() + 10
    while len(handle.logs_tail(5).splitlines()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    first, tool, head = handle.logs_tail(5).splitlines()[:3]
    assert first == f"{ws.outbox} {ws.notes} {os.getuid()}"  # the runner's own user
    assert tool.endswith("agents/tools/submit")
    assert head == run_env.start  # git works in a clone owned by the agent's uid
    assert handle.running() and handle.exit_code() is None
    assert backend.cleanup(run_env.run) == 1
    assert not handle.running() and handle.exit_code() is not None


# -- docker ----------------------------------------------------------------------------------


def test_docker_unavailable_names_the_fix(run_env, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    spec = spec_for(run_env, "swarm", "w1", ["true"])
    with pytest.raises(DockerUnavailable, match=r"(?s)docker-engine\.sh ensure.*isolation=local"):
        get_backend("docker").start(spec)


def test_mounts_are_exactly_the_contracts_and_nothing_exposes_the_run(run_env):
    spec = spec_for(run_env, "swarm", "w1", ["true"])
    volumes = docker_mounts(spec)
    ws, arm = spec.workspace, spec.arm_workspace
    by_target = {v["bind"]: (host, v["mode"]) for host, v in volumes.items()}
    assert by_target["/work/repo"] == (str(ws.repo), "rw")
    assert by_target["/work/inbox"] == (str(ws.inbox), "ro")
    assert by_target["/work/board"] == (str(arm.board_dir), "ro")
    rw = sorted(t for t, (_, mode) in by_target.items() if mode == "rw")
    assert rw == ["/work/notes", "/work/outbox", "/work/repo"]
    leaky = spec_for(run_env, "swarm", "w1", ["true"], extra_mounts={str(run_env.run_dir): "/x"})
    with pytest.raises(ValueError, match=f"would expose {run_env.run_dir}"):
        docker_mounts(leaky)
    judge, seeds = str(run_env.judge), str(run_env.judge / "hidden")
    for hidden, mounted in ((judge, seeds), (seeds, judge)):  # inside it, or holding it
        hidden_spec = spec_for(run_env, "swarm", "w1", ["true"], hidden_paths=[hidden])
        docker_mounts(hidden_spec)
        hidden_spec.extra_mounts = {mounted: "/opt/x"}
        with pytest.raises(ValueError, match=f"would expose {hidden}"):
            docker_mounts(hidden_spec)


@pytest.mark.docker
def test_exit_code_logs_stop_and_cleanup(run_env, base_image):
    backend = get_backend("docker")
    started = time.monotonic()
    done = backend.start(spec_for(run_env, "solo", "w2", ["sh", "-c", "echo bye; exit 3"]))
    start_s = time.monotonic() - started
    assert wait_until_stopped(done, 30) == 3
    assert "bye" in done.logs_tail(5)
    done.stop()
    assert done.exit_code() == 3 and "bye" in done.logs_tail(5)
    sleeper = backend.start(spec_for(run_env, "solo", "w1", ["sleep", "300"]))
    again = backend.start(spec_for(run_env, "solo", "w1", ["sleep", "300"]))  # a restart
    assert not sleeper.running() and again.running()
    labelled = backend.client.containers.list(
        all=True, filters={"label": f"{RUN_LABEL}={run_env.run}"}
    )
    assert [c.labels[ARM_LABEL] for c in labelled] == ["solo"]
    assert backend.cleanup(run_env.run) == 1
    assert not again.running()
    assert start_s < 10, f"starting one agent container took {start_s:.1f}s"


@pytest.fixture(scope="module")
def probes(run_env, base_image):
    """Every agent of both arms runs the probe at once, as itself, while a gateway serves
    them; the probe's findings per (arm, agent)."""
    env = run_env
    backend = get_backend("docker")
    gateway = Gateway(env.events, env.queue, list(env.arms.values()))
    agents = [(arm, name) for arm, ws in env.arms.items() for name in ws.agents]
    every_host_path = [
        str(p)
        for arm in env.arms.values()
        for p in (arm.root, arm.origin, arm.submissions, arm.board_file)
    ] + [
        str(p)
        for arm in env.arms.values()
        for ws in arm.agents.values()
        for p in (ws.repo, ws.notes, ws.outbox, ws.inbox)
    ]
    handles, timings = {}, {}
    for arm, name in agents:
        other = next(n for a, n in agents if (a, n) != (arm, name))
        args = {
            "agent": name,
            "impersonate": other,
            "hidden": [
                str(env.judge),
                str(env.judge / "hidden" / "seeds.json"),
                str(env.queue.path),
                str(env.events.path),
                str(env.run_dir),
                "/var/run/docker.sock",
                *every_host_path,
            ],
            "writes": [
                "/work/board/board.jsonl",
                "/work/inbox/verdicts.jsonl",
                "/work/inbox/replies/x.json",
                "/work/submissions.git/config",
                "/work/repo/README",
                "/work/notes/n.md",
                "/work/outbox/x.json.tmp",
                "/opt/swarmlab/bin/submit",
                "/etc/gitconfig",
                "/x",
                "/tmp/x",
            ],
        }
        started = time.monotonic()
        handles[(arm, name)] = backend.start(
            spec_for(env, arm, name, [PYTHON, "-I", "-c", PROBE, json.dumps(args)])
        )
        timings[(arm, name)] = time.monotonic() - started
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            gateway.poll()
            time.sleep(0.05)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        codes = {key: wait_until_stopped(h, 120) for key, h in handles.items()}
        found = {}
        for key, handle in handles.items():
            logs = handle.logs_tail(200)
            assert codes[key] == 0, f"probe {key} exited {codes[key]}:\n{logs}"
            found[key] = json.loads(logs.strip().splitlines()[-1])
    finally:
        stop.set()
        server.join()
        backend.cleanup(env.run)
    gateway.poll()
    print("agent container start (s):", {f"{a}/{n}": round(t, 2) for (a, n), t in timings.items()})
    return SimpleNamespace(found=found, env=env, gateway=gateway)


@pytest.mark.docker
def test_agents_run_as_their_uid_with_an_init_and_the_contract_paths(probes):
    for (_arm, name), out in probes.found.items():
        if os.geteuid() == 0:
            assert (out["uid"], out["gid"]) == (AGENT_UID, AGENT_UID)
        assert out["cwd"] == "/work/repo" and out["home"] == "/work/notes"
        assert out["pid1"] == "docker-init"
        assert out["env"]["SWARMLAB_OUTBOX"] == "/work/outbox"
        assert out["env"]["SWARMLAB_AGENT"] == name
        # The host's Python is mounted at its own path, which may lie under /work too.
        python = {p.split("/")[2] for p in host_python_mounts() if p.startswith("/work/")}
        contract = ["board", "inbox", "notes", "outbox", "repo", "submissions.git"]
        assert out["work"] == sorted([*contract, *python])


@pytest.mark.docker
def test_no_network(probes):
    for out in probes.found.values():
        assert out["interfaces"] == ["lo"]
        assert out["udp_connect"] == "ENETUNREACH"


@pytest.mark.docker
def test_the_judge_the_log_and_every_host_path_are_invisible(probes):
    for out in probes.found.values():
        assert not any(out["visible"].values()), [p for p, v in out["visible"].items() if v]


@pytest.mark.docker
def test_each_agent_mounts_its_own_folders_only(probes):
    env = probes.env
    for (arm, name), out in probes.found.items():
        ws, arm_ws = env.arms[arm].agents[name], env.arms[arm]
        own = {
            "repo": ws.repo,
            "notes": ws.notes,
            "outbox": ws.outbox,
            "inbox": ws.inbox,
            "board": arm_ws.board_dir,
            "submissions": arm_ws.submissions,
        }
        expected = {point: (str(own[key]), mode) for point, (key, mode) in CONTRACT.items()}
        expected["/etc/gitconfig"] = (str(AGENT_GITCONFIG), "ro")
        expected["/opt/swarmlab/bin"] = (str(TOOLS_DIR), "ro")
        expected.update({path: (path, "ro") for path in host_python_mounts()})
        # What Docker itself mounts in every container (no host folder of ours).
        engine = ("/", "/proc", "/dev", "/sys", "/etc/resolv.conf", "/etc/hostname", "/etc/hosts")
        mounts = {
            point: (root, mode)
            for point, root, mode in out["mounts"]
            if not any(point == e or (e != "/" and point.startswith(e + "/")) for e in engine)
        }
        tmp_root, tmp_mode = mounts.pop("/tmp")
        assert (tmp_root, tmp_mode) == ("/", "rw")  # the tmpfs
        assert mounts.pop("/build") == ("/", "rw")  # the build folder, a tmpfs as the judge's
        assert mounts == expected
        others = [
            str(other.root)
            for other_arm in env.arms.values()
            for other in other_arm.agents.values()
            if other is not ws
        ] + [str(a.root) for a in env.arms.values() if a.name != arm]
        for _point, root, _mode in out["mounts"]:
            assert not any(root == o or root.startswith(o + "/") for o in others), root
            assert str(env.judge) not in root and str(env.run_dir / "events") not in root


@pytest.mark.docker
def test_only_the_agents_own_folders_are_writable(probes):
    for out in probes.found.values():
        writes = out["writes"]
        for path in ("/work/repo/README", "/work/notes/n.md", "/work/outbox/x.json.tmp", "/tmp/x"):
            assert writes.pop(path) == "ok", path
        # Refused twice over where the file is the runner's: by its mode (EACCES) and by the
        # read-only mount (checked in the mount table above).
        assert set(writes.values()) <= {"EROFS", "EACCES"}, writes


@pytest.mark.docker
def test_the_gateway_sets_the_author_and_a_critic_cannot_submit(probes):
    env = probes.env
    for (arm, name), out in probes.found.items():
        assert out["forged_reply"]["ok"] is True
        (forged,) = [m for m in env.events.messages(arm) if m["text"] == f"forged by {name}"]
        role = env.arms[arm].agents[name].role
        assert (forged["author"], forged["role"]) == (name, role)
        if role == "critic":
            assert out["submit"]["rc"] == 1 and "critic does not submit" in out["submit"]["err"]
        else:
            assert out["submit"]["rc"] == 0, out["submit"]
            number = int(out["submit"]["out"])
            (row,) = env.events.table("submissions", "WHERE id = ?", (number,))
            assert (row["arm"], row["agent"], row["commit_sha"]) == (arm, name, out["head"])
        assert out["post"]["rc"] == 0, out["post"]
    for arm in env.arms.values():
        board = [json.loads(line) for line in arm.board_file.read_text().splitlines()]
        assert board and {m["author"] for m in board} == set(arm.agents)
        assert [m["id"] for m in board] == [m["id"] for m in env.events.messages(arm.name)]


@pytest.mark.docker
def test_agents_fetch_submissions_of_their_own_arm_only(probes):
    env = probes.env
    heads = {key: out["head"] for key, out in probes.found.items()}
    for (arm, _name), out in probes.found.items():
        assert out["relay"]["rc"] == 0, out["relay"]
        submitted_here = {
            heads[(a, n)] for (a, n) in heads if a == arm and env.arms[a].agents[n].can_submit
        }
        assert set(out["relayed"]) <= submitted_here
        other_arm = {heads[(a, n)] for (a, n) in heads if a != arm}
        assert not set(out["relayed"]) & other_arm
    # The arm's submission repo holds what its workers submitted, nothing of the other arm.
    for arm in env.arms.values():
        refs = git("for-each-ref", "--format=%(refname)", cwd=arm.submissions).split()
        workers = [n for n, ws in arm.agents.items() if ws.can_submit]
        assert sorted(r.split("/")[2] for r in refs) == sorted(workers)


def test_tools_folder_holds_the_three_tools():
    executables = sorted(
        p.name for p in Path(TOOLS_DIR).iterdir() if p.is_file() and os.access(p, os.X_OK)
    )
    assert executables == ["board", "submit", "verdicts"]
