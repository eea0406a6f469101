"""The gateway on real git repositories and real SQLite files: submissions reach the judge's
queue and verdicts reach the right inbox only; nothing an agent writes is trusted; a gateway
killed at any step never loses or doubles anything. The judge itself is not run: jobs are
finished by hand with real ``Evaluation`` objects. The in-container tools are driven here
through their host-path variables."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from isolation.backends import TOOLS_DIR, agent_paths
from isolation.gitutil import GitError, git
from isolation.workspace import AgentWorkspace, Seat, prepare_arm, template_repo
from judge.queue import JudgeQueue
from judge.verdict import Evaluation, Verdict
from runner import gateway as gateway_module
from runner.events import EventLog
from runner.gateway import MAX_REQUEST_BYTES, Gateway


@pytest.fixture
def lab(tmp_path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, base = template_repo(template, tmp_path / "template.git")
    run_dir = tmp_path / "run"
    swarm = prepare_arm(
        run_dir,
        "swarm",
        source,
        base,
        [Seat("w1", "worker", "moe"), Seat("w2", "worker", "head"), Seat("c1", "critic")],
    )
    solo = prepare_arm(run_dir, "solo", source, base, [Seat("w1", "worker")])
    events = EventLog(run_dir / "events.sqlite")
    events.set_meta(run_id="run-1")
    queue = JudgeQueue(tmp_path / "judge" / "queue.sqlite")
    return SimpleNamespace(
        run_dir=run_dir,
        base=base,
        swarm=swarm,
        solo=solo,
        events=events,
        queue=queue,
        gateway=Gateway(events, queue, [swarm, solo]),
    )


def commit(ws: AgentWorkspace, speed: int) -> str:
    (ws.repo / "engine" / "model.py").write_text(f"SPEED = {speed}\n")
    git("commit", "-qam", f"speed {speed}", cwd=ws.repo)
    return git("rev-parse", "HEAD", cwd=ws.repo)


def send(ws: AgentWorkspace, body: dict, name: str | None = None) -> str:
    rid = name or body.get("id") or f"r{time.time_ns()}"
    body = {"id": rid, **body}
    (ws.outbox / f"{rid}.json").write_text(json.dumps(body))
    return rid


def reply(ws: AgentWorkspace, rid: str) -> dict:
    return json.loads((ws.replies / f"{rid}.json").read_text())


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def finish(queue: JudgeQueue, job_id: int, verdict: Verdict = Verdict.PASS, **metrics) -> None:
    job = queue.claim("cpu")
    assert job is not None and job.id == job_id
    now = time.time()
    queue.finish(
        job_id,
        Evaluation(
            job_id=job.id,
            arm=job.arm,
            agent=job.agent,
            commit=job.commit,
            verdict=verdict,
            reason="" if verdict is Verdict.PASS else "wrong_tokens",
            detail="row 3 differs at step 5" if verdict is not Verdict.PASS else "",
            metrics=metrics,
            stages={"build": 0.1, "total": 1.0},
            flags={"secret_stage_detail": True},
            enqueued_at=job.enqueued_at,
            started_at=now,
            finished_at=now,
        ),
    )


def test_submit_is_copied_queued_and_its_verdict_reaches_only_its_agent(lab):
    w1 = lab.swarm.agents["w1"]
    sha = commit(w1, 2)
    rid = send(w1, {"op": "submit", "commit": sha, "message": "batch the projections"})
    assert lab.gateway.poll() == 1
    assert not (w1.outbox / f"{rid}.json").exists()
    answer = reply(w1, rid)
    assert answer == {"ok": True, "submission": answer["submission"], "commit": sha}
    n = answer["submission"]

    subs = lab.swarm.submissions
    assert git("rev-parse", f"refs/submissions/w1/{n}", cwd=subs) == sha
    assert git("for-each-ref", "--format=%(refname)", cwd=subs) == f"refs/submissions/w1/{n}"
    (row,) = lab.events.table("submissions")
    assert (row["arm"], row["agent"], row["commit_sha"]) == ("swarm", "w1", sha)
    assert row["message"] == "batch the projections"
    # The judge reads the gateway's copy, never the agent's clone.
    job = lab.queue.claim("cpu")
    assert job is not None and job.id == row["job_id"]
    assert (job.repo, job.commit, job.arm, job.agent) == (str(subs), sha, "swarm", "w1")
    # Its turn in a judge shared with other runs is this run's swarm arm, not every "swarm".
    with sqlite3.connect(lab.queue.path) as db:
        (key,) = db.execute("SELECT fair_key FROM jobs WHERE id = ?", (job.id,)).fetchone()
    assert key == "run-1/swarm"
    lab.queue.requeue(job.id, "test")

    assert lab.gateway.poll() == 0  # nothing finished yet
    finish(lab.queue, row["job_id"], Verdict.PASS, tok_s=123.5, x_baseline=2.5)
    assert lab.gateway.poll() == 1
    assert lines(w1.verdicts_file) == [
        {
            "submission": n,
            "commit": sha,
            "verdict": "PASS",
            "reason": "",
            "detail": "",
            "metrics": {"tok_s": 123.5, "x_baseline": 2.5},
        }
    ]
    others = [a for name, a in lab.swarm.agents.items() if name != "w1"]
    for agent in [*others, lab.solo.agents["w1"]]:
        assert agent.verdicts_file.read_text() == ""
    (evaluation,) = lab.events.table("evaluations")
    assert evaluation["submission_id"] == n and evaluation["verdict"] == "PASS"
    assert lab.gateway.poll() == 0  # delivered once


def test_a_critic_cannot_submit(lab):
    c1 = lab.swarm.agents["c1"]
    sha = commit(c1, 3)
    rid = send(c1, {"op": "submit", "commit": sha})
    lab.gateway.poll()
    assert reply(c1, rid) == {"ok": False, "error": "a critic does not submit (only workers do)"}
    assert lab.events.table("submissions") == []
    assert lab.queue.counts() == {}
    (refused,) = lab.events.table("lifecycle")
    assert (refused["agent"], refused["event"]) == ("c1", "request_refused")


def test_only_commits_of_the_agents_own_clone_can_be_submitted(lab):
    w1, w2 = lab.swarm.agents["w1"], lab.swarm.agents["w2"]
    theirs = commit(w2, 4)
    other_arm = commit(lab.solo.agents["w1"], 5)
    for sha in (theirs, other_arm, "f" * 40):
        rid = send(w1, {"op": "submit", "commit": sha})
        lab.gateway.poll()
        answer = reply(w1, rid)
        assert answer["ok"] is False
        assert f"commit {sha} is not in the repository" in answer["error"]
    assert lab.events.table("submissions") == []


def test_links_in_the_agents_git_folder_do_not_reach_other_repositories(lab):
    w1, w2 = lab.swarm.agents["w1"], lab.swarm.agents["w2"]
    theirs = commit(w2, 6)
    # Alternates pointing at another agent's objects: git would serve them; the gateway does
    # not let git read objects/info at all.
    alternates = w1.repo / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(str(w2.repo / ".git" / "objects") + "\n")
    scratch = lab.run_dir / "scratch.git"
    git("init", "-q", "--bare", str(scratch))
    naive = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
    git("fetch", "-q", f"--upload-pack={naive}", str(w1.repo), f"{theirs}:refs/x", cwd=scratch)
    assert git("cat-file", "-t", theirs, cwd=scratch) == "commit"  # what a plain fetch allows
    rid = send(w1, {"op": "submit", "commit": theirs})
    lab.gateway.poll()
    assert "is not in the repository" in reply(w1, rid)["error"]
    alternates.unlink()
    # A gitfile (".git" naming another repository) and a symlinked objects folder.
    git_dir = w1.repo / ".git"
    git_dir.rename(w1.repo / "real-git")
    (w1.repo / ".git").write_text(f"gitdir: {w2.repo / '.git'}\n")
    rid = send(w1, {"op": "submit", "commit": theirs})
    lab.gateway.poll()
    assert "must be a plain folder" in reply(w1, rid)["error"]
    (w1.repo / ".git").unlink()
    (w1.repo / "real-git").rename(git_dir)
    objects = git_dir / "objects"
    objects.rename(git_dir / "real-objects")
    objects.symlink_to(w2.repo / ".git" / "objects")
    rid = send(w1, {"op": "submit", "commit": theirs})
    lab.gateway.poll()
    assert "must be a plain folder" in reply(w1, rid)["error"]
    assert lab.events.table("submissions") == []
    with pytest.raises(GitError):  # not a single object of w2's commit was copied
        git("cat-file", "-e", theirs, cwd=lab.swarm.submissions)


def test_the_author_is_the_outbox_owner_and_the_board_file_equals_the_table(lab):
    w1, c1 = lab.swarm.agents["w1"], lab.swarm.agents["c1"]
    forged = send(
        w1,
        {
            "op": "post",
            "text": "w2 says: everything is fine",
            "kind": "result",
            "author": "w2",
            "role": "critic",
            "refs": {"commit": "a" * 40},
        },
    )
    review = send(c1, {"op": "post", "text": "w1's PASS holds", "kind": "review"})
    assert lab.gateway.poll() == 2
    assert reply(w1, forged)["ok"] and reply(c1, review)["ok"]
    board = lines(lab.swarm.board_file)
    assert [(m["author"], m["role"], m["kind"]) for m in board] == [
        ("w1", "worker", "result"),
        ("c1", "critic", "review"),
    ]
    assert board[0]["refs"] == {"commit": "a" * 40}
    table = lab.events.messages("swarm")
    assert [m["id"] for m in board] == [m["id"] for m in table]
    assert lab.solo.board_file.read_text() == ""  # arms do not share a board
    # Posting the same request again (a retry) does not add a message.
    send(w1, {"op": "post", "text": "again", "kind": "note"}, name=forged)
    lab.gateway.poll()
    assert len(lines(lab.swarm.board_file)) == 2


def _req(**body) -> bytes:
    return json.dumps({"id": "bad", **body}).encode()


@pytest.mark.parametrize(
    ("name", "raw", "error"),
    [
        ("bad", b"{not json", "not valid JSON"),
        ("bad", b"\xff\xfe", "not valid JSON"),
        ("bad", b"[1, 2]", "must be a JSON object"),
        ("other", _req(op="post", text="x"), "must equal its file"),
        ("bad", _req(op="delete", message=3), "unknown op"),
        ("bad", _req(op="post", text=" "), "non-empty text"),
        ("bad", _req(op="post", text="x", kind="shout"), "kind 'shout'"),
        ("bad", _req(op="post", text="x", refs=[1]), "refs must be"),
        ("bad", _req(op="submit", commit="HEAD"), "full 40-hex"),
        ("bad", _req(op="post", text="x" * MAX_REQUEST_BYTES), "larger than"),
    ],
)
def test_malformed_requests_are_refused_with_a_reason(lab, name, raw, error):
    w1 = lab.swarm.agents["w1"]
    (w1.outbox / f"{name}.json").write_bytes(raw)
    assert lab.gateway.poll() == 1
    answer = reply(w1, name)
    assert answer["ok"] is False and error in answer["error"], answer
    assert list(w1.outbox.iterdir()) == []
    assert lab.events.messages("swarm") == [] and lab.events.table("submissions") == []


def test_a_request_with_an_unusable_name_is_dropped_without_a_reply(lab):
    w1 = lab.swarm.agents["w1"]
    (w1.outbox / "..json").write_text('{"id": ".", "op": "post", "text": "x"}')
    (w1.outbox / "notes.txt").write_text("not a request")
    lab.gateway.poll()
    assert sorted(p.name for p in w1.outbox.iterdir()) == ["notes.txt"]
    assert list(w1.replies.iterdir()) == []
    (event,) = lab.events.table("lifecycle")
    assert event["event"] == "request_refused"


def test_links_and_unfinished_requests_are_not_followed(lab, tmp_path):
    w1, w2 = lab.swarm.agents["w1"], lab.swarm.agents["w2"]
    secret = tmp_path / "judge-private" / "secret.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"id": "link", "op": "post", "text": "hidden seed 42"}))
    (w1.outbox / "link.json").symlink_to(secret)
    # A request planted (on the host) as a link into another agent's outbox.
    (w2.outbox / "theirs.json").write_text(json.dumps({"id": "theirs", "op": "post", "text": "x"}))
    (w1.outbox / "theirs.json").symlink_to(w2.outbox / "theirs.json")
    (w1.outbox / "half.json.tmp").write_text('{"id": "half", "op": "po')
    lab.gateway.poll()
    assert "symbolic link" in reply(w1, "link")["error"]
    assert "symbolic link" in reply(w1, "theirs")["error"]
    assert secret.exists() and (w1.outbox / "half.json.tmp").exists()
    assert [m["author"] for m in lab.events.messages("swarm")] == ["w2"]  # w2's own request
    assert "hidden seed" not in lab.swarm.board_file.read_text()


def test_a_request_id_is_not_reused_for_another_commit(lab):
    w1 = lab.swarm.agents["w1"]
    first = commit(w1, 7)
    send(w1, {"op": "submit", "commit": first}, name="same")
    lab.gateway.poll()
    second = commit(w1, 8)
    send(w1, {"op": "submit", "commit": second}, name="same")
    lab.gateway.poll()
    assert "already used" in reply(w1, "same")["error"]
    assert [s["commit_sha"] for s in lab.events.table("submissions")] == [first]


def test_submission_cap(lab):
    gateway = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo], max_submissions_per_agent=1)
    w1 = lab.swarm.agents["w1"]
    send(w1, {"op": "submit", "commit": commit(w1, 9)}, name="one")
    send(w1, {"op": "submit", "commit": commit(w1, 10)}, name="two")
    gateway.poll()
    assert reply(w1, "one")["ok"] and "cap reached" in reply(w1, "two")["error"]


def test_an_arms_judge_budget_refuses_more_and_ends_once_all_were_judged(lab):
    gateway = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo], evaluations_per_arm=2)
    w1, w2, solo = lab.swarm.agents["w1"], lab.swarm.agents["w2"], lab.solo.agents["w1"]
    send(w1, {"op": "submit", "commit": commit(w1, 21)}, name="a")
    send(w2, {"op": "submit", "commit": commit(w2, 22)}, name="b")
    send(solo, {"op": "submit", "commit": commit(solo, 23)}, name="c")
    gateway.poll()
    # The swarm's two are spent between its agents; the third is refused, recorded, not lost.
    send(w1, {"op": "submit", "commit": commit(w1, 24)}, name="d")
    gateway.poll()
    assert reply(w1, "a")["ok"] and reply(w2, "b")["ok"] and reply(solo, "c")["ok"]
    assert "judge budget is spent" in reply(w1, "d")["error"]
    refused = [r for r in lab.events.table("lifecycle") if r["event"] == "request_refused"]
    assert [json.loads(r["detail"])["request"] for r in refused] == ["d"]
    jobs = [s["job_id"] for s in lab.events.table("submissions")]
    for job in jobs:
        finish(lab.queue, job)
    gateway.poll()
    assert not gateway.budget_spent()  # the solo arm has one left
    send(solo, {"op": "submit", "commit": commit(solo, 25)}, name="e")
    gateway.poll()
    assert not gateway.budget_spent()  # submitted, not judged yet
    finish(lab.queue, lab.events.table("submissions")[-1]["job_id"])
    gateway.poll()
    assert gateway.budget_spent()
    # The runner's own re-judgements neither use the budget nor hold the end back.
    best = lab.events.table("submissions")[-1]["commit_sha"]
    sid, _ = lab.events.add_submission("solo", "confirm", "solo/confirm/1", best)
    lab.events.set_job(sid, lab.queue.enqueue(arm="solo", agent="confirm", repo="x", commit=best))
    assert lab.events.pending_jobs() and gateway.budget_spent()
    assert not Gateway(lab.events, lab.queue, [lab.swarm, lab.solo]).budget_spent()  # no budget


def test_a_seats_own_judge_budget_and_token_spent_seats_end_an_arm(lab):
    gateway = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo], evaluations_per_seat=1)
    w1, w2, solo = lab.swarm.agents["w1"], lab.swarm.agents["w2"], lab.solo.agents["w1"]
    send(w1, {"op": "submit", "commit": commit(w1, 31)}, name="a")
    send(solo, {"op": "submit", "commit": commit(solo, 33)}, name="c")
    gateway.poll()
    send(w1, {"op": "submit", "commit": commit(w1, 34)}, name="d")  # w1's second: refused
    send(w2, {"op": "submit", "commit": commit(w2, 32)}, name="b")  # w2's first: taken
    gateway.poll()
    assert reply(w1, "a")["ok"] and reply(w2, "b")["ok"] and reply(solo, "c")["ok"]
    assert "your judge budget is spent (1 evaluations per seat)" in reply(w1, "d")["error"]
    # Submitted, not judged: no arm is done yet.
    assert gateway.arms_ended() == {"swarm": None, "solo": None}
    for s in lab.events.table("submissions"):
        finish(lab.queue, s["job_id"])
    gateway.poll()
    # Every worker spent its own; the critic (it never submits) holds nothing back.
    assert gateway.arms_ended() == {"swarm": "evaluations", "solo": "evaluations"}
    assert gateway.budget_spent()

    # Per arm, a mix: the solo arm's judge budget is spent, the swarm's seats spent their
    # tokens (the supervisor's (arm, seat) pairs), one after the other.
    mixed = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo], evaluations_per_arm=5)
    assert mixed.arms_ended() == {"swarm": None, "solo": None}
    assert mixed.arms_ended({("swarm", "w1")})["swarm"] is None  # w2 can still submit
    ends = mixed.arms_ended({("swarm", "w1"), ("swarm", "w2"), ("solo", "w1")})
    assert ends == {"swarm": "budget", "solo": "budget"} and not mixed.budget_spent()
    # A spent seat's submission still waiting for its verdict holds the end back.
    send(solo, {"op": "submit", "commit": commit(solo, 35)}, name="e")
    mixed.poll()
    assert mixed.arms_ended({("solo", "w1")})["solo"] is None
    finish(lab.queue, lab.events.table("submissions")[-1]["job_id"])
    mixed.poll()
    assert mixed.arms_ended({("solo", "w1")})["solo"] == "budget"


class Crash(BaseException):
    """A kill of the gateway's process: not an error of one seat's request, which the gateway
    would answer as that request's refusal."""


