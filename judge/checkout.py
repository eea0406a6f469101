"""Turn a candidate (a commit of some repository) into a plain tree the sandbox can mount.

A candidate's repository is the adversary's. Git always reads a repository's own config
(``core.fsmonitor``, ``include.path``, ``extensions.*``, aliases, hooks: each can run a command
or redirect where objects come from), so the judge never runs git *in* it. Every read goes
through :func:`object_view`: a judge-made git directory with its own config and ``HEAD``, whose
object folders are links to the candidate's object folders (opened without following links,
as :func:`isolation.gitutil.fetch_commit` does; see that module for why), and, for resolving a
ref, plain copies of the candidate's ref files. ``evaluate`` then copies the commit into a
judge-owned repository with ``fetch_commit`` (every object checked by ``git fsck``, as the
gateway does) and queues that copy.

Blobs are written straight from the object store, so nothing in ``.gitattributes`` (filters,
export-ignore) hides files from the judge. Every entry of the tree is checked before anything
is written (:func:`validate_name`: no ``..``, ``.``, empty names, slashes, backslashes,
``.git``, control characters, names that differ only in case; no symlinks or gitlinks), and
every blob's size is read from the object store before any blob is read.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from isolation.gitutil import (
    SHA_RE,
    GitError,
    UntrustedRepoError,
    fetch_commit,
    git,
    git_env,
)
from isolation.gitutil import object_view as git_object_view  # objects only: no refs
from judge.verdict import Outcome, Verdict

# A tree any honest candidate of a task here stays far below; each bound keeps a crafted
# tree from costing the judge time or memory before it is refused.
MAX_ENTRIES = 20_000
MAX_DEPTH = 32
MAX_TREE_OBJECT_BYTES = 4 << 20
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255  # NAME_MAX: a longer name would fail at write time, as the judge's fault
MAX_REF_FILE_BYTES = 4096
MAX_PACKED_REFS_BYTES = 16 << 20
MAX_REF_FILES = 10_000
READ_TIMEOUT_S = 300.0

FILE_MODES = {"100644": 0o644, "100755": 0o755}
TREE_MODE = "40000"
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOFOLLOW_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_REF_NAME_RE = re.compile(r"^[A-Za-z0-9._+-]{1,200}$")
# Options for every git command the judge runs on a view: nothing of the host's or the
# candidate's configuration can reach it (the view's own config is the judge's).
SAFE_GIT = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "gc.auto=0",
    "-c",
    "protocol.allow=never",
)


class BadInput(Exception):
    """Input the judge refuses before anything is queued (one clear line, exit 2)."""


@dataclass(frozen=True)
class Candidate:
    """A resolved submission: a repository and a full commit sha."""

    repo: Path
    commit: str
    ref: str


def _bad_tree(detail: str) -> Outcome:
    return Outcome(Verdict.REJECT, "bad_tree", detail)


# -- reading a repository without letting git open it --------------------------------------


def _read_small(name: str, dir_fd: int, limit: int) -> bytes | None:
    """A regular file's bytes (no links followed), or None if absent, not regular, or larger
    than ``limit``."""
    try:
        fd = os.open(name, _NOFOLLOW_FILE, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
        return data if len(data) <= limit else None
    finally:
        os.close(fd)


def _copy_refs(src_fd: int, dest: Path, budget: list[int], depth: int = 0) -> None:
    """Copy loose ref files (regular files, plain names) from ``src_fd`` into ``dest``."""
    for name in sorted(os.listdir(src_fd)):
        if not _REF_NAME_RE.match(name) or name.endswith(".lock") or budget[0] <= 0:
            continue
        try:
            sub = os.open(name, _NOFOLLOW_DIR, dir_fd=src_fd)
        except OSError:
            data = _read_small(name, src_fd, MAX_REF_FILE_BYTES)
            if data is not None:
                budget[0] -= 1
                (dest / name).write_bytes(data)
            continue
        try:
            if depth < 8:
                (dest / name).mkdir(exist_ok=True)
                _copy_refs(sub, dest / name, budget, depth + 1)
        finally:
            os.close(sub)


@contextmanager
def object_view(repo: Path, *, refs: bool = False) -> Iterator[Path]:
    """A judge-made git directory that sees ``repo``'s objects (and, with ``refs``, copies of
    its ``HEAD``, loose refs and ``packed-refs``) and nothing else of it: not its config, hooks,
    alternates, grafts or any file outside its object folders.

    Raises:
        UntrustedRepoError: ``repo`` is missing or is not a plain repository layout.
    """
    with git_object_view(Path(repo)) as (view, git_fd):
        if refs:
            head = _read_small("HEAD", git_fd, MAX_REF_FILE_BYTES)
            if head is None:
                raise UntrustedRepoError("not a git repository (no plain HEAD file)")
            (view / "HEAD").write_bytes(head)
            packed = _read_small("packed-refs", git_fd, MAX_PACKED_REFS_BYTES)
            if packed is not None:
                (view / "packed-refs").write_bytes(packed)
            try:
                refs_fd = os.open("refs", _NOFOLLOW_DIR, dir_fd=git_fd)
            except OSError:
                pass  # no plain refs folder: HEAD and packed-refs only
            else:
                try:
                    _copy_refs(refs_fd, view / "refs", [MAX_REF_FILES])
                finally:
                    os.close(refs_fd)
        yield view


def _view_git(view: Path, *args: str) -> str:
    return git("--git-dir", str(view), *SAFE_GIT, *args, env=git_env(GIT_DIR=str(view)))


# -- resolving and importing a candidate -----------------------------------------------------


def resolve_candidate(candidate: str, repo: str | None = None) -> Candidate:
    """Resolve ``PATH`` (its HEAD), ``PATH@REF``, or ``REF`` inside ``repo`` to a commit.

    The repository is read through :func:`object_view`: its config and hooks are never used.

    Raises:
        BadInput: the path is missing or not a repository, or the ref does not exist.
    """
    if not candidate:
        raise BadInput(
            "no candidate given: candidate=PATH, candidate=PATH@REF or candidate=REF repo=PATH"
        )
    path_part, _, ref = candidate.rpartition("@") if "@" in candidate else (candidate, "", "")
    if ref and path_part and Path(path_part).is_dir():
        path, ref = Path(path_part), ref
    elif Path(candidate).is_dir():
        path, ref = Path(candidate), "HEAD"
    elif repo is not None:
        path, ref = Path(repo), candidate
    elif "/" in candidate or candidate.startswith("."):
        raise BadInput(f"candidate path {candidate} does not exist")
    else:
        raise BadInput(
            f"candidate {candidate!r} is neither a directory nor PATH@REF;"
            " name the repository with repo=PATH"
        )
    if not path.exists():
        raise BadInput(f"candidate path {path} does not exist")
    if ref.startswith("-") or any(c in ref for c in "\0\n\r"):
        raise BadInput(f"ref {ref!r} does not exist in {path}")
    try:
        with object_view(path.resolve(), refs=True) as view:
            commit = _view_git(view, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except UntrustedRepoError as exc:
        raise BadInput(f"{path} is not a git repository the judge reads: {exc}") from None
    except GitError:
        raise BadInput(f"ref {ref!r} does not exist in {path}") from None
    if not SHA_RE.match(commit):
        raise BadInput(f"ref {ref!r} does not exist in {path}")
    return Candidate(repo=path.resolve(), commit=commit, ref=ref)


def candidate_store(private_dir: str | Path) -> Path:
    """The judge-owned repository ``evaluate`` copies candidates into (in the judge's private
    folder, which no container sees)."""
    base = Path(private_dir)
    return (base if base.is_absolute() else Path.cwd() / base) / "candidates.git"


def import_candidate(candidate: Candidate, store: Path) -> Candidate:
    """Copy the candidate's commit (and all it reaches) into the judge-owned bare repository
    ``store`` (made if missing), every object checked by ``git fsck`` on the way, as the
    gateway does; the returned candidate names ``store``, which is what the judge reads.

    Raises:
        BadInput: the commit or an object it reaches is missing or malformed (``..`` or
            ``.git`` entries, bad modes, duplicate names: whatever ``fsck`` refuses).
    """
    if not (store / "objects").is_dir():
        store.mkdir(parents=True, exist_ok=True)
        git("init", "-q", "--bare", str(store))
    try:
        fetch_commit(candidate.repo, candidate.commit, store, f"refs/candidates/{candidate.commit}")
    except UntrustedRepoError as exc:
        raise BadInput(f"candidate {candidate.repo}@{candidate.ref}: {exc}") from None
    return Candidate(repo=store, commit=candidate.commit, ref=candidate.ref)


# -- reading objects -------------------------------------------------------------------------


class _Objects:
    """One ``git cat-file --batch-command`` on a view: an object's type and size are read
    before its content, so nothing is read whole before it is known to be small enough."""

    def __init__(self, view: Path) -> None:
        self._proc = subprocess.Popen(
            ["git", "--git-dir", str(view), *SAFE_GIT, "cat-file", "--batch-command"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=git_env(GIT_DIR=str(view)),
        )
        self._timer = threading.Timer(READ_TIMEOUT_S, self._proc.kill)
        self._timer.start()

    def close(self) -> None:
        self._timer.cancel()
        with suppress(OSError):
            self._proc.stdin.close()  # type: ignore[union-attr]
        self._proc.kill()
        self._proc.wait()

    def _header(self, command: str, sha: str) -> tuple[str, int]:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(f"{command} {sha}\n".encode())
            stdin.flush()
        except OSError:
            raise GitError(f"git cat-file stopped before {sha}") from None
        line = stdout.readline(256).decode("ascii", "replace").split()
        if len(line) != 3 or line[0] != sha or not line[2].isdigit():
            raise GitError(f"object {sha} is missing or unreadable: {' '.join(line)[:80]}")
        return line[1], int(line[2])

    def info(self, sha: str) -> tuple[str, int]:
        """(type, size) of an object."""
        return self._header("info", sha)

    def read(self, sha: str, size: int, sink=None) -> bytes:
        """The content of an object known to be ``size`` bytes (streamed into ``sink``, a
        binary file, when given)."""
        _, got = self._header("contents", sha)
        if got != size:
            raise GitError(f"object {sha} changed size")
        stdout = self._proc.stdout
        assert stdout is not None
        chunks, left = [], size
        while left:
            chunk = stdout.read(min(left, 1 << 20))
            if not chunk:
                raise GitError(f"git cat-file stopped inside {sha}")
            left -= len(chunk)
            if sink is not None:
                sink.write(chunk)
            else:
                chunks.append(chunk)
        stdout.read(1)  # the newline after each object
        return b"".join(chunks)


def validate_name(raw: bytes) -> str:
    """One path component of a tree entry as the judge will write it.

    Raises:
        Outcome: REJECT ``bad_tree`` for an empty name, ``.``, ``..``, a slash or backslash,
            a control character, a name that is not UTF-8 or too long, or ``.git`` (in any case,
            with trailing dots or spaces).
    """
    shown = raw.decode("utf-8", "backslashreplace")[:80]
    if not raw or raw in (b".", b".."):
        raise _bad_tree(f"tree entry {shown!r} (empty, '.' and '..' are not file names)")
    if b"/" in raw or b"\\" in raw or b"\0" in raw:
        raise _bad_tree(f"tree entry {shown!r} (slashes and backslashes are not allowed)")
    if len(raw) > MAX_NAME_BYTES:
        raise _bad_tree(f"tree entry {shown!r} (longer than {MAX_NAME_BYTES} bytes)")
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad_tree(f"tree entry {shown!r} (file names must be UTF-8)") from None
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise _bad_tree(f"tree entry {shown!r} (control characters are not allowed)")
    if name.casefold().rstrip(". ") == ".git":
        raise _bad_tree(f"tree entry {shown!r} (.git is not allowed)")
    return name


def _parse_tree(data: bytes) -> Iterator[tuple[str, bytes, str]]:
    """(mode, raw name, sha) of each entry of a raw tree object."""
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        nul = data.find(b"\0", space + 1) if space >= 0 else -1
        if space < 0 or nul < 0 or nul + 21 > len(data):
            raise _bad_tree("a tree object is malformed")
        mode = data[pos:space].decode("ascii", "replace")
        yield mode, data[space + 1 : nul], data[nul + 1 : nul + 21].hex()
        pos = nul + 21


@dataclass(frozen=True)
class _Entry:
    path: str
    mode: str
    sha: str
    size: int


def _root_tree(objects: _Objects, commit: str) -> str:
    """The id of ``commit``'s root tree, from the commit object's first line."""
    kind, size = objects.info(commit)
    if kind != "commit" or size > MAX_TREE_OBJECT_BYTES:
        raise _bad_tree(f"{commit} is a {kind}, not a commit")
    header = objects.read(commit, size).split(b"\n", 1)[0]
    if not header.startswith(b"tree ") or not SHA_RE.match(header[5:].decode("ascii", "replace")):
        raise _bad_tree("the commit object is malformed")
    return header[5:].decode()


def _walk(objects: _Objects, commit: str, max_bytes: int) -> tuple[list[str], list[_Entry]]:
    """Every folder and file of ``commit``'s tree, all checked; nothing is written."""
    folders: list[str] = []
    files: list[_Entry] = []
    total = 0
    stack = [("", _root_tree(objects, commit), 0)]
    while stack:
        prefix, tree_sha, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _bad_tree(f"folders nested deeper than {MAX_DEPTH}")
        kind, size = objects.info(tree_sha)
        if kind != "tree":
            raise _bad_tree(f"{prefix or 'the root'} is a {kind}, not a tree")
        if size > MAX_TREE_OBJECT_BYTES:
            raise _bad_tree(f"the tree object of {prefix or 'the root'} is too large")
        seen: set[str] = set()
        for mode, raw, sha in _parse_tree(objects.read(tree_sha, size)):
            name = validate_name(raw)
            path = f"{prefix}{name}"
            folded = unicodedata.normalize("NFC", name).casefold()
            if folded in seen:
                raise _bad_tree(f"{path}: two entries of one folder differ only in case")
            seen.add(folded)
            if len(path.encode()) > MAX_PATH_BYTES:
                raise _bad_tree(f"a path longer than {MAX_PATH_BYTES} bytes: {path[:80]}...")
            if len(folders) + len(files) >= MAX_ENTRIES:
                raise _bad_tree(f"more than {MAX_ENTRIES} files and folders")
            if mode == "120000":
                raise _bad_tree(f"symlink {path} (symlinks are not allowed)")
            if mode == "160000":
                raise _bad_tree(f"submodule {path} (submodules are not allowed)")
            if mode == TREE_MODE:
                folders.append(path)
                stack.append((path + "/", sha, depth + 1))
                continue
            if mode not in FILE_MODES:
                raise _bad_tree(f"{path} has mode {mode} (only files and folders are allowed)")
            kind, size = objects.info(sha)
            if kind != "blob":
                raise _bad_tree(f"{path} is a {kind}, not a file")
            total += size
            if total > max_bytes:
                raise _bad_tree(f"tree larger than {max_bytes >> 20} MiB")
            files.append(_Entry(path, mode, sha, size))
    return folders, files


