"""Agent workspaces on the host: one folder per arm, one per agent, laid out exactly as
``docs/agent-workspace.md`` says.

``<run>/arms/<arm>/`` holds the arm's bare ``origin.git`` (only ``master``), the gateway's
``submissions.git``, the board, ``agents/<agent>/`` with the agent's clone, notes and outbox,
and ``inboxes/<agent>/``, the agent's inbox. Arms never share a path. What the agent writes
(clone, notes, outbox) can be owned by the agent's uid; the inbox and the board stay the
runner's, readable by everyone. The inbox lies outside the seat's folder on purpose: that folder
is the seat's own filesystem when a disk quota is enforced (``isolation/quota.py``), and a
seat that used up its inodes there would leave the gateway no room for its replies and
verdicts (an ext4 reserve holds back blocks for root, never inodes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from isolation.gitutil import fetch_commit, git, template_repo
from isolation.quota import QuotaPlan, SeatQuota, release_all, seat_quotas

# Which roles may submit to the judge. A critic reviews others' PASSes and never submits.
ROLES: dict[str, bool] = {"worker": True, "critic": False}
# Names end up in paths, git refs and container names.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
ARM_FILE = "arm.json"
# The agents' inboxes, beside ``agents/`` (never inside a seat's folder).
INBOXES = "inboxes"
# Whether an arm's seats share one board and submission repository, or each has its own.
VISIBILITIES = ("shared", "private")
# A private arm's per-seat origin, board and submissions, one folder per seat.
PRIVATE = "private"

__all__ = [
    "ROLES",
    "VISIBILITIES",
    "AgentWorkspace",
    "ArmWorkspace",
    "Seat",
    "load_arm",
    "prepare_arm",
    "release_quotas",
    "template_repo",
]


@dataclass(frozen=True)
class Seat:
    """One seat of an arm: an agent's name, its role and (for a worker) its first direction."""

    name: str
    role: str  # "worker" | "critic"
    direction: str | None = None


@dataclass
class AgentWorkspace:
    """One agent's folders on the host (see the contract for what the agent sees)."""

    arm: str
    name: str
    role: str
    direction: str | None
    root: Path
    repo: Path
    notes: Path
    outbox: Path
    inbox: Path

    @property
    def replies(self) -> Path:
        return self.inbox / "replies"

    @property
    def verdicts_file(self) -> Path:
        return self.inbox / "verdicts.jsonl"

    @property
    def can_submit(self) -> bool:
        return ROLES.get(self.role, False)


@dataclass
class ArmWorkspace:
    """One arm's folders on the host."""

    name: str
    root: Path
    origin: Path
    submissions: Path
    board_dir: Path
    agents: dict[str, AgentWorkspace] = field(default_factory=dict)
    # "shared": one board and submission repo for every seat; "private": one per seat.
    visibility: str = "shared"

    @property
    def board_file(self) -> Path:
        return self.board_dir / "board.jsonl"

    @property
    def private(self) -> bool:
        return self.visibility == "private"

    def private_dir(self, seat: str) -> Path:
        """``seat``'s own folder in a private arm (its origin, board and submissions)."""
        return self.root / PRIVATE / seat

    def origin_of(self, seat: str) -> Path:
        """The bare origin ``seat``'s clone was made from."""
        return self.private_dir(seat) / "origin.git" if self.private else self.origin

    def board_dir_of(self, seat: str) -> Path:
        """The board folder ``seat`` reads (mounted at /work/board)."""
        return self.private_dir(seat) / "board" if self.private else self.board_dir

    def submissions_of(self, seat: str) -> Path:
        """The submission repo ``seat`` fetches relays from (mounted at /work/submissions.git):
        its own in a private arm, the arm's otherwise."""
        return self.private_dir(seat) / "submissions.git" if self.private else self.submissions

    def boards(self) -> dict[str | None, Path]:
        """Every board file of the arm, by whose posts it shows: ``None`` (every seat's, the
        shared board) or one seat's name (its own board in a private arm)."""
        if not self.private:
            return {None: self.board_file}
        return {name: self.board_dir_of(name) / "board.jsonl" for name in self.agents}


def _check_name(kind: str, name: str) -> None:
    if not NAME_RE.match(name or ""):
        raise ValueError(
            f"{kind} name {name!r}: use letters, digits, '_' or '-' (at most 63, starting with"
            " a letter or digit)"
        )