@pytest.mark.parametrize(
    "step", ["fetch", "add_submission", "enqueue", "set_job", "reply", "unlink"]
)
def test_a_gateway_killed_mid_submit_neither_loses_nor_doubles(lab, monkeypatch, step):
    w1 = lab.swarm.agents["w1"]
    sha = commit(w1, 11)
    rid = send(w1, {"op": "submit", "commit": sha})
    # Each step runs, then the gateway dies ("reply": dies after the reply, before removing).
    owner, attribute = {
        "fetch": ("runner.gateway.fetch_untrusted", None),
        "add_submission": (lab.events, "add_submission"),
        "enqueue": (lab.queue, "enqueue"),
        "set_job": (lab.events, "set_job"),
        "reply": (Gateway, "_remove"),  # the reply is written; the request not yet removed
        "unlink": (Gateway, "_remove"),
    }[step]
    real = getattr(owner, attribute) if attribute else gateway_module.fetch_untrusted

    def crash_after(*args, **kwargs):
        if step != "reply":
            real(*args, **kwargs)
        raise Crash(step)

    if attribute:
        monkeypatch.setattr(owner, attribute, crash_after)
    else:
        monkeypatch.setattr(owner, crash_after)
    with pytest.raises(Crash):
        lab.gateway.poll()
    monkeypatch.undo()
    restarted = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo])
    restarted.poll()
    (row,) = lab.events.table("submissions")
    assert row["job_id"] is not None
    assert sum(lab.queue.counts().values()) == 1
    assert reply(w1, rid) == {"ok": True, "submission": row["id"], "commit": sha}
    assert list(w1.outbox.iterdir()) == []
    assert git("rev-parse", f"refs/submissions/w1/{row['id']}", cwd=lab.swarm.submissions) == sha
    finish(lab.queue, row["job_id"])
    restarted.poll()
    assert len(lines(w1.verdicts_file)) == 1