def commit_tree(repo: Path, commit: str) -> str:
    """The git tree id of ``commit`` in ``repo``: the very tree :func:`extract_tree` writes
    (read the same way, through :func:`object_view`). It names the files, their modes and
    contents, and nothing of the commit's author, date or message.

    Raises:
        Outcome: REJECT ``bad_tree`` when ``commit`` is not a well-formed commit.
        GitError: an object is missing or ``repo`` is not a plain repository.
    """
    try:
        with object_view(Path(repo)) as view:
            objects = _Objects(view)
            try:
                return _root_tree(objects, commit)
            finally:
                objects.close()
    except UntrustedRepoError as exc:
        raise GitError(f"{repo}: {exc}") from None


def own_copy(repo: Path, commit: str, store: Path, owned: Path) -> tuple[Path, str]:
    """The judge's own copy of a queued commit, and its tree id read from that copy.

    A repository inside ``owned`` (the judge's private folder: its mutants, ``store`` itself)
    is already the judge's and is read where it is. Any other (an arm's submissions, a
    path given by hand) is copied into ``store`` with :func:`import_candidate`'s
    ``fetch_commit`` first, every object it receives checked by ``git fsck``, which computes
    each object's id from its content: the tree id read there names exactly the files the
    judge evaluates, whatever the source repository's files claim. Nothing a submitter
    controls (commit, author, message, refs, the source's object files) can make two
    different trees share an id, short of a SHA-1 collision, which git's collision-detecting
    SHA-1 refuses.

    Returns:
        (the repository the judge reads, the tree id).

    Raises:
        UntrustedRepoError: the commit could not be copied: it, or an object it reaches, is
            missing or malformed in ``repo`` (a forged object among them); the message names
            no host path.
        GitError: the judge's own store failed, or an object is missing from it.
        Outcome: REJECT ``bad_tree``: in a judge-owned repository, ``commit`` is no commit.
    """
    repo, owned = Path(repo).resolve(), Path(owned).resolve()
    if not repo.is_relative_to(owned):
        if not (store / "refs" / "candidates" / commit).is_file():  # else copied before
            if not (store / "objects").is_dir():
                store.mkdir(parents=True, exist_ok=True)
                git("init", "-q", "--bare", str(store))
            fetch_commit(repo, commit, store, f"refs/candidates/{commit}")
        repo = store.resolve()
    return repo, commit_tree(repo, commit)


