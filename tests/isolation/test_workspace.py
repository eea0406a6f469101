"""Arm workspaces on real git repositories: the contract's layout, an origin holding only the
starting commit, clones that share nothing, ownership, and stable template shas."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from isolation.gitutil import commit_all, git
from isolation.workspace import Seat, load_arm, prepare_arm, template_repo

SEATS = [Seat("w1", "worker", "projections"), Seat("w2", "worker", "moe"), Seat("c1", "critic")]


@pytest.fixture
def source(tmp_path) -> tuple[Path, str, str]:
    """A template repo with history the arm must not see: a later commit on master, a side
    branch and a tag. Returns (repo, start commit, a commit that must stay hidden)."""
    template = tmp_path / "template"
    (template / "engine").mkdir(parents=True)
    (template / "engine" / "model.py").write_text("SPEED = 1\n")
    (template / "engine" / "__pycache__").mkdir()
    (template / "engine" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"junk")
    repo, start = template_repo(template, tmp_path / "template.git")
    (repo / "engine" / "answer.py").write_text("HIDDEN = 'the reference solution'\n")
    hidden = commit_all(repo, "the answer")
    git("tag", "answer", hidden, cwd=repo)
    git("branch", "side", hidden, cwd=repo)
    return repo, start, hidden


def _objects(git_dir: Path) -> set[str]:
    out = git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)", cwd=git_dir)
    return set(out.split())


def test_template_repo_is_stable_and_skips_caches(tmp_path, source):
    _, start, _ = source
    again, sha = template_repo(tmp_path / "template", tmp_path / "again")
    assert sha == start
    files = git("ls-tree", "-r", "--name-only", start, cwd=again).split()
    assert files == ["engine/model.py"]
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=again) == "master"
    with pytest.raises(FileExistsError):
        template_repo(tmp_path / "template", again)


def test_layout_follows_the_contract(tmp_path, source):
    repo, start, _ = source
    arm = prepare_arm(tmp_path / "run", "swarm", repo, start, SEATS)
    root = tmp_path.resolve() / "run" / "arms" / "swarm"
    assert arm.root == root
    assert sorted(p.name for p in root.iterdir()) == [
        "agents",
        "arm.json",
        "board",
        "inboxes",
        "origin.git",
        "submissions.git",
    ]
    assert arm.board_file == root / "board" / "board.jsonl"
    assert arm.board_file.read_text() == ""
    assert git("for-each-ref", cwd=arm.submissions) == ""
    assert git("rev-parse", "--is-bare-repository", cwd=arm.submissions) == "true"
    assert sorted(arm.agents) == ["c1", "w1", "w2"]
    for seat in SEATS:
        ws = arm.agents[seat.name]
        assert (ws.role, ws.direction, ws.arm) == (seat.role, seat.direction, "swarm")
        assert sorted(p.name for p in ws.root.iterdir()) == ["notes", "outbox", "repo"]
        # The inbox is the runner's to write: never in the seat's folder (its own filesystem
        # under a quota, whose inodes the agent can use up).
        assert ws.inbox == root / "inboxes" / seat.name
        assert sorted(p.name for p in ws.inbox.iterdir()) == ["replies", "verdicts.jsonl"]
        assert list(ws.notes.iterdir()) == [] and list(ws.outbox.iterdir()) == []
    assert arm.agents["w1"].can_submit and not arm.agents["c1"].can_submit


def test_origin_and_clones_hold_only_the_starting_commit(tmp_path, source):
    repo, start, hidden = source
    arm = prepare_arm(tmp_path / "run", "swarm", repo, start, SEATS)
    assert git("for-each-ref", "--format=%(refname) %(objectname)", cwd=arm.origin) == (
        f"refs/heads/master {start}"
    )
    assert git("rev-list", "--all", cwd=arm.origin) == start
    reachable = set(git("rev-list", "--objects", "--all", cwd=arm.origin).split())
    assert _objects(arm.origin) <= reachable  # not one object of the hidden commit
    assert hidden not in _objects(arm.origin)
    for ws in arm.agents.values():
        assert git("rev-list", "--all", cwd=ws.repo) == start
        assert hidden not in _objects(ws.repo / ".git")
        assert git("tag", cwd=ws.repo) == ""
        assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=ws.repo) == "master"
        assert git("remote", cwd=ws.repo) == "origin"
        assert git("config", "user.name", cwd=ws.repo) == ws.name
        assert git("config", "user.email", cwd=ws.repo) == f"{ws.name}@swarm.swarmlab.invalid"
        assert git("status", "--porcelain", cwd=ws.repo) == ""


def test_clones_share_no_file_with_each_other_or_origin(tmp_path, source):
    repo, start, _ = source
    arm = prepare_arm(tmp_path / "run", "swarm", repo, start, SEATS)
    seen: dict[tuple[int, int], Path] = {}
    for git_dir in [arm.origin, *(ws.repo / ".git" for ws in arm.agents.values())]:
        for path in (git_dir / "objects").rglob("*"):
            if path.is_file():
                info = path.stat()
                assert info.st_nlink == 1, f"{path} is hard-linked"
                assert (info.st_dev, info.st_ino) not in seen
                seen[(info.st_dev, info.st_ino)] = path


def test_agent_folders_are_chowned_and_the_rest_stays_ours_and_readable(tmp_path, source):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    repo, start, _ = source
    old = os.umask(0o077)  # a strict umask must not make the runner's files unreadable
    try:
        arm = prepare_arm(tmp_path / "run", "swarm", repo, start, SEATS, uid=1000, gid=1001)
    finally:
        os.umask(old)
    for ws in arm.agents.values():
        for folder in (ws.repo, ws.notes, ws.outbox):
            for path in [folder, *folder.rglob("*")]:
                info = path.lstat()
                assert (info.st_uid, info.st_gid) == (1000, 1001), path
        for path in [ws.root, ws.inbox, *ws.inbox.rglob("*")]:
            info = path.lstat()
            assert info.st_uid == 0
            assert info.st_mode & stat.S_IROTH, path
            assert not info.st_mode & stat.S_IWOTH, path
    for path in [arm.root, arm.board_dir, arm.board_file, *arm.submissions.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == 0 and info.st_mode & stat.S_IROTH, path
        assert not info.st_mode & (stat.S_IWOTH | stat.S_IWGRP), path


def test_arms_never_share_a_path_and_load_arm_reads_them_back(tmp_path, source):
    repo, start, _ = source
    run = tmp_path / "run"
    swarm = prepare_arm(run, "swarm", repo, start, SEATS)
    solo = prepare_arm(run, "solo", repo, start, [Seat("w1", "worker")])
    assert not swarm.root.is_relative_to(solo.root) and not solo.root.is_relative_to(swarm.root)
    assert swarm.agents["w1"].repo != solo.agents["w1"].repo
    assert load_arm(run, "swarm") == swarm
    assert load_arm(run, "solo") == solo
    record = json.loads((solo.root / "arm.json").read_text())
    assert record["commit"] == start and record["seats"][0]["name"] == "w1"
    with pytest.raises(FileNotFoundError, match="no arm 'mixed'"):
        load_arm(run, "mixed")


@pytest.mark.parametrize(
    ("arm", "seats", "match"),
    [
        ("swarm", [], "no seats"),
        ("sw/arm", [Seat("w1", "worker")], "arm name"),
        ("swarm", [Seat("../w1", "worker")], "agent name"),
        ("swarm", [Seat("w1", "worker"), Seat("w1", "critic")], "duplicate"),
        ("swarm", [Seat("w1", "judge")], "role 'judge'"),
    ],
)
def test_bad_arms_are_refused(tmp_path, source, arm, seats, match):
    repo, start, _ = source
    with pytest.raises(ValueError, match=match):
        prepare_arm(tmp_path / "run", arm, repo, start, seats)


def test_an_arm_is_prepared_once_and_a_failed_preparation_leaves_nothing(tmp_path, source):
    repo, start, _ = source
    run = tmp_path / "run"
    prepare_arm(run, "swarm", repo, start, SEATS)
    with pytest.raises(ValueError, match="already exists"):
        prepare_arm(run, "swarm", repo, start, SEATS)
    with pytest.raises(ValueError, match="not in the repository"):
        prepare_arm(run, "solo", repo, "0" * 40, SEATS)
    assert not (run / "arms" / "solo").exists()
    prepare_arm(run, "solo", repo, start, SEATS)  # and can be retried
