"""``fetch_untrusted`` (issue 31): an agent's object files are copied before git runs, so no link,
named pipe or leased file of the agent's is ever opened by git; each is refused with its path,
at once. Real git; the files are made on the host as the agent would make them."""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import pytest

from isolation.gitutil import UntrustedRepoError, fetch_untrusted, git, template_repo


@pytest.fixture
def repos(tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    (template / "a.txt").write_text("a\n")
    clone, _ = template_repo(template, tmp_path / "clone")
    git("config", "user.name", "w1", cwd=clone)
    git("config", "user.email", "w1@x.invalid", cwd=clone)
    git("repack", "-q", "-a", "-d", cwd=clone)  # the start in a pack, as a clone has it
    (clone / "a.txt").write_text("b\n")
    git("commit", "-qam", "b", cwd=clone)
    head = git("rev-parse", "HEAD", cwd=clone)
    dest = tmp_path / "dest.git"
    git("init", "-q", "--bare", str(dest))
    return clone, head, dest


def loose(repo: Path, sha: str) -> Path:
    return repo / ".git" / "objects" / sha[:2] / sha[2:]


def test_a_plain_clone_is_copied_and_fetched(repos, tmp_path):
    clone, head, dest = repos
    fetch_untrusted(clone, head, dest, "refs/x", scratch=tmp_path)
    assert git("rev-parse", "refs/x", cwd=dest) == head
    assert git("show", f"{head}~1:a.txt", cwd=dest) == "a"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("swarmlab-")) == []


def test_a_fifo_as_the_commit_object_is_refused_at_once(repos):
    """Before, git's open() of the FIFO waited for a writer until the fetch timed out."""
    clone, head, dest = repos
    path = loose(clone, head)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(UntrustedRepoError, match="not a regular file"):
        fetch_untrusted(clone, head, dest, "refs/x", timeout=3600)
    assert git("for-each-ref", cwd=dest) == ""


@pytest.mark.parametrize("target", ["/etc/shadow", "/dev/zero", "/nonexistent"])
def test_links_in_object_slots_are_never_followed(repos, target):
    clone, head, dest = repos
    path = loose(clone, head)
    path.unlink()
    path.symlink_to(target)
    with pytest.raises(UntrustedRepoError, match="symbolic link"):
        fetch_untrusted(clone, head, dest, "refs/x")


def test_links_and_pipes_among_packs_are_refused(repos):
    clone, head, dest = repos
    (pack,) = (clone / ".git" / "objects" / "pack").glob("*.idx")
    pack.unlink()
    pack.symlink_to("/etc/passwd")
    with pytest.raises(UntrustedRepoError, match=r"pack/pack-.*\.idx is a symbolic link"):
        fetch_untrusted(clone, head, dest, "refs/x")
    pack.unlink()
    os.mkfifo(pack)
    with pytest.raises(UntrustedRepoError, match="not a regular file"):
        fetch_untrusted(clone, head, dest, "refs/x")


def test_an_object_folder_that_is_a_link_is_refused(repos, tmp_path):
    clone, head, dest = repos
    folder = loose(clone, head).parent
    moved = tmp_path / "moved"
    folder.rename(moved)
    folder.symlink_to(moved)
    with pytest.raises(UntrustedRepoError, match="must be a plain folder"):
        fetch_untrusted(clone, head, dest, "refs/x")


def test_a_leased_object_file_is_refused_without_waiting(repos):
    """Its owner may take a write lease on an object file; another open() then waits up to
    /proc/sys/fs/lease-break-time (45 s by default) for the lease to be given up."""
    clone, head, dest = repos
    previous = signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease break's signal
    fd = os.open(loose(clone, head), os.O_RDONLY)
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError as exc:
            pytest.skip(f"no leases here: {exc}")
        # A read lease conflicts with an open for writing only; the gateway opens for reading,
        # so take the lease an agent would need to stall a reader: a write lease, on a file
        # nobody else has open.
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        os.close(fd)
        fd = os.open(loose(clone, head), os.O_WRONLY)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        with pytest.raises(UntrustedRepoError, match="could not be opened without waiting"):
            fetch_untrusted(clone, head, dest, "refs/x")
    finally:
        os.close(fd)
        signal.signal(signal.SIGIO, previous)


def test_the_copy_is_bounded(repos):
    clone, head, dest = repos
    with pytest.raises(UntrustedRepoError, match="exceed 0 MiB"):
        fetch_untrusted(clone, head, dest, "refs/x", max_bytes=100)
