"""Resolving candidates and extracting their trees from real git repositories, adversarial
ones included: trees crafted with git's plumbing (``mktree``, ``hash-object --literally``)
that a porcelain would never make, and repositories whose own config and hooks would run a
command if git ever used them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from isolation.gitutil import git
from isolation.workspace import Seat, prepare_arm, template_repo
from judge import checkout
from judge.__main__ import split_verbatim
from judge.checkout import (
    BadInput,
    candidate_store,
    extract_tree,
    import_candidate,
    resolve_candidate,
)
from judge.queue import JudgeQueue
from judge.verdict import Outcome, Verdict
from runner.events import EventLog
from runner.gateway import Gateway
from tasks.schema import PROJECT_ROOT


def _git(cwd, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, input=stdin)
    return done.stdout.decode().strip()


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "master")
    _git(path, "config", "user.email", "t@t")
    _git(path, "config", "user.name", "t")
    (path / "a.py").write_text("x = 1\n")
    (path / "run.sh").write_text("#!/bin/sh\n")
    (path / "run.sh").chmod(0o755)
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "one")
    return path


def _blob(repo: Path, data: bytes) -> str:
    return _git(repo, "hash-object", "-w", "--stdin", stdin=data)


def _tree(repo: Path, entries: list[tuple[str, bytes, str]]) -> str:
    """A raw tree object, written as given (no sorting, no name checks): what an adversary
    can put in an object store."""
    raw = b"".join(
        mode.encode() + b" " + name + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries
    )
    return _git(repo, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", stdin=raw)


def _commit(repo: Path, tree: str, parent: str | None = None) -> str:
    args = ["commit-tree", tree, "-m", "crafted"] + (["-p", parent] if parent else [])
    return _git(repo, *args)


def _escape_commit(repo: Path) -> str:
    """A commit whose root holds ``..`` -> ``baseline/engine/model.py``: extracted naively
    into ``work/tree`` it overwrites ``work/baseline/engine/model.py``."""
    model = _tree(repo, [("100644", b"model.py", _blob(repo, b"FAST = True\n"))])
    engine = _tree(repo, [("40000", b"engine", model)])
    baseline = _tree(repo, [("40000", b"baseline", engine)])
    ok = _blob(repo, b"x = 1\n")
    return _commit(repo, _tree(repo, [("40000", b"..", baseline), ("100644", b"a.py", ok)]))


def test_path_ref_and_head_resolve_to_full_shas(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert resolve_candidate(str(repo)).commit == head
    assert resolve_candidate(f"{repo}@master").commit == head
    assert resolve_candidate("master", repo=str(repo)).commit == head


def test_git_revisions_resolve_and_reach_the_cli_verbatim(repo):
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("x = 2\n")
    _git(repo, "commit", "-qam", "two")
    _git(repo, "tag", "-a", "-m", "t", "v1", first)
    _git(repo, "pack-refs", "--all")  # refs read from packed-refs too
    assert resolve_candidate(f"{repo}@HEAD~1").commit == first
    assert resolve_candidate(f"{repo}@master^").commit == first
    assert resolve_candidate(f"{repo}@v1").commit == first  # an annotated tag, peeled
    # Hydra's lexer refuses '~' and '^': the CLI takes these two keys as they are.
    rest, verbatim = split_verbatim(["task=decode_cpu", f"candidate={repo}@HEAD~1", "repo=x^"])
    assert rest == ["task=decode_cpu"] and verbatim == {
        "candidate": f"{repo}@HEAD~1",
        "repo": "x^",
    }
    assert split_verbatim(["candidate='a b'"]) == (["candidate='a b'"], {})


@pytest.mark.parametrize(
    ("candidate", "repo_arg", "message"),
    [
        ("{tmp}/nowhere", None, "does not exist"),
        ("{tmp}/plain", None, "is not a git repository"),
        ("{repo}@no-such-branch", None, "does not exist in"),
        ("{repo}@--output=/tmp/x", None, "does not exist in"),
        ("no-such-branch", "{repo}", "does not exist in"),
        ("", None, "no candidate given"),
    ],
)
def test_bad_input_is_one_clear_error(repo, tmp_path, candidate, repo_arg, message):
    (tmp_path / "plain").mkdir()
    fill = {"tmp": tmp_path, "repo": repo}
    with pytest.raises(BadInput, match=message):
        resolve_candidate(candidate.format(**fill), repo_arg.format(**fill) if repo_arg else None)


def test_a_gitfile_or_linked_git_folder_is_refused(repo, tmp_path):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    with pytest.raises(BadInput, match="plain folder"):
        resolve_candidate(str(worktree))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".git").symlink_to(repo / ".git")
    with pytest.raises(BadInput, match="plain folder"):
        resolve_candidate(str(linked))


def test_extract_writes_committed_content_only(repo, tmp_path):
    (repo / "a.py").write_text("uncommitted edit\n")
    (repo / ".gitattributes").write_text(
        "a.py export-ignore\n"
    )  # must not hide files from the judge
    _git(repo, "add", ".gitattributes")
    _git(repo, "commit", "-qm", "attrs")
    dest = tmp_path / "tree"
    modes = extract_tree(repo, _git(repo, "rev-parse", "HEAD"), dest, 1 << 20)
    assert (dest / "a.py").read_text() == "x = 1\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert set(modes) == {"a.py", "run.sh", ".gitattributes"}
    assert not (dest / ".git").exists()


def test_symlinks_and_oversized_trees_are_rejected(repo, tmp_path):
    (repo / "link").symlink_to("/etc/passwd")
    _git(repo, "add", "link")
    _git(repo, "commit", "-qm", "link")
    with pytest.raises(Outcome) as caught:
        extract_tree(repo, _git(repo, "rev-parse", "HEAD"), tmp_path / "t1", 1 << 20)
    assert caught.value.verdict is Verdict.REJECT and caught.value.reason == "bad_tree"
    _git(repo, "rm", "-q", "link")
    (repo / "big.bin").write_bytes(os.urandom(3000))
    _git(repo, "add", "big.bin")
    _git(repo, "commit", "-qm", "big")
    with pytest.raises(Outcome, match="larger than"):
        extract_tree(repo, _git(repo, "rev-parse", "HEAD"), tmp_path / "t2", 2048)


def test_a_dotdot_entry_writes_nothing_outside_or_inside(repo, tmp_path):
    work = tmp_path / "work"
    (work / "baseline" / "engine").mkdir(parents=True)
    (work / "baseline" / "engine" / "model.py").write_text("SLOW = True\n")
    with pytest.raises(Outcome) as caught:
        extract_tree(repo, _escape_commit(repo), work / "tree", 1 << 20)
    assert caught.value.reason == "bad_tree" and "'..'" in caught.value.detail
    assert (work / "baseline" / "engine" / "model.py").read_text() == "SLOW = True\n"
    assert sorted(p.name for p in work.iterdir()) == ["baseline"]  # not even the tree folder


def _case(repo: Path, case: str) -> str:
    blob = _blob(repo, b"x = 1\n")
    sub = _tree(repo, [("100644", b"x.py", blob)])
    head = _git(repo, "rev-parse", "HEAD")
    entries = {
        "dot": [("40000", b".", sub)],
        "empty": [("100644", b"", blob)],
        "dotgit": [("40000", b".git", sub)],
        "dotgit_upper": [("40000", b".GIT", sub)],
        "dotgit_trailing": [("40000", b".git. ", sub)],
        "slash": [("100644", b"engine/model.py", blob)],
        "backslash": [("100644", b"..\\evil.py", blob)],
        "control": [("100644", b"a\nb.py", blob)],
        "not_utf8": [("100644", b"\xff.py", blob)],
        "too_long": [("100644", b"a" * 300, blob)],
        "case_twins": [("100644", b"Model.py", blob), ("100644", b"model.py", blob)],
        "duplicate": [("100644", b"a.py", blob), ("100644", b"a.py", blob)],
        "file_and_folder": [("100644", b"engine", blob), ("40000", b"engine", sub)],
        "gitlink": [("160000", b"sub", head)],
        "symlink": [("120000", b"link", _blob(repo, b"/etc/passwd"))],
        "group_writable_mode": [("100664", b"a.py", blob)],
        "tree_as_blob": [("100644", b"a.py", sub)],
    }[case]
    return _commit(repo, _tree(repo, entries))


@pytest.mark.parametrize(
    "case",
    [
        "dot",
        "empty",
        "dotgit",
        "dotgit_upper",
        "dotgit_trailing",
        "slash",
        "backslash",
        "control",
        "not_utf8",
        "too_long",
        "case_twins",
        "duplicate",
        "file_and_folder",
        "gitlink",
        "symlink",
        "group_writable_mode",
        "tree_as_blob",
    ],
)
def test_every_unsafe_entry_is_refused_before_anything_is_written(repo, tmp_path, case):
    dest = tmp_path / "tree"
    with pytest.raises(Outcome) as caught:
        extract_tree(repo, _case(repo, case), dest, 1 << 20)
    assert caught.value.verdict is Verdict.REJECT and caught.value.reason == "bad_tree"
    assert not dest.exists()


def test_deep_nesting_is_refused(repo, tmp_path):
    tree = _tree(repo, [("100644", b"x.py", _blob(repo, b""))])
    for _ in range(checkout.MAX_DEPTH + 2):
        tree = _tree(repo, [("40000", b"d", tree)])
    with pytest.raises(Outcome, match="deeper"):
        extract_tree(repo, _commit(repo, tree), tmp_path / "tree", 1 << 20)


def test_blob_sizes_are_checked_before_any_blob_is_read(repo, tmp_path, monkeypatch):
    big = _blob(repo, os.urandom(1 << 20))
    small = _blob(repo, b"x = 1\n")
    sha = _commit(repo, _tree(repo, [("100644", b"a.py", small), ("100644", b"big.bin", big)]))
    read: list[str] = []
    original = checkout._Objects.read

    def spy(self, sha, size, sink=None):
        read.append(sha)
        return original(self, sha, size, sink)

    monkeypatch.setattr(checkout._Objects, "read", spy)
    with pytest.raises(Outcome, match="larger than"):
        extract_tree(repo, sha, tmp_path / "tree", 1 << 19)
    assert big not in read and small not in read  # only the commit and the tree were read
    assert not (tmp_path / "tree").exists()


def _booby_trap(repo: Path, marker_dir: Path) -> list[Path]:
    """Config and hooks in ``repo`` that each create a marker file if git ever uses them."""
    markers = [marker_dir / f"pwned-{n}" for n in range(6)]
    hooks = repo / ".git" / "hooks"
    for name in ("reference-transaction", "post-checkout", "pre-auto-gc", "post-index-change"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {markers[0]}\n")
        (hooks / name).chmod(0o755)
    included = repo / ".git" / "included"
    included.write_text(f"[core]\n\tfsmonitor = touch {markers[1]}; echo\n")
    with open(repo / ".git" / "config", "a") as config:
        config.write(
            f"[core]\n\tfsmonitor = touch {markers[2]}; echo\n"
            f"\talternateRefsCommand = touch {markers[3]}; echo\n"
            f"\thooksPath = {hooks}\n"
            f"[include]\n\tpath = {included}\n"
            f"[uploadpack]\n\tpackObjectsHook = touch {markers[4]}; echo\n"
            f"[alias]\n\tlog-tree = !touch {markers[5]}\n"
        )
    return markers


def test_the_candidates_config_and_hooks_never_run(repo, tmp_path):
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("x = 2\n")
    _git(repo, "commit", "-qam", "two")
    markers = _booby_trap(repo, tmp_path)
    control = subprocess.run(["git", "status"], cwd=repo, capture_output=True, check=False)
    assert control.returncode == 0 and any(m.exists() for m in markers)  # the trap is live
    for marker in markers:
        marker.unlink(missing_ok=True)

    assert resolve_candidate(f"{repo}@HEAD~1").commit == first
    candidate = resolve_candidate(str(repo))
    stored = import_candidate(candidate, tmp_path / "store.git")
    extract_tree(repo, candidate.commit, tmp_path / "t1", 1 << 20)
    extract_tree(stored.repo, stored.commit, tmp_path / "t2", 1 << 20)
    assert (tmp_path / "t2" / "a.py").read_text() == "x = 2\n"
    assert [m for m in markers if m.exists()] == []


def _judge_cli(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "judge",
            "evaluate",
            "task=decode_cpu",
            f"judge.private_dir={tmp_path / 'private'}",
            *overrides,
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cli_evaluate_refuses_a_dotdot_tree_before_anything_runs(repo, tmp_path):
    _git(repo, "reset", "-q", "--soft", _escape_commit(repo))
    private = tmp_path / "private"
    (private / "baseline" / "engine").mkdir(parents=True)
    (private / "baseline" / "engine" / "model.py").write_text("SLOW = True\n")
    markers = _booby_trap(repo, tmp_path)
    done = _judge_cli(tmp_path, f"candidate={repo}")
    assert done.returncode == 2, done.stderr
    assert "malformed" in done.stderr and done.stdout == ""
    assert (private / "baseline" / "engine" / "model.py").read_text() == "SLOW = True\n"
    assert sorted(p.name for p in private.iterdir()) == ["baseline", "candidates.git"]
    assert git("for-each-ref", cwd=candidate_store(private)) == ""  # nothing was kept
    assert [m for m in markers if m.exists()] == []


def test_cli_evaluate_takes_a_git_revision_as_it_is(repo, tmp_path):
    markers = _booby_trap(repo, tmp_path)
    done = _judge_cli(tmp_path, f"candidate={repo}@HEAD~3")
    assert done.returncode == 2
    assert "ref 'HEAD~3' does not exist" in done.stderr  # reached git, not Hydra's lexer
    assert [m for m in markers if m.exists()] == []


def test_the_gateway_refuses_a_dotdot_tree_and_the_judge_a_symlink(tmp_path):
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    source, base = template_repo(template, tmp_path / "template.git")
    arm = prepare_arm(tmp_path / "run", "solo", source, base, [Seat("w1", "worker")])
    events = EventLog(tmp_path / "run" / "events.sqlite")
    queue = JudgeQueue(tmp_path / "judge" / "queue.sqlite")
    gateway = Gateway(events, queue, [arm])
    agent = arm.agents["w1"]

    def submit(sha: str, rid: str) -> dict:
        body = {"id": rid, "op": "submit", "commit": sha}
        (agent.outbox / f"{rid}.json").write_text(json.dumps(body))
        gateway.poll()
        return json.loads((agent.replies / f"{rid}.json").read_text())

    escape = _escape_commit(agent.repo)
    answer = submit(escape, "r1")
    assert answer["ok"] is False and "malformed" in answer["error"]
    assert events.table("submissions") == [] and queue.claim("cpu") is None

    link = _commit(agent.repo, _tree(agent.repo, [("120000", b"x", _blob(agent.repo, b"/"))]))
    assert submit(link, "r2")["ok"] is True  # fsck allows links: the judge refuses them
    job = queue.claim("cpu")
    assert job is not None and job.commit == link
    with pytest.raises(Outcome, match="symlink"):
        extract_tree(Path(job.repo), job.commit, tmp_path / "tree", 1 << 20)