def test_board_and_verdict_files_are_rebuilt_from_the_log_after_a_crash(lab, monkeypatch):
    w1 = lab.swarm.agents["w1"]
    send(w1, {"op": "post", "text": "first"}, name="p1")
    lab.gateway.poll()
    monkeypatch.setattr(Gateway, "_sync_board", lambda self, arm: (_ for _ in ()).throw(Crash()))
    send(w1, {"op": "post", "text": "second"}, name="p2")
    with pytest.raises(Crash):
        lab.gateway.poll()
    monkeypatch.undo()
    assert len(lines(lab.swarm.board_file)) == 1  # the table has two: the crash window
    # A verdict stored but not yet written out, and a torn last board line.
    send(w1, {"op": "submit", "commit": commit(w1, 12)}, name="s1")
    Gateway(lab.events, lab.queue, [lab.swarm, lab.solo]).poll()
    (sub,) = lab.events.table("submissions")
    finish(lab.queue, sub["job_id"], Verdict.WRONG)
    lab.events.add_evaluation(sub["id"], lab.queue.result(sub["job_id"]))
    with open(lab.swarm.board_file, "a") as board:
        board.write('{"id": 99, "author": "w1", "te')

    restarted = Gateway(lab.events, lab.queue, [lab.swarm, lab.solo])
    assert [m["text"] for m in lines(lab.swarm.board_file)] == ["first", "second"]
    assert [v["verdict"] for v in lines(w1.verdicts_file)] == ["WRONG"]
    assert restarted.poll() == 0
    assert [m["id"] for m in lines(lab.swarm.board_file)] == [
        m["id"] for m in lab.events.messages("swarm")
    ]