def _layout(run_dir: Path, arm: str, seats: list[Seat], visibility: str = "shared") -> ArmWorkspace:
    root = Path(run_dir).resolve() / "arms" / arm
    ws = ArmWorkspace(
        name=arm,
        root=root,
        origin=root / "origin.git",
        submissions=root / "submissions.git",
        board_dir=root / "board",
        visibility=visibility,
    )
    for seat in seats:
        home = root / "agents" / seat.name
        # Not in the seat's folder (its own filesystem under a quota): the runner writes here.
        inbox = root / INBOXES / seat.name
        ws.agents[seat.name] = AgentWorkspace(
            arm=arm,
            name=seat.name,
            role=seat.role,
            direction=seat.direction,
            root=home,
            repo=home / "repo",
            notes=home / "notes",
            outbox=home / "outbox",
            inbox=inbox,
        )
    return ws


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, gid)


def _mkdir(path: Path, mode: int = 0o755) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)  # whatever the umask: agents (another uid) must read what is ours


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


def _bare(path: Path) -> None:
    # --shared=0644: every file git writes later is world-readable and only ours to change,
    # whatever the umask of whoever writes (the gateway); directories get the x bits.
    git("init", "-q", "--bare", "--shared=0644", "--initial-branch=master", str(path))
    for top, _dirs, files in os.walk(path):
        os.chmod(top, 0o755)
        for name in files:
            os.chmod(os.path.join(top, name), 0o644)


