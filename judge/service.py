"""The judge as a service: one worker per device drains the queue, one evaluation at a time.

The worker holds an exclusive lock on its device for as long as it lives, so two workers never
time evaluations on the same device. At start it re-queues what a dead worker left running and
removes that worker's sandboxes. ``start_service`` launches it as its own OS process, in its own
session and process group, so restarting the runner or an agent never takes the judge down.

A worker serves only the settings it was started with: it claims only jobs queued under its
own settings hash (``judge.settings.settings_hash``), stamps that hash on every evaluation, and
names it in its device lock, so a run with other settings can see whom it waits for. A service
that a run started (``start_service(owner=...)``) leaves once that run's process is gone and
no job of its settings is left: it never outlives its run holding the device with stale
settings, yet a run killed and resumed (same settings) finds it still at work.
"""

from __future__ import annotations

import copy
import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from omegaconf import DictConfig

from isolation.gitutil import GitError, UntrustedRepoError
from judge.checkout import candidate_store, own_copy
from judge.kinds import Evaluator, Metric, get_kind
from judge.mutant import candidate_serve
from judge.private import JudgeHome
from judge.queue import Job, JudgeQueue, process_alive
from judge.sandbox import backend_of, other_cpus
from judge.settings import settings_hash
from judge.verdict import Evaluation, Outcome, Verdict
from tasks.schema import PROJECT_ROOT

Progress = Callable[[str], None]

# Set by ``start_service`` for the service it starts: the starting process ("pid:start time")
# and the log file the service writes to.
OWNER_ENV = "SWARMLAB_JUDGE_OWNER"
LOG_ENV = "SWARMLAB_JUDGE_LOG"


class DeviceBusy(Exception):
    """Another live worker holds this device."""


def _lock_path(home: JudgeHome, device: str) -> Path:
    return home.root / f"device-{device.replace(':', '_').replace('/', '_')}.lock"


class DeviceLock:
    """An exclusive, non-blocking flock on ``<home>/device-<name>.lock``; released by the OS
    if the holder dies. The holder writes its pid and settings hash into the file (JSON)."""

    def __init__(
        self,
        home: JudgeHome,
        device: str,
        settings: str = "",
        log: str = "",
        patience_s: float = 0.0,
    ) -> None:
        self.path = _lock_path(home, device)
        self.patience_s = patience_s
        self.record = {"pid": os.getpid(), "settings_hash": settings, "log": log}
        self._fd: int | None = None

    def __enter__(self) -> DeviceLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        # ``device_holder`` probes by taking the lock for an instant: a worker starting just
        # then tries again rather than taking that for a live worker.
        deadline = time.monotonic() + self.patience_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise DeviceBusy(f"a judge worker already holds {self.path.name}") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(self.record).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def device_holder(home: JudgeHome, device: str) -> dict | None:
    """Who holds ``device`` now: ``{"pid", "settings_hash", "log"}`` (values None while the
    holder is still writing them), or None when no worker holds it."""
    try:
        with DeviceLock(home, device):
            return None
    except DeviceBusy:
        pass
    try:
        record = json.loads(_lock_path(home, device).read_text())
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        record = {}
    return {key: record.get(key) for key in ("pid", "settings_hash", "log")}


def queue_for(cfg: DictConfig, home: JudgeHome) -> JudgeQueue:
    """The queue as this config's side sees it: enqueues and claims under its settings hash."""
    return JudgeQueue(home.queue_path, cfg.judge.queue_policy, settings_hash(cfg))


