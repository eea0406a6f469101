"""A disk quota per seat: what an agent writes (its clone, notes, outbox) is bounded.

Each seat's folder ``<run>/arms/<arm>/agents/<seat>/`` is, while the run lives, the mount point
of its own ext4 filesystem: a sparse image beside it (``<seat>.quota.ext4``, only the blocks
written take disk space), loop-mounted ``nodev,nosuid``. A container writing past the quota
gets ``ENOSPC`` (``No space left on device``) and the host's disk is untouched. The image has
:data:`RESERVE_BYTES` more that only root may use: the runner's own writes into the seat's
folder (a CLI's kept output) go on after the agent filled its blocks. That reserve holds back
blocks, not inodes: an agent can use up every inode of its filesystem, so what the runner must
be able to write (the inbox's replies and verdicts) is not here but beside the seats, in
``arms/<arm>/inboxes/`` (``isolation/workspace.py``). The agent's share is the quota less the
filesystem's own bookkeeping (about 2 %).

At the end of the run (also on failure) :meth:`SeatQuota.release` copies the seat's files back
into a plain folder at the same path (``cp -a``), unmounts and deletes the image: analysis
reads ``notes/`` and ``repo/`` there as before, without root. A runner killed with SIGKILL
leaves the images mounted; ``resume=DIR`` uses them again (remounting any that are not, after
a reboot) and releases them at its end; ``python -m isolation.quota release DIR`` releases a
run's seats by hand.

Loop mounts need root and the ``mkfs.ext4``, ``mount`` and ``umount`` programs;
:func:`quota_problem` says in one line why not, and then the runner warns and records that the
quota was not enforced. :class:`QuotaWatch` records a ``quota`` lifecycle event the first time
a seat has no room left (again only after it made room), with the bytes used and the quota.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

IMAGE_SUFFIX = ".quota.ext4"
OUT_SUFFIX = ".quota-out"
# Room only root may use in a seat's filesystem (blocks only: ext4 reserves no inodes).
RESERVE_BYTES = 32 * 1024 * 1024
# A seat with less than this left for the agent is at its quota (a write of that much fails).
FULL_BYTES = 1024 * 1024
# Room the agent must have made again before a second ``quota`` event.
REARM_BYTES = 8 * 1024 * 1024
BLOCK = 4096
MOUNT_OPTIONS = "loop,nodev,nosuid,noatime"
TOOLS = ("mkfs.ext4", "mount", "umount")


class Events(Protocol):
    def lifecycle(self, arm: str, agent: str, event: str, **detail: Any) -> None: ...


def quota_problem() -> str | None:
    """Why seat quotas cannot be enforced here (one line), or None."""
    if os.geteuid() != 0:
        return "not root: loop-mounted filesystems need root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"no {', '.join(missing)} on this host"
    if not Path("/dev/loop-control").exists():
        return "no loop devices on this host (/dev/loop-control)"
    return None


def quota_setting_problem(mb: Any) -> str | None:
    """``isolation.disk_quota_mb`` must be a whole number of MiB, at least 64, or null (off)."""
    if mb is None:
        return None
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 64:
        return f"isolation.disk_quota_mb={mb!r}: a whole number of MiB, at least 64, or null"
    return None


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip()[-300:]}")
    return done


@dataclass(frozen=True)
class Usage:
    """A seat's filesystem now: bytes used, and bytes (and inodes) the agent may still use."""

    used_bytes: int
    free_bytes: int
    free_inodes: int

    @property
    def full(self) -> bool:
        return self.free_bytes < FULL_BYTES or self.free_inodes == 0


