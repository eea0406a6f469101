"""Git helpers shared by the judge and the workspaces, and the one way the project copies a
commit out of a repository it does not trust (an agent's clone).

Every git command here runs with :func:`git_env`: no system or global config, no ``GIT_*``
variable inherited from the caller, no prompts, no lazy fetching. Only the repositories the
project made itself are ever operated on by git; an agent's repository is only *read from*,
through :func:`fetch_commit`, which lets git see nothing of it but its object files.

Why not simply ``git fetch <agent repo> SHA`` (what was tried on git 2.39, as root, with the
agent's repo owned by another uid):

- A fetch from a local path starts ``git-upload-pack`` inside the source repository, which
  reads that repository's config. ``-c`` options and ``GIT_CONFIG_COUNT``/``PARAMETERS`` given
  to ``git fetch`` do *not* reach it (git clears them for the local transport), so the only
  way to configure it is the ``--upload-pack`` command line itself.
- ``uploadpack.packObjectsHook`` in the repository's own config is ignored by design, and
  upload-pack runs no hooks and does not read the index (so ``core.fsmonitor`` stays unused):
  no command of the agent's was run in our tests.
- But git follows whatever the agent's ``.git`` says about where data lives: a ``.git`` *file*
  (``gitdir: /any/host/path``), a symlinked ``.git`` or ``objects``, ``commondir``, and
  ``objects/info/alternates`` each made a fetch serve objects of another repository on the host
  (demonstrated: a commit of an unrelated repository was "submitted" that way). Checking for
  them first leaves a race (the agent runs concurrently), and ``include.path`` or
  ``extensions.*`` in its config are more surface still.

So :func:`fetch_commit` never lets git open the agent's git directory. It opens the agent's
``.git`` and ``objects`` folders itself (``O_NOFOLLOW``: no links), then each loose-object
folder (``00``..``ff``) and ``pack``, and builds a *shadow* repository of its own in a
temporary folder: our ``HEAD``, our ``config`` (``uploadpack.allowAnySHA1InWant``), no refs, and
an ``objects`` folder whose ``info/`` is ours and empty (so no alternates, no commit-graph,
no grafts) and whose ``00``..``ff`` and ``pack`` entries are links to ``/proc/<pid>/fd/<n>``,
the very folders already opened (renaming or swapping them afterwards changes nothing). The
receiving repository checks every object it gets (``fetch.fsckObjects``) and the connectivity
of the commit. That view still lets git open the object *files* in the source's folders,
which is fine for a repository of ours (the judge reads ``submissions.git`` through it) but not
for one the agent controls: a loose object or pack may be a symbolic link (root's git follows
it), a named pipe (git's ``open()`` blocks until the fetch times out: demonstrated, 120 s of a
runner that serves every seat from one loop), or a file holding a lease (``F_SETLEASE``, which
its owner may take: an ``open()`` blocks up to ``/proc/sys/fs/lease-break-time``).

So :func:`fetch_untrusted`, the gateway's way, goes one step further: it *copies* every loose
object (``xx/<38 hex>``) and every pack (``pack-<40 hex>.pack``, ``.idx``, ``.rev``) of the
source into a view of its own, opening each with ``O_NOFOLLOW | O_NONBLOCK`` (a link fails, a
lease fails instead of blocking, a pipe opens without a writer) and copying only what
``fstat`` of that very descriptor says is a regular file (no race: the check and the read are
on one open file). Anything else under an object name is refused with its path; other names
(git's temporary files, ``info/``, ``multi-pack-index``, bitmaps) are not copied. Git then
opens nothing of the agent's at all. The copy is bounded (:data:`MAX_UNTRUSTED_BYTES`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

# Commits the project makes itself (task templates, mutants) get this date, so their shas are
# the same on every machine and every run.
FIXED_DATE = "2026-01-01T00:00:00Z"
DEFAULT_AUTHOR = ("swarmlab", "swarmlab@swarmlab.invalid")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_OBJECT_DIR_RE = re.compile(r"^[0-9a-f]{2}$")
_LOOSE_RE = re.compile(r"^[0-9a-f]{38}$")
_PACK_RE = re.compile(r"^pack-[0-9a-f]{40}\.(pack|idx|rev)$")
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file of an untrusted repository: no link followed, no blocking open (pipe, lease), no tty.
_UNTRUSTED_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# The most :func:`fetch_untrusted` copies out of one repository (its object files together).
MAX_UNTRUSTED_BYTES = 4 * 1024**3
_CHUNK = 1024 * 1024


class GitError(RuntimeError):
    """A git command the project ran on its own repositories failed."""


class UntrustedRepoError(ValueError):
    """A commit could not be taken from an untrusted repository. The message is safe to show
    the repository's owner (it names no host path)."""