def work(
    cfg: DictConfig,
    home: JudgeHome,
    *,
    stop: Callable[[], bool] = lambda: False,
    idle_exit: bool = False,
    progress: Progress | None = None,
    idle_stop: Callable[[], bool] = lambda: False,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Drain the queue on ``cfg.judge.device`` of the jobs of this config's settings until
    ``stop()`` or, with ``idle_exit``, until none is left; also once none is left and
    ``idle_stop()``. ``on_ready(hash)`` is called once the device is held. Returns the number
    of evaluations finished.

    The device is handed over between evaluations: when, by the queue's policy, the next job
    is a live submitter's job of other settings, the worker returns (a service then exits) so
    that a worker of those settings can take the device. Runs with different settings on one
    judge (a sweep over seeds) thus take turns, each judged under its own settings.

    Raises:
        DeviceBusy: another worker owns the device (then just wait on the queue).
    """
    device = cfg.judge.device
    queue = queue_for(cfg, home)
    finished = 0
    with DeviceLock(home, device, queue.settings_hash, os.environ.get(LOG_ENV, ""), 1.0):
        if on_ready:
            on_ready(queue.settings_hash)
        recovered = queue.recover(device)
        removed = backend_of(cfg.judge.sandbox).remove_stale(home.owner, device)
        if progress and (recovered or removed):
            progress(
                f"judge: re-queued {len(recovered)} interrupted evaluation(s),"
                f" removed {removed} stale sandbox(es)"
            )
        evaluator = get_kind(cfg.task.kind).evaluator(cfg, home)
        try:
            while not stop():
                turn = queue.next_turn()
                if turn not in (None, queue.settings_hash):
                    if progress:
                        progress(f"judge: the next job is one of settings {turn}: handing over")
                    break
                job = queue.claim(device)
                if job is None:
                    if idle_exit or idle_stop():
                        break
                    time.sleep(0.2)
                    continue
                if progress:
                    progress(
                        f"judge: evaluating job {job.id}"
                        f" ({job.arm}/{job.agent} {job.label or job.commit[:10]})"
                    )
                evaluation = judge_job(cfg, home, queue, evaluator, job, progress)
                if evaluation.verdict is Verdict.ERROR and job.attempts < cfg.judge.max_attempts:
                    queue.requeue(job.id, evaluation.detail, evaluation.reason)
                    if progress:
                        progress(
                            f"judge: job {job.id} hit a judge fault, re-queued: {evaluation.detail}"
                        )
                    continue
                if evaluation.reason == "timeout_answered":  # the queue's log is read only then
                    evaluation = charge_repeated_timeouts(
                        evaluation, queue.requeue_reasons(job.id), job.attempts
                    )
                if not queue.finish(job.id, evaluation):
                    if progress:  # its run ended meanwhile and withdrew it
                        progress(f"judge: job {job.id} was withdrawn; its result is dropped")
                    continue
                finished += 1
                if progress:
                    progress(f"judge: job {job.id} -> {describe(evaluation)}")
        finally:
            # Its warm baseline container, if it keeps one, goes with this worker.
            close = getattr(evaluator, "close", None)
            if callable(close):
                close()
    return finished


def charge_repeated_timeouts(
    evaluation: Evaluation, earlier: list[str], attempts: int
) -> Evaluation:
    """A job's last attempt: WRONG ``timeout`` when this attempt and every earlier one ended in
    ERROR ``timeout_answered`` (a request timed out while the baseline of that moment was not
    slow, and only the retry was answered: :class:`judge.sandbox.TimeoutAnswered`), else the
    evaluation as it is.

    One such ERROR is re-queued, never charged: a machine can stall once. A candidate slow on
    its first try in every attempt is slow, not unlucky; without this a server that hangs on
    purpose would trade a WRONG for an uncharged ERROR and take the judge's time each attempt.

    Args:
        evaluation: The last attempt's evaluation.
        earlier: The reasons the job was re-queued before (``JudgeQueue.requeue_reasons``).
        attempts: The job's attempts, this one included.
    """
    if evaluation.verdict is not Verdict.ERROR or evaluation.reason != "timeout_answered":
        return evaluation
    if len(earlier) != attempts - 1 or any(r != "timeout_answered" for r in earlier):
        return evaluation
    return dataclasses.replace(
        evaluation,
        verdict=Verdict.WRONG,
        reason="timeout",
        detail=(
            f"timed out on its first try in each of its {attempts} attempt(s) while the"
            f" baseline was not slow, answering only the retry; the last: {evaluation.detail}"
        ),
    )


def judge_job(
    cfg: DictConfig,
    home: JudgeHome,
    queue: JudgeQueue,
    evaluator: Evaluator,
    job: Job,
    progress: Progress | None = None,
) -> Evaluation:
    """One claimed job's evaluation, stamped with the queue's settings hash and the tree id.

    The commit is read from the judge's own copy (:func:`_judges_copy`; ERROR when it
    cannot be made). When its tree was
    judged before under the same settings (``judge.duplicates``, :func:`_reusable`), the
    earlier verdict is reused (:func:`duplicate`) and the evaluator is not called at all;
    otherwise the evaluator judges the job as usual.
    """
    copied = _judges_copy(cfg, job, progress)
    if isinstance(copied, Evaluation):
        return dataclasses.replace(copied, settings_hash=queue.settings_hash)
    job, tree = copied
    earlier = _reusable(cfg, home, queue, job, tree)
    if earlier is not None:
        return duplicate(earlier, job, tree, queue.settings_hash)
    return dataclasses.replace(
        evaluator.evaluate(job), settings_hash=queue.settings_hash, tree=tree
    )


def _judges_copy(
    cfg: DictConfig, job: Job, progress: Progress | None
) -> tuple[Job, str] | Evaluation:
    """The job as the judge evaluates it, reading its own fsck-checked copy of the commit
    (:func:`judge.checkout.own_copy`), and the tree id read from that copy; or, when the
    commit cannot be copied (an object missing or forged in the queued repository, the
    judge's store failing), an ERROR evaluation: never charged, re-queued while attempts
    remain, and the candidate is never judged from a copy that failed its check."""
    store = candidate_store(cfg.judge.private_dir)
    try:
        repo, tree = own_copy(Path(job.repo), job.commit, store, store.parent)
    except Outcome:
        return job, ""  # a judge-owned repository's non-commit: the evaluation rejects it
    except (UntrustedRepoError, GitError) as exc:
        if progress:
            progress(f"judge: job {job.id}: the commit could not be copied: {exc}")
        why = str(exc) if isinstance(exc, UntrustedRepoError) else "the judge's store failed"
        now = time.time()
        return Evaluation(
            job_id=job.id,
            arm=job.arm,
            agent=job.agent,
            commit=job.commit,
            verdict=Verdict.ERROR,
            reason="infrastructure",
            detail=f"the judge could not copy the queued commit: {why}",
            attempts=job.attempts,
            enqueued_at=job.enqueued_at,
            started_at=now,
            finished_at=now,
            label=job.label,
        )
    return dataclasses.replace(job, repo=str(repo)), tree


def _reusable(
    cfg: DictConfig, home: JudgeHome, queue: JudgeQueue, job: Job, tree: str
) -> Evaluation | None:
    """The earlier evaluation whose verdict this job takes (``judge.duplicates``), or None.

    Never for a re-judgement, a job without a tree id, or a candidate served another way than
    the task's own (the judge's generated mutants: their serve argv is keyed by commit, so the
    tree is not all of their input). Only a finished evaluation counts: while the earlier job
    of the same tree is still queued or running (several devices, or a fair queue across
    arms), this one is evaluated as usual, never kept waiting on it.
    """
    if job.rejudge or not tree or cfg.judge.duplicates == "off":
        return None
    if candidate_serve(home, job) is not None:
        return None
    return queue.earlier_evaluation(tree, job.id, same_arm=cfg.judge.duplicates == "arm")


def duplicate(earlier: Evaluation, job: Job, tree: str, settings: str) -> Evaluation:
    """``job``'s evaluation when its tree was judged before: ``earlier``'s verdict, reason,
    detail, metrics and flags, marked ``duplicate_of`` the earlier job; no stage ran (no
    sandbox, no judge time)."""
    now = time.time()
    return Evaluation(
        job_id=job.id,
        arm=job.arm,
        agent=job.agent,
        commit=job.commit,
        verdict=earlier.verdict,
        reason=earlier.reason,
        detail=earlier.detail,
        metrics=copy.deepcopy(earlier.metrics),
        flags=copy.deepcopy(earlier.flags),
        attempts=job.attempts,
        enqueued_at=job.enqueued_at,
        started_at=now,
        finished_at=now,
        label=job.label,
        settings_hash=settings,
        metric=copy.deepcopy(earlier.metric),
        duplicate_of=earlier.job_id,
        tree=tree,
    )


def extra_devices(cfg: DictConfig, count: int) -> list[DictConfig]:
    """Configs for up to ``count - 1`` more CPU devices beside the judge's own: each takes one
    other CPU (never shared), for work done before any agent runs (preflight). None on a GPU
    judge or a one-CPU machine."""
    if count <= 1 or cfg.judge.device != "cpu":
        return []
    others = other_cpus(cfg.judge.sandbox.cpuset)[::-1][: count - 1]
    extra = []
    for cpu in others:
        device_cfg = copy.deepcopy(cfg)
        device_cfg.judge.device = f"cpu-{cpu}"
        device_cfg.judge.sandbox.cpuset = str(cpu)
        extra.append(device_cfg)
    return extra


def run_until_done(
    cfg: DictConfig,
    home: JudgeHome,
    job_ids: list[int],
    progress: Progress | None = None,
    parallel: int = 1,
) -> list[Evaluation]:
    """Evaluate in this process if no worker owns the device; otherwise wait for the worker.

    With ``parallel`` > 1 (before agents start: preflight), workers on that many CPUs evaluate
    at once, one evaluation per CPU; every comparison stays inside one evaluation, on one CPU.
    """
    queue = queue_for(cfg, home)
    pending = set(job_ids)
    lock = threading.Lock()
    told: set[object] = set()

    def done() -> bool:
        with lock:
            finished = {j for j in pending if queue.state(j) in ("done", "cancelled")}
            pending.difference_update(finished)
            return not pending

    def drain(device_cfg: DictConfig) -> None:
        while not done():
            try:
                work(device_cfg, home, stop=done, idle_exit=True, progress=progress)
                if not done():
                    time.sleep(0.5)  # it handed the device over: look again soon
            except DeviceBusy:
                holder = device_holder(home, device_cfg.judge.device) or {}
                theirs = holder.get("settings_hash")
                if progress and theirs and theirs != queue.settings_hash and theirs not in told:
                    told.add(theirs)
                    progress(
                        f"judge: the worker on device {device_cfg.judge.device}"
                        f" (pid {holder.get('pid')}) serves other judge settings"
                        f" ({theirs}, these are {queue.settings_hash}); it hands the device"
                        " over between evaluations, when these jobs' turn comes"
                    )
                time.sleep(0.5)

    helpers = [
        threading.Thread(target=drain, args=(c,), daemon=True) for c in extra_devices(cfg, parallel)
    ]
    for helper in helpers:
        helper.start()
    drain(cfg)
    for helper in helpers:
        helper.join()
    return [queue.result(j) for j in job_ids]  # type: ignore[misc]


def describe(evaluation: Evaluation) -> str:
    """One line: verdict, reason, the headline numbers."""
    m = evaluation.metrics
    text = str(evaluation.verdict)
    if evaluation.reason:
        text += f" ({evaluation.reason})"
    metric = Metric.from_dict(evaluation.metric) if evaluation.metric.get("name") else None
    score = metric.score(m) if metric else None
    if metric and score is not None and "x_baseline" in m:
        unit = f" {metric.unit}" if metric.unit else ""
        text += f" {score:.1f}{unit} = {m['x_baseline']:.2f}x baseline"
    if "b1_ratio" in m:
        text += f", B=1 ratio {m['b1_ratio']:.3f}"
    if evaluation.duplicate_of is not None:
        text += f" (duplicate of job {evaluation.duplicate_of}: the same tree, not judged again)"
    text += f" [{evaluation.stages.get('total', 0):.1f} s]"
    return text


def serve_forever(cfg: DictConfig, home: JudgeHome) -> int:
    """The body of ``python -m judge serve``: work until SIGTERM/SIGINT, recording a pid file.

    A signal stops the worker between evaluations; a second one stops it at once. One in
    progress is left ``running`` and re-queued by the next worker, so nothing is lost or
    counted twice. Started by a run (``OWNER_ENV`` set), it also leaves once that run's process
    is gone and no job of its settings is waiting or running."""
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:  # second signal: leave now, the queue recovers the job
            raise SystemExit(128 + signum)
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    info = home.root / f"service-{os.getpid()}.json"
    owner = os.environ.get(OWNER_ENV, "")

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    def ready(settings: str) -> None:
        info.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "started_at": time.time(),
                    "device": cfg.judge.device,
                    "settings_hash": settings,
                    "owner": owner,
                    "log": os.environ.get(LOG_ENV, ""),
                }
            )
        )
        log(f"judge: serving device {cfg.judge.device} with settings {settings}")

    def orphaned() -> bool:
        if not owner or process_alive(owner):
            return False
        log("judge: the run that started this service is gone and none of its jobs is left")
        return True

    try:
        work(cfg, home, stop=lambda: stopping, progress=log, idle_stop=orphaned, on_ready=ready)
    except DeviceBusy as busy:
        log(f"judge: not starting: {busy}")
        return 0
    finally:
        info.unlink(missing_ok=True)
    return 0


def worker_alive(home: JudgeHome, device: str) -> bool:
    """True while some worker holds ``device`` (the lock is released by the OS if it dies)."""
    try:
        with DeviceLock(home, device):
            return False
    except DeviceBusy:
        return True


def start_service(config_file: Path, log_path: Path, owner: str = "") -> subprocess.Popen:
    """Start ``python -m judge serve --config FILE`` as its own OS process, in its own session
    and process group, so that stopping the runner or an agent never takes the judge down.
    ``owner`` (a ``process_token``): the service leaves once that process is gone and no job
    of its settings is left."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "judge", "serve", "--config", str(config_file)],
            cwd=os.getcwd(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **os.environ,
                "PYTHONPATH": str(PROJECT_ROOT),
                OWNER_ENV: owner,
                LOG_ENV: str(log_path.resolve()),
            },
        )