@dataclass(frozen=True)
class SeatQuota:
    """One seat's folder and its quota in bytes."""

    folder: Path
    limit_bytes: int

    @property
    def image(self) -> Path:
        return self.folder.with_name(self.folder.name + IMAGE_SUFFIX)

    @property
    def staging(self) -> Path:
        return self.folder.with_name(self.folder.name + OUT_SUFFIX)

    def mounted(self) -> bool:
        return os.path.ismount(self.folder)

    def attach(self) -> None:
        """Make the image (the first time) and mount it on the seat's folder (idempotent).

        The folder must be empty the first time: everything of the seat goes inside.

        Raises:
            RuntimeError: mkfs or mount failed (their message).
        """
        if self.mounted():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fresh = not self.image.exists()
        if fresh:
            if any(self.folder.iterdir()):
                raise RuntimeError(f"{self.folder} is not empty: a quota is set before use")
            blocks = -(-(self.limit_bytes + RESERVE_BYTES) // BLOCK)
            with open(self.image, "wb") as handle:
                handle.truncate(blocks * BLOCK)  # sparse
            os.chmod(self.image, 0o600)
            reserved = 100 * RESERVE_BYTES / (blocks * BLOCK)
            try:
                _run(["mkfs.ext4", "-q", "-F", "-b", str(BLOCK), "-m", f"{reserved:.2f}",
                      "-O", "^has_journal", str(self.image)])  # fmt: skip
            except BaseException:
                self.image.unlink(missing_ok=True)
                raise
        _run(["mount", "-o", MOUNT_OPTIONS, str(self.image), str(self.folder)])
        os.chmod(self.folder, 0o755)
        if fresh:
            shutil.rmtree(self.folder / "lost+found", ignore_errors=True)

    def usage(self) -> Usage:
        st = os.statvfs(self.folder)
        return Usage(
            used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
            free_bytes=st.f_bavail * st.f_frsize,
            free_inodes=st.f_favail,
        )

    def discard(self) -> None:
        """Unmount and delete the image and what it holds (a preparation that failed)."""
        if self.mounted():
            try:
                _run(["umount", str(self.folder)])
            except RuntimeError:
                _run(["umount", "-l", str(self.folder)])
        self.image.unlink(missing_ok=True)

    def release(self) -> None:
        """The seat's files back in a plain folder at the same path; the image unmounted and
        deleted. Idempotent, and safe to repeat after being interrupted at any step."""
        if not self.image.exists():
            # Interrupted after the image was deleted: only the last rename is left to do.
            if self.staging.exists():
                if self.folder.exists() and not any(self.folder.iterdir()):
                    self.folder.rmdir()
                if not self.folder.exists():
                    os.replace(self.staging, self.folder)
            return
        if not self.mounted():
            _run(["mount", "-o", MOUNT_OPTIONS + ",ro", str(self.image), str(self.folder)])
        shutil.rmtree(self.staging, ignore_errors=True)
        # cp -a: owners, modes, links and special files (a fifo is made, never read) as they are.
        _run(["cp", "-a", "--", str(self.folder), str(self.staging)], timeout=3600)
        try:
            _run(["umount", str(self.folder)])
        except RuntimeError:
            _run(["umount", "-l", str(self.folder)])  # still busy: detach now, free when idle
        self.image.unlink()
        self.folder.rmdir()
        os.replace(self.staging, self.folder)


@dataclass
class QuotaPlan:
    """The run's quota setting and whether it can be enforced here."""

    mb: int | None
    problem: str | None = None

    @classmethod
    def here(cls, mb: int | None) -> QuotaPlan:
        """The plan for this host; a quota that cannot be enforced says why (one line)."""
        return cls(mb, quota_problem() if mb else None)

    @property
    def enforced(self) -> bool:
        return bool(self.mb) and self.problem is None

    def seat(self, folder: Path) -> SeatQuota | None:
        return SeatQuota(Path(folder), self.mb * 1024 * 1024) if self.enforced and self.mb else None

    def meta(self) -> dict[str, Any]:
        """What the run's meta records (``disk_quota``)."""
        if not self.mb:
            return {"mb": None, "enforced": False, "why": "isolation.disk_quota_mb=null"}
        if self.problem:
            return {"mb": self.mb, "enforced": False, "why": self.problem}
        return {"mb": self.mb, "enforced": True, "how": "an ext4 image per seat, loop-mounted"}

    def warning(self) -> str | None:
        if self.mb and self.problem:
            return (
                f"WARNING: isolation.disk_quota_mb={self.mb} is not enforced ({self.problem}):"
                " an agent can fill the host's disk through its clone and notes"
            )
        return None


def seat_quotas(seat_folders: Iterable[Path]) -> list[SeatQuota]:
    """The quotas of seat folders that have an image beside them (a run's live seats)."""
    found = []
    for folder in seat_folders:
        folder = Path(folder)
        image = folder.with_name(folder.name + IMAGE_SUFFIX)
        if image.exists():
            limit = max(image.stat().st_size - RESERVE_BYTES, 0)
            found.append(SeatQuota(folder, limit))
    return found


def run_seat_folders(run_dir: Path) -> list[Path]:
    """Every seat folder of a run (``arms/*/agents/*``), with or without a quota."""
    folders = set()
    for path in Path(run_dir).glob("arms/*/agents/*"):
        name = path.name
        for suffix in (IMAGE_SUFFIX, OUT_SUFFIX):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        folders.add(path.with_name(name))
    return sorted(folders)


def release_all(seat_folders: Iterable[Path]) -> list[str]:
    """Release every seat that has a quota; returns the problems (one line each), if any."""
    problems = []
    for folder in seat_folders:
        folder = Path(folder)
        image = folder.with_name(folder.name + IMAGE_SUFFIX)
        staging = folder.with_name(folder.name + OUT_SUFFIX)
        if not (image.exists() or staging.exists()):
            continue
        try:
            SeatQuota(folder, 0).release()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            problems.append(f"{folder}: {exc}")
    return problems


@dataclass
class QuotaWatch:
    """Records a ``quota`` lifecycle event when a seat has no room left."""

    events: Events
    seats: dict[tuple[str, str], SeatQuota]
    full: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def for_arms(cls, events: Events, arms: Iterable[Any]) -> QuotaWatch:
        """A watch over every seat of ``arms`` (``ArmWorkspace``) that has a quota."""
        seats = {}
        for arm in arms:
            for name, ws in arm.agents.items():
                for quota in seat_quotas([ws.root]):
                    seats[(arm.name, name)] = quota
        return cls(events, seats)

    def check(self) -> list[tuple[str, str]]:
        """Look at every seat once; returns the seats that reached their quota just now."""
        reached = []
        for key, quota in self.seats.items():
            try:
                usage = quota.usage()
            except OSError:
                continue
            if key in self.full:
                if usage.free_bytes >= REARM_BYTES and usage.free_inodes > 0:
                    self.full.discard(key)
                continue
            if usage.full:
                self.full.add(key)
                reached.append(key)
                arm, agent = key
                self.events.lifecycle(
                    arm,
                    agent,
                    "quota",
                    used_bytes=usage.used_bytes,
                    limit_bytes=quota.limit_bytes,
                    free_bytes=usage.free_bytes,
                    free_inodes=usage.free_inodes,
                    reason="no room left in the seat's disk quota: its writes get ENOSPC",
                )
        return reached


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m isolation.quota release RUN_DIR``: a killed run's seats back to plain
    folders (exit 1 when one could not be released)."""
    parser = argparse.ArgumentParser(prog="python -m isolation.quota")
    parser.add_argument("action", choices=["release"])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    problems = release_all(run_seat_folders(args.run_dir))
    for line in problems:
        print(f"isolation.quota: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
