"""Turn a candidate (a commit of some repository) into a plain tree the sandbox can mount.

Blobs are written straight from git's object store, so nothing in the candidate's
``.gitattributes`` (filters, export-ignore) or hooks runs or hides files from the judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from judge.verdict import Outcome, Verdict


class BadInput(Exception):
    """Input the judge refuses before anything is queued (one clear line, exit 2)."""


@dataclass(frozen=True)
class Candidate:
    """A resolved submission: a repository and a full commit sha."""

    repo: Path
    commit: str
    ref: str


def _open_repo(path: Path) -> git.Repo:
    if not path.exists():
        raise BadInput(f"candidate path {path} does not exist")
    try:
        return git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BadInput(f"{path} is not a git repository") from None


def resolve_candidate(candidate: str, repo: str | None = None) -> Candidate:
    """Resolve ``PATH`` (its HEAD), ``PATH@REF``, or ``REF`` inside ``repo`` to a commit.

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
    repository = _open_repo(path.resolve())
    try:
        commit = repository.commit(ref).hexsha
    except (git.BadName, ValueError, git.GitCommandError):
        raise BadInput(f"ref {ref!r} does not exist in {path}") from None
    return Candidate(repo=path.resolve(), commit=commit, ref=ref)


def extract_tree(repo: Path, commit: str, dest: Path, max_bytes: int) -> dict[str, str]:
    """Write ``commit``'s files under ``dest``; returns {path: mode}.

    Raises:
        Outcome: REJECT ``bad_tree`` for symlinks, submodules or an oversized tree.
    """
    repository = git.Repo(repo)
    entries = []
    for line in repository.git.ls_tree("-r", "-z", "--full-tree", commit).split("\0"):
        if not line:
            continue
        meta, path = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if mode == "120000":
            raise Outcome(Verdict.REJECT, "bad_tree", f"symlink {path} (symlinks are not allowed)")
        if kind != "blob":
            raise Outcome(Verdict.REJECT, "bad_tree", f"{kind} {path} (submodules are not allowed)")
        entries.append((mode, sha, path))
    total = 0
    modes: dict[str, str] = {}
    dest.mkdir(parents=True, exist_ok=True)
    for mode, sha, path in entries:
        data = repository.odb.stream(bytes.fromhex(sha)).read()
        total += len(data)
        if total > max_bytes:
            raise Outcome(Verdict.REJECT, "bad_tree", f"tree larger than {max_bytes >> 20} MiB")
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(0o755 if mode == "100755" else 0o644)
        modes[path] = mode
    for folder in [dest, *(p for p in dest.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    return modes