def git_env(**extra: str) -> dict[str, str]:
    """The environment for every git command: the caller's, minus all ``GIT_*`` variables,
    with no system or global config (the host's ``~/.gitconfig`` must not change a sha or run
    anything), no terminal prompts and no lazy fetching from promisor remotes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_NO_LAZY_FETCH="1",
        LC_ALL="C",
    )
    env.update(extra)
    return env


def git(
    *args: str,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> str:
    """Run ``git ARGS`` and return its stdout (stripped).

    Raises:
        GitError: git exited non-zero or ran past ``timeout``; the message holds its stderr.
    """
    argv = ["git", *args]
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env if env is not None else git_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"{' '.join(argv[:4])} ... ran past {timeout:.0f} s") from None
    if done.returncode != 0:
        raise GitError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()


def commit_all(worktree: Path, message: str, author: tuple[str, str] = DEFAULT_AUTHOR) -> str:
    """Commit everything in ``worktree`` with a fixed author, committer and date (stable
    shas); no hooks run. Returns the new commit's sha."""
    name, email = author
    env = git_env(
        GIT_AUTHOR_NAME=name,
        GIT_AUTHOR_EMAIL=email,
        GIT_COMMITTER_NAME=name,
        GIT_COMMITTER_EMAIL=email,
        GIT_AUTHOR_DATE=FIXED_DATE,
        GIT_COMMITTER_DATE=FIXED_DATE,
    )
    git("add", "-A", cwd=worktree, env=env)
    git(
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "--allow-empty",
        "--no-verify",
        "-m",
        message,
        cwd=worktree,
        env=env,
    )
    return git("rev-parse", "HEAD", cwd=worktree, env=env)