def prepare_arm(
    run_dir: Path,
    arm: str,
    source_repo: Path,
    commit: str,
    seats: list[Seat],
    uid: int | None = None,
    gid: int | None = None,
    quota: QuotaPlan | None = None,
    visibility: str = "shared",
) -> ArmWorkspace:
    """Create ``<run_dir>/arms/<arm>/`` as in ``docs/agent-workspace.md``.

    ``origin.git`` holds only ``master`` at ``commit`` (and only the objects it reaches: a
    clone cannot see any other commit of ``source_repo``); each seat gets a clone of it, its
    git identity set to the agent's name, and empty notes, outbox and inbox.

    Args:
        run_dir: the run directory.
        arm: the arm's name (a folder name).
        source_repo: a repository holding ``commit`` (the task template made by
            :func:`template_repo`, or a finished run's ``submissions.git`` for a continuation).
        commit: the full sha every agent starts from.
        seats: the arm's agents; names unique within the arm.
        uid, gid: when given (the runner is root), the agent's clone, notes and outbox are
            chowned to them; the inbox and board stay the caller's, readable by all.
        quota: a disk quota per seat (``isolation/quota.py``): when it can be enforced, each
            seat's folder is its own filesystem of that size, until
            :func:`release_quotas` puts the files back in plain folders.
        visibility: ``shared`` (one board and submission repo for the arm) or ``private``
            (each seat its own origin, board and submission repo, as a solo arm's).

    Returns:
        The arm's workspace. A small ``arm.json`` is written for :func:`load_arm`.

    Raises:
        ValueError: a bad or duplicate name, an unknown role or visibility, or the arm folder
            exists.
    """
    _check_name("arm", arm)
    if visibility not in VISIBILITIES:
        raise ValueError(f"arm {arm}: visibility {visibility!r} is not one of {VISIBILITIES}")
    names = [s.name for s in seats]
    if not seats:
        raise ValueError(f"arm {arm}: no seats")
    for seat in seats:
        _check_name("agent", seat.name)
        if seat.role not in ROLES:
            raise ValueError(f"agent {seat.name}: role {seat.role!r} is not one of {list(ROLES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"arm {arm}: duplicate agent names in {names}")
    if visibility == "private" and any(not ROLES[s.role] for s in seats):
        # A critic reviews others' submissions; a private seat sees only its own.
        raise ValueError(f"arm {arm}: a critic has nothing to review in a private arm")
    if (uid is None) != (gid is None):
        raise ValueError("give both uid and gid, or neither")
    ws = _layout(run_dir, arm, seats, visibility)
    if ws.root.exists():
        raise ValueError(f"arm folder {ws.root} already exists: an arm is prepared only once")
    _mkdir(ws.root.parent)
    ws.root.mkdir()
    try:
        _populate(ws, Path(source_repo), commit, seats, uid, gid, quota)
    except BaseException:
        for seat_quota in seat_quotas(a.root for a in ws.agents.values()):
            seat_quota.discard()
        shutil.rmtree(ws.root, ignore_errors=True)  # a failed preparation can be retried
        raise
    return ws


def release_quotas(arms: list[ArmWorkspace]) -> list[str]:
    """Every seat of ``arms`` with a disk quota back in a plain folder (its image unmounted
    and deleted); the problems, one line each. Call at the end of a run, also on failure."""
    return release_all(a.root for arm in arms for a in arm.agents.values())


def _populate(
    ws: ArmWorkspace,
    source_repo: Path,
    commit: str,
    seats: list[Seat],
    uid: int | None,
    gid: int | None,
    quota: QuotaPlan | None = None,
) -> None:
    arm = ws.name
    ws.root.chmod(0o755)
    _bare(ws.origin)
    fetch_commit(source_repo, commit, ws.origin, "refs/heads/master")
    _bare(ws.submissions)
    if ws.private:
        _mkdir(ws.root / PRIVATE)
        for name in ws.agents:
            # What a solo arm has, per seat: an origin of its own (copied from the arm's, so
            # it holds master and nothing else), a board and a submission repo.
            _mkdir(ws.private_dir(name))
            _bare(ws.origin_of(name))
            fetch_commit(ws.origin, commit, ws.origin_of(name), "refs/heads/master")
            _bare(ws.submissions_of(name))
    for board in ws.boards().values():
        _mkdir(board.parent)
        _write(board, "")

    _mkdir(ws.root / "agents")
    _mkdir(ws.root / INBOXES)
    for agent in ws.agents.values():
        _mkdir(agent.root)
        seat_quota: SeatQuota | None = quota.seat(agent.root) if quota else None
        if seat_quota is not None:
            seat_quota.attach()  # the seat's own filesystem: everything below goes inside
        # --no-local: objects travel through a pack, never hard links. A hard-linked object
        # file chowned to one agent would be writable by it in every other clone too.
        origin = ws.origin_of(agent.name)
        git("clone", "-q", "--no-local", "--branch", "master", str(origin), str(agent.repo))
        git("config", "user.name", agent.name, cwd=agent.repo)
        git("config", "user.email", f"{agent.name}@{arm}.swarmlab.invalid", cwd=agent.repo)
        for folder in (agent.notes, agent.outbox):
            _mkdir(folder)
        _make_inbox(agent)
        if uid is not None and gid is not None:
            for folder in (agent.repo, agent.notes, agent.outbox):
                _chown_tree(folder, uid, gid)

    _write(
        ws.root / ARM_FILE,
        json.dumps(
            {
                "name": arm,
                "commit": commit,
                "source_repo": str(source_repo.resolve()),
                "uid": uid,
                "gid": gid,
                "seats": [asdict(s) for s in seats],
                "visibility": ws.visibility,
            },
            indent=1,
        )
        + "\n",
    )


def _make_inbox(agent: AgentWorkspace) -> None:
    """The agent's inbox (root's when the runner is root, world-readable), if missing."""
    _mkdir(agent.inbox.parent)
    _mkdir(agent.inbox)
    _mkdir(agent.replies)
    if not agent.verdicts_file.exists():
        _write(agent.verdicts_file, "")


def load_arm(run_dir: Path, arm: str) -> ArmWorkspace:
    """The workspace :func:`prepare_arm` made for ``arm`` in ``run_dir`` (to resume a run).

    A run prepared before the inboxes moved out of the seats' folders gets its inboxes made
    (empty: the gateway re-derives every verdicts file from the event log when it starts).

    Raises:
        FileNotFoundError: the arm was never prepared there.
    """
    _check_name("arm", arm)
    path = Path(run_dir).resolve() / "arms" / arm / ARM_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no arm {arm!r} in {run_dir} (missing {path})")
    record = json.loads(path.read_text())
    seats = [Seat(**s) for s in record["seats"]]
    ws = _layout(Path(run_dir), arm, seats, record.get("visibility", "shared"))
    if os.geteuid() == 0:
        # A run killed with SIGKILL keeps its seats' images; after a reboot they are unmounted.
        for seat_quota in seat_quotas(a.root for a in ws.agents.values()):
            seat_quota.attach()
    for agent in ws.agents.values():
        if not agent.replies.is_dir():
            _make_inbox(agent)
    return ws
