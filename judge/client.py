"""The judge as a run sees it: the runner's one handle on the judge (DESIGN.md: the runner
talks to the judge only through its queue, and reaches it only through this face).

:class:`JudgeClient` makes the judge ready for a run: its private folder set up under the
setup lock, the preflight run or found passed in its record. :class:`JudgeService` starts or
finds the judge service of the run's settings, keeps it alive, and stops it when idle at the
run's end. :func:`enqueued_jobs` hands the queue's own log as typed records,
:func:`stop_services` stops the services a folder's runs left running, and
:func:`agent_cpuset` says which CPUs are the agents' (every one but the judge's).

Every refusal is a :class:`JudgeRefused` whose message is one line a run can print as it is.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from judge.checkout import BadInput
from judge.compose import load_judge_config
from judge.preflight import format_table, passed_preflight, preflight_fingerprint, run_preflight
from judge.private import JudgeHome, home_path, setup
from judge.queue import JudgeQueue, process_token
from judge.sandbox import other_cpus
from judge.service import device_holder, start_service
from judge.settings import settings_hash

Say = Callable[[str], None]

# A service that dies this soon after it started, this many times in a row, is not started
# again: its settings or the judge itself are broken, and restarting it would only hide that.
QUICK_DEATH_S = 60.0
QUICK_DEATHS = 3
PREFLIGHT_CHOICES = ("required", "skip")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class JudgeRefused(Exception):
    """The judge cannot judge this run (bad settings, a failed preflight): one clear line."""


class JudgeServiceFailed(JudgeRefused):
    """The judge service this run starts keeps dying: its log says why."""


def agent_cpuset(setting: str, judge_setting: str) -> str:
    """The agents' CPUs for the isolation setting ``setting``: ``auto`` is every CPU but the
    judge's (``judge_setting``: the sandbox's cpuset), all of them on a one-CPU machine;
    anything else is given as it is."""
    if setting != "auto":
        return setting
    return ",".join(map(str, other_cpus(judge_setting) or sorted(os.sched_getaffinity(0))))


class JudgeClient:
    """The judge of one run's settings, made ready before any agent starts.

    Args:
        cfg: A config with the ``task`` and ``judge`` nodes (the judge app config of a run).
        say: Where progress lines go (the runner's stderr).
    """

    def __init__(self, cfg: DictConfig, say: Say = _say) -> None:
        self.cfg = cfg
        self.say = say

    @contextmanager
    def setup_lock(self) -> Iterator[float | None]:
        """Held while a run sets up and preflights the judge's private folder: runs started
        together (a parallel sweep) would otherwise set up the same folder at once, or
        preflight it twice. The first sets up and preflights; the others wait, then find it
        done. Yields when this run began to wait for another, or None when it did not wait."""
        root = home_path(self.cfg)
        root.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(root.with_name(root.name + ".setup.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        waited_since = None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waited_since = time.time()
                self.say(
                    "judge: another run is setting up or preflighting this judge; waiting for it"
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield waited_since
        finally:
            os.close(fd)  # releases the lock

    def failed_preflight_since(self, home: JudgeHome, since: float) -> bool:
        """True if a complete preflight of these judge code, task and settings failed after
        ``since``: the one another run just ran while this one waited, not to be repeated."""
        try:
            record = json.loads((home.root / "preflight.json").read_text())
        except (OSError, ValueError):
            return False
        return bool(
            record.get("complete")
            and not record.get("ok")
            and float(record.get("at", 0)) >= since
            and record.get("fingerprint") == preflight_fingerprint(self.cfg)
        )

    def set_up(self) -> JudgeHome:
        """The judge's private folder, set up if needed (no preflight: a resumed run's judge
        passed it when the run started)."""
        with self.setup_lock():
            return setup(self.cfg, progress=self.say)

    def make_ready(self, preflight: str) -> JudgeHome:
        """Set up the private folder and, unless ``preflight`` is ``skip``, make sure this
        judge, task and settings passed the preflight (run now when no record says so).

        Raises:
            JudgeRefused: a bad ``preflight`` value, a preflight that failed (now or in the
                run this one waited for), a catalogue of mutants that cannot vouch for it.
        """
        if preflight not in PREFLIGHT_CHOICES:
            raise JudgeRefused(f"judge.preflight={preflight!r}: use required or skip")
        say = self.say
        with self.setup_lock() as waited_since:
            home = setup(self.cfg, progress=say)
            if preflight == "skip":
                say("WARNING: judge.preflight=skip: the judge was not checked against its mutants")
            elif passed_preflight(self.cfg, home):
                say("judge preflight: passed before with this judge, task and settings")
            elif waited_since and self.failed_preflight_since(home, waited_since):
                raise JudgeRefused(
                    "judge preflight failed in the run this one waited for"
                    f" ({home.root / 'preflight.json'}): not starting any agent"
                )
            else:
                say("judge preflight: scoring the task's mutants before any agent starts")
                try:
                    report = run_preflight(self.cfg, home, progress=say)
                except ValueError as exc:  # a catalogue that cannot vouch for the judge
                    raise JudgeRefused(f"judge preflight: {exc}") from None
                say(format_table(report.rows))
                if report.note:
                    say(report.note)
                if not report.ok:
                    raise JudgeRefused("judge preflight failed: not starting any agent")
        return home


@dataclass
class JudgeService:
    """The judge service of one run. The run is judged only under its own settings
    (``settings``, the hash of ``config_file``): by a service it starts, or by a live one that
    serves the same settings; a live one with other settings is waited for, never used. The
    service is never killed with the runner (own session); it leaves by itself once this run's
    process is gone and none of its jobs is left (``judge.service.serve_forever``), and is
    stopped at the end (:meth:`stop_when_idle`) if this run started it and no job of its
    settings waits.

    Raises:
        JudgeRefused: ``config_file`` holds settings the service would refuse.
    """

    home: JudgeHome
    device: str
    config_file: Path
    log_file: Path
    process: subprocess.Popen | None = None
    # This run's side of the queue (:meth:`open_queue`): whose turn the device is.
    queue: JudgeQueue | None = None
    settings: str = field(init=False, default="")
    _started: float = field(init=False, default=0.0)
    _quick_deaths: int = field(init=False, default=0)
    _told: tuple[str, Any] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        # The hash of the saved file as the service loads it, so both sides agree on it.
        try:
            self.settings = settings_hash(load_judge_config(self.config_file))
        except BadInput as exc:  # the service would refuse it too, at every restart
            raise JudgeRefused(f"judge settings: {exc}") from None

    def open_queue(self, policy: str) -> JudgeQueue:
        """This run's side of the judge's queue: every job it queues names this run's
        settings, and only a worker with them judges it."""
        self.queue = JudgeQueue(self.home.queue_path, policy, self.settings)
        return self.queue

    def start(self, timeout_s: float = QUICK_DEATH_S) -> None:
        """``ensure_running``, then wait until the service holds the device (or is seen to be
        another's): a service that cannot start stops the run before any agent starts."""
        limit = time.monotonic() + timeout_s
        while time.monotonic() < limit:
            self.ensure_running()
            if self.process is None:
                return  # judged by a live service with these settings, or waiting for one
            holder = device_holder(self.home, self.device)
            if holder and holder["pid"] == self.process.pid:
                return
            time.sleep(0.2)

    def ensure_running(self) -> None:
        """Keep a service of this run's settings on the device, or wait for the device.

        Raises:
            JudgeServiceFailed: the service this run started died ``QUICK_DEATHS`` times in a
                row, each within ``QUICK_DEATH_S`` of starting.
        """
        if self.process is not None:
            code = self.process.poll()
            if code is None:
                return
            self._exited(code)
        holder = device_holder(self.home, self.device)
        if holder is None:
            turn = self.queue.next_turn() if self.queue is not None else None
            if turn not in (None, self.settings):
                return  # a job of other settings is next: its run starts its worker
            self.process = start_service(self.config_file, self.log_file, process_token())
            self._started = time.monotonic()
            return
        pid, theirs = holder["pid"], holder["settings_hash"]
        if pid is None:
            return  # a worker is just taking the device: look again next time
        if theirs == self.settings:
            if self._told != ("shared", pid):
                self._told = ("shared", pid)
                self._note(
                    f"judge: this run is judged by the service pid {pid} (log {holder['log']}),"
                    f" which serves the same settings {self.settings}"
                )
            return
        if self._told != ("waiting", theirs):  # once per other settings, not per hand-over
            self._told = ("waiting", theirs)
            line = (
                f"judge: the judge worker on device {self.device} (pid {pid}) serves other"
                f" settings ({theirs or 'unknown'}; this run's are {self.settings}): this run's"
                " evaluations wait for their turn (the device changes hands between"
                " evaluations)"
            )
            _say(line)
            self._note(line)

    def _exited(self, code: int) -> None:
        lived = time.monotonic() - self._started
        self.process = None
        if code == 0:  # it left by itself (the device was taken meanwhile, or it was stopped)
            self._quick_deaths = 0
            return
        self._quick_deaths = self._quick_deaths + 1 if lived < QUICK_DEATH_S else 0
        if self._quick_deaths >= QUICK_DEATHS:
            last = self._last_line()
            raise JudgeServiceFailed(
                f"the judge service died {self._quick_deaths} times in a row, each within"
                f" {QUICK_DEATH_S:g} s of starting (last exit code {code}); see {self.log_file}"
                + (f" (its last line: {last})" if last else "")
            )
        _say(
            f"judge: the judge service exited with code {code} after {lived:.0f} s;"
            f" starting it again (see {self.log_file})"
        )

    def _note(self, line: str) -> None:
        """A line in this run's service log, which then exists even when another process's
        service judges the run (it says which)."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "a") as log:
            log.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    def _last_line(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip()[:300] if lines else ""

    def stop_when_idle(self, queue: JudgeQueue, withdraw: list[int] | None = None) -> None:
        """At the run's end: withdraw ``withdraw`` from the queue (this run's jobs nobody will
        record any more, one being judged included), then stop the service this run started
        unless a job of its settings still waits or runs (another run with them needs it)."""
        if withdraw:
            queue.cancel(withdraw, "its run ended", running=True)
        if self.process is None or self.process.poll() is not None:
            return
        counts = queue.counts(self.settings)
        if counts.get("queued", 0) or counts.get("running", 0):
            return  # another run with the same settings still needs it
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)  # idle: it leaves within a poll
        except subprocess.TimeoutExpired:
            # Inside an evaluation nobody waits for (a withdrawn job): a second signal ends it.
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass(frozen=True)
class QueuedJob:
    """A job as the queue logged it when it was queued."""

    job_id: int
    at: float
    arm: str
    agent: str
    commit: str


def enqueued_jobs(queue: JudgeQueue) -> list[QueuedJob]:
    """Every job the queue logged as queued, oldest first (whoever queued it)."""
    return [
        QueuedJob(job_id, at, data.get("arm", ""), data.get("agent", ""), data.get("commit", ""))
        for at, job_id, kind, data in queue.events()
        if kind == "enqueued" and job_id is not None
    ]


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def stop_services(homes: Iterable[str | Path], folder: Path) -> list[int]:
    """SIGTERM every judge service of the judge folders ``homes`` whose config lies under
    ``folder`` (the services a sweep's runs started and left running): each finishes the
    evaluation in progress, if any, and exits. Returns the pids signalled."""
    prefix = str(folder.resolve()) + os.sep
    stopped = []
    for home in sorted({str(h) for h in homes if h}):
        for info in sorted(Path(home).glob("service-*.json")):
            try:
                pid = int(json.loads(info.read_text())["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            argv = _argv(pid)
            serving = "judge" in argv and "serve" in argv
            if not serving or not any(a.startswith(prefix) for a in argv):
                continue  # not a judge service, or not one this folder's runs started
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            stopped.append(pid)
    return stopped