def template_repo(
    template_dir: Path,
    dest: Path,
    *,
    author: tuple[str, str] = DEFAULT_AUTHOR,
    message: str = "task template",
) -> tuple[Path, str]:
    """Copy a task's template folder to ``dest`` (without ``__pycache__``/``*.pyc``) and make
    it a repository with one commit on ``master``, with a fixed author and date, so the sha is
    the same wherever and whenever it is made.

    Returns:
        (dest, the commit's sha).

    Raises:
        FileExistsError: ``dest`` exists and is not an empty folder.
    """
    template_dir, dest = Path(template_dir), Path(dest)
    if not template_dir.is_dir():
        raise FileNotFoundError(f"task template {template_dir} is not a folder")
    if dest.exists():
        if not dest.is_dir() or any(dest.iterdir()):
            raise FileExistsError(f"{dest} exists: template_repo makes a new repository")
        dest.rmdir()
    shutil.copytree(template_dir, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git("init", "-q", "--initial-branch=master", str(dest))
    return dest, commit_all(dest, message, author)


def git_dir_fd(repo: Path, stack: list[int]) -> int:
    """An fd of the repository's git directory: ``repo/.git`` when present (a worktree),
    else ``repo`` itself (a bare repository). Every fd opened is appended to ``stack`` (the
    caller closes them); links and gitfiles are never followed.

    Raises:
        UntrustedRepoError: the repository is missing, a link, or its ``.git`` is not a plain
            folder.
    """
    try:
        top = os.open(str(repo), _NOFOLLOW_DIR)
    except FileNotFoundError:
        raise UntrustedRepoError("the repository does not exist") from None
    except OSError:
        raise UntrustedRepoError("the repository must be a plain folder (not a link)") from None
    stack.append(top)
    try:
        os.stat(".git", dir_fd=top, follow_symlinks=False)
    except FileNotFoundError:
        return top
    try:
        fd = os.open(".git", _NOFOLLOW_DIR, dir_fd=top)
    except OSError:
        raise UntrustedRepoError(
            ".git must be a plain folder (not a link, and not a gitfile)"
        ) from None
    stack.append(fd)
    return fd


def fetch_commit(
    source: Path, commit: str, dest: Path, ref: str, *, timeout: float = 120.0
) -> None:
    """Copy ``commit`` and everything it reaches from the repository at ``source`` into the
    bare repository ``dest`` under ``ref``, letting git read nothing of ``source`` but its
    object files (see the module docstring for why). Safe on a repository someone else
    controls; works the same on one we made.

    Raises:
        UntrustedRepoError: ``commit`` is not a full sha, is not a commit in ``source``, or
            ``source``'s layout is not a plain repository (links, gitfiles). The message is
            meant for the repository's owner.
        GitError: ``dest`` itself failed (our problem, not the source's).
    """
    if not SHA_RE.match(commit):
        raise UntrustedRepoError(f"{commit!r} is not a full commit sha (40 hex digits)")
    with object_view(Path(source), "[uploadpack]\n\tallowAnySHA1InWant = true\n") as (shadow, _):
        _fetch(shadow, commit, Path(dest), ref, timeout)


@contextmanager
def object_view(source: Path, config: str = "") -> Iterator[tuple[Path, int]]:
    """A git directory of our own that sees ``source``'s objects and nothing else of it: not
    its config, hooks, alternates, grafts, refs or any file outside its object folders. Yields
    (that directory, an fd of ``source``'s git directory for reading more of it by hand);
    ``config`` is appended to the view's own config. Every fd is closed at the end.

    Raises:
        UntrustedRepoError: ``source``'s layout is not a plain repository (links, gitfiles, no
            objects folder).
    """
    fds: list[int] = []
    try:
        git_fd = git_dir_fd(source, fds)
        try:
            objects_fd = os.open("objects", _NOFOLLOW_DIR, dir_fd=git_fd)
        except OSError:
            raise UntrustedRepoError(".git/objects must be a plain folder (not a link)") from None
        fds.append(objects_fd)
        pid = os.getpid()
        with tempfile.TemporaryDirectory(prefix="swarmlab-view-") as tmp:
            view = Path(tmp) / "view.git"
            (view / "refs" / "heads").mkdir(parents=True)
            (view / "objects" / "info").mkdir(parents=True)
            (view / "HEAD").write_text("ref: refs/heads/master\n")
            (view / "config").write_text(
                "[core]\n\trepositoryformatversion = 0\n\tbare = true\n" + config
            )
            for name in sorted(os.listdir(objects_fd)):
                if name != "pack" and not _OBJECT_DIR_RE.match(name):
                    continue  # info/ (alternates, commit-graph, grafts) and anything else
                try:
                    fd = os.open(name, _NOFOLLOW_DIR, dir_fd=objects_fd)
                except OSError:
                    continue  # a link or a file where a folder belongs: not followed
                fds.append(fd)
                os.symlink(f"/proc/{pid}/fd/{fd}", view / "objects" / name)
            yield view, git_fd
    finally:
        for fd in reversed(fds):
            with suppress(OSError):
                os.close(fd)


def fetch_untrusted(
    source: Path,
    commit: str,
    dest: Path,
    ref: str,
    *,
    timeout: float = 120.0,
    scratch: Path | None = None,
    max_bytes: int = MAX_UNTRUSTED_BYTES,
) -> None:
    """:func:`fetch_commit` for a repository someone else controls while we read it (an
    agent's clone): its object files are first copied, each checked to be a regular file on
    the descriptor it is read from, so git opens nothing of it (no link followed, nothing that
    blocks). ``scratch``: the folder the copy is made in (default: the system's temporary
    folder); it is deleted at the end.

    Raises:
        UntrustedRepoError: as :func:`fetch_commit`, and: an object path that is not a regular
            file (a link, a pipe, a folder, ...) or cannot be opened without blocking, or more
            than ``max_bytes`` of objects.
        GitError: ``dest`` itself failed.
    """
    if not SHA_RE.match(commit):
        raise UntrustedRepoError(f"{commit!r} is not a full commit sha (40 hex digits)")
    fds: list[int] = []
    try:
        git_fd = git_dir_fd(Path(source), fds)
        try:
            objects_fd = os.open("objects", _NOFOLLOW_DIR, dir_fd=git_fd)
        except OSError:
            raise UntrustedRepoError(".git/objects must be a plain folder (not a link)") from None
        fds.append(objects_fd)
        with tempfile.TemporaryDirectory(prefix="swarmlab-copy-", dir=scratch) as tmp:
            view = Path(tmp) / "view.git"
            _view_skeleton(view, "[uploadpack]\n\tallowAnySHA1InWant = true\n")
            _copy_objects(objects_fd, view / "objects", max_bytes)
            _fetch(view, commit, Path(dest), ref, timeout)
    finally:
        for fd in reversed(fds):
            with suppress(OSError):
                os.close(fd)


def _view_skeleton(view: Path, config: str) -> None:
    (view / "refs" / "heads").mkdir(parents=True)
    (view / "objects" / "info").mkdir(parents=True)
    (view / "HEAD").write_text("ref: refs/heads/master\n")
    (view / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n" + config)


def _copy_objects(objects_fd: int, into: Path, max_bytes: int) -> None:
    """Copy the loose objects and packs under ``objects_fd`` into ``into`` (see
    :func:`fetch_untrusted`)."""
    budget = [max_bytes, max_bytes]  # left, limit
    for name in sorted(os.listdir(objects_fd)):
        if name == "pack":
            pattern = _PACK_RE
        elif _OBJECT_DIR_RE.match(name):
            pattern = _LOOSE_RE
        else:
            continue  # info/ (alternates, commit-graph, grafts) and anything else: never read
        try:
            folder = os.open(name, _NOFOLLOW_DIR, dir_fd=objects_fd)
        except OSError:
            raise UntrustedRepoError(
                f".git/objects/{name} must be a plain folder (not a link or a file)"
            ) from None
        try:
            target = into / name
            target.mkdir(exist_ok=True)
            for entry in sorted(os.listdir(folder)):
                if pattern.match(entry):
                    _copy_file(folder, entry, target / entry, f"{name}/{entry}", budget)
        finally:
            os.close(folder)


def _copy_file(folder: int, name: str, dest: Path, label: str, budget: list[int]) -> None:
    where = f".git/objects/{label}"
    try:
        fd = os.open(name, _UNTRUSTED_FILE, dir_fd=folder)
    except FileNotFoundError:
        return  # gone since it was listed (git's own gc): as if never there
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedRepoError(f"{where} is a symbolic link: objects must be files") from None
        raise UntrustedRepoError(
            f"{where} could not be opened without waiting ({errno.errorcode.get(exc.errno)})"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedRepoError(
                f"{where} is not a regular file (a pipe, folder or device): objects must be files"
            )
        with open(dest, "xb") as out:
            while chunk := os.read(fd, _CHUNK):
                budget[0] -= len(chunk)
                if budget[0] < 0:
                    raise UntrustedRepoError(
                        f"the repository's objects exceed {budget[1] // 1024**2} MiB"
                        " (git gc --prune=now drops the unreachable ones)"
                    )
                out.write(chunk)
    finally:
        os.close(fd)


def _fetch(shadow: Path, commit: str, dest: Path, ref: str, timeout: float) -> None:
    argv = [
        "-c",
        "fetch.fsckObjects=true",
        "-c",
        "transfer.fsckObjects=true",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "gc.auto=0",
        "-c",
        "protocol.file.allow=always",
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        "--upload-pack=git upload-pack",
        str(shadow),
        f"+{commit}:{ref}",
    ]
    try:
        git(*argv, cwd=dest, timeout=timeout)
    except GitError as exc:
        text = str(exc)
        if "not our ref" in text or "no such" in text.lower() or "unadvertised" in text:
            raise UntrustedRepoError(f"commit {commit} is not in the repository") from None
        if "fsck" in text or "bad object" in text or "did not send all" in text:
            raise UntrustedRepoError(
                f"commit {commit} or an object it reaches is missing or malformed"
            ) from None
        raise UntrustedRepoError(f"commit {commit} could not be read from the repository") from (
            exc
        )
    kind = git("cat-file", "-t", commit, cwd=dest)
    if kind != "commit":
        git("update-ref", "-d", ref, cwd=dest)
        raise UntrustedRepoError(f"{commit} is a {kind}, not a commit")