def extract_tree(repo: Path, commit: str, dest: Path, max_bytes: int) -> dict[str, str]:
    """Write ``commit``'s files under ``dest`` (missing or empty); returns {path: mode}.

    Every entry is checked and every blob's size read before anything is written; ``repo``'s
    config and hooks are never used (it is read through :func:`object_view`).

    Raises:
        Outcome: REJECT ``bad_tree`` for a path that is not a plain relative file name
            (:func:`validate_name`), names differing only in case, symlinks, submodules,
            other modes, or a tree over ``max_bytes`` or the bounds above.
        GitError: an object is missing (the judge's copy is broken: never the candidate's).
    """
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty")
    try:
        with object_view(Path(repo)) as view:
            objects = _Objects(view)
            try:
                return _write(objects, commit, dest, max_bytes)
            finally:
                objects.close()
    except UntrustedRepoError as exc:
        raise GitError(f"{repo}: {exc}") from None


def _write(objects: _Objects, commit: str, dest: Path, max_bytes: int) -> dict[str, str]:
    folders, files = _walk(objects, commit, max_bytes)
    dest.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(dest)
    for folder in sorted(folders):  # parents sort before their children
        os.mkdir(os.path.join(root, folder), 0o755)
    modes: dict[str, str] = {}
    for entry in files:
        target = os.path.join(root, entry.path)
        # Belt and braces: checked names cannot leave dest, and nothing in it is a link.
        if os.path.commonpath([root, os.path.realpath(target)]) != root:
            raise _bad_tree(f"{entry.path} is outside the tree")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as sink:
            objects.read(entry.sha, entry.size, sink)
            os.fchmod(sink.fileno(), FILE_MODES[entry.mode])
        modes[entry.path] = entry.mode
    for folder in [root, *(os.path.join(root, f) for f in folders)]:
        os.chmod(folder, 0o755)
    return modes
