"""Resolving candidates and extracting their trees from real git repositories."""

from __future__ import annotations

import os
import subprocess

import pytest

from judge.checkout import BadInput, extract_tree, resolve_candidate
from judge.verdict import Outcome, Verdict


def _git(cwd, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


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


def test_path_ref_and_head_resolve_to_full_shas(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert resolve_candidate(str(repo)).commit == head
    assert resolve_candidate(f"{repo}@master").commit == head
    assert resolve_candidate("master", repo=str(repo)).commit == head


@pytest.mark.parametrize(
    ("candidate", "repo_arg", "message"),
    [
        ("{tmp}/nowhere", None, "does not exist"),
        ("{tmp}/plain", None, "is not a git repository"),
        ("{repo}@no-such-branch", None, "does not exist in"),
        ("no-such-branch", "{repo}", "does not exist in"),
        ("", None, "no candidate given"),
    ],
)
def test_bad_input_is_one_clear_error(repo, tmp_path, candidate, repo_arg, message):
    (tmp_path / "plain").mkdir()
    fill = {"tmp": tmp_path, "repo": repo}
    with pytest.raises(BadInput, match=message):
        resolve_candidate(candidate.format(**fill), repo_arg.format(**fill) if repo_arg else None)


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