# -- the tools, against a live gateway ---------------------------------------------------


def tool(lab, agent: AgentWorkspace, arm, *argv: str, timeout: float = 20, **env: str):
    arm_ws = lab.swarm if arm == "swarm" else lab.solo
    environ = {
        "PATH": os.environ["PATH"],
        "SWARMLAB_REPLY_TIMEOUT": "10",
        **agent_paths(agent, arm_ws, container=False),
        **env,
    }
    return subprocess.run(
        [str(TOOLS_DIR / argv[0]), *argv[1:]],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def live(lab):
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            lab.gateway.poll()
            time.sleep(0.02)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield lab
    stop.set()
    thread.join()


def test_tools_submit_post_read_and_wait_for_verdicts(live):
    lab = live
    w1, c1 = lab.swarm.agents["w1"], lab.swarm.agents["c1"]
    sha = commit(w1, 13)
    done = tool(lab, w1, "swarm", "submit", "-m", "first try")
    assert done.returncode == 0, done.stderr
    n = int(done.stdout)
    assert lab.events.table("submissions")[0]["commit_sha"] == sha

    waiting = subprocess.Popen(
        [str(TOOLS_DIR / "verdicts"), "--wait", str(n), "--timeout", "20", "--json"],
        env={"PATH": os.environ["PATH"], **agent_paths(w1, lab.swarm, container=False)},
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.2)
    finish(lab.queue, lab.events.table("submissions")[0]["job_id"], tok_s=9.5)
    out, _ = waiting.communicate(timeout=20)
    assert waiting.returncode == 0
    assert json.loads(out)["verdict"] == "PASS" and json.loads(out)["metrics"] == {"tok_s": 9.5}

    posted = tool(
        lab,
        w1,
        "swarm",
        "board",
        "post",
        "--kind",
        "result",
        "--ref",
        f"commit={sha}",
        "PASS",
        "at",
        "9.5",
    )
    assert posted.returncode == 0, posted.stderr
    read = tool(lab, c1, "swarm", "board", "read", "--json")
    (message,) = [json.loads(line) for line in read.stdout.splitlines()]
    assert message["author"] == "w1" and message["text"] == "PASS at 9.5"
    assert message["refs"] == {"commit": sha}
    since = tool(lab, c1, "swarm", "board", "read", "--since", str(message["id"]))
    assert since.returncode == 0 and since.stdout == ""
    human = tool(lab, w1, "swarm", "verdicts")
    assert human.stdout.startswith(f"#{n} {sha[:10]} PASS")

    refused = tool(lab, c1, "swarm", "submit")
    assert refused.returncode == 1 and "critic does not submit" in refused.stderr

    sha2 = commit(w1, 14)
    waited = subprocess.Popen(
        [str(TOOLS_DIR / "submit"), "--wait", "--timeout", "20", sha2],
        env={"PATH": os.environ["PATH"], **agent_paths(w1, lab.swarm, container=False)},
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 10
    while not lab.events.table("submissions", "WHERE job_id = 2") and time.monotonic() < deadline:
        time.sleep(0.05)  # queued (the gateway records the job just after the submission)
    finish(lab.queue, 2, Verdict.WRONG)
    out, _ = waited.communicate(timeout=20)
    number, verdict = out.splitlines()
    assert waited.returncode == 0 and json.loads(verdict)["verdict"] == "WRONG"
    assert json.loads(verdict)["submission"] == int(number)


def test_tools_usage_errors_and_timeouts(lab):
    w1 = lab.swarm.agents["w1"]
    not_a_commit = tool(lab, w1, "swarm", "submit", "no-such-ref")
    assert not_a_commit.returncode == 2 and "not a commit" in not_a_commit.stderr
    usage = tool(lab, w1, "swarm", "board", "shout")
    assert usage.returncode == 2
    # Nobody polls the outbox: a bounded wait, a clear message, the request left in place.
    silent = tool(lab, w1, "swarm", "submit", SWARMLAB_REPLY_TIMEOUT="0.3")
    assert silent.returncode == 2 and "no reply from the gateway" in silent.stderr
    assert len(list(w1.outbox.glob("*.json"))) == 1
    nothing = tool(lab, w1, "swarm", "verdicts", "--wait", "5", "--timeout", "0.2")
    assert nothing.returncode == 2 and "timed out" in nothing.stderr
