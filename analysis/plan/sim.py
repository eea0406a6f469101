"""A discrete-event simulation (``simpy``) of the judge: a pool of serial devices sharing one
queue, served ``fifo`` or ``fair`` exactly as ``judge.queue`` orders its claims.

Two ways in. :func:`simulate` runs a *fitted* team: every seat submits, waits for its verdict,
waits a think time drawn from its arm's recorded ones, and submits again; each submission's
outcome and judge seconds are drawn from its arm's recorded ones. :func:`replay` feeds the
run's *actual* submission times and judge seconds through the same pool under other settings.
Both are simulations: they say what the queue would do, not what the agents would have done
with earlier verdicts.

Settings (:class:`JudgeSetup`): ``devices`` (serial judges sharing the queue), ``speed`` (every
judge second divided by it), ``policy`` (``fifo``: oldest first; ``fair``: the key served
longest ago first, then its oldest), ``dedupe`` (``recorded``: as the run did; ``on``: a tree
already judged in the same arm is answered in ``duplicate_s``; ``off``: every job judged in
full) and ``overlap`` (a job's untimed stages, ``analysis.plan.fit.UNTIMED_STAGES``, run on a
spare CPU, one per device, while it waits, so the device holds only its timed part).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import simpy

from analysis.plan.fit import ArmPace, Fit, Job

__all__ = [
    "SATURATED",
    "JudgeSetup",
    "Outcome",
    "SimJob",
    "replay",
    "simulate",
    "summarise",
]

#: The judge is called saturated from this utilisation on (the knee of a team-size table).
SATURATED = 0.9


@dataclass(frozen=True)
class JudgeSetup:
    """The judge's settings in a simulation (see the module's text)."""

    devices: int = 1
    speed: float = 1.0
    policy: str = "fifo"
    dedupe: str = "recorded"
    overlap: bool = False
    duplicate_s: float = 0.05

    def label(self) -> str:
        parts = [f"{self.devices} device(s)", f"{self.speed:g}x", self.policy]
        if self.dedupe != "recorded":
            parts.append(f"dedupe {self.dedupe}")
        if self.overlap:
            parts.append("overlap")
        return ", ".join(parts)


@dataclass
class SimJob:
    """A job in the simulated queue, with what happened to it."""

    seq: int
    arm: str
    fair_key: str
    enqueued_s: float
    untimed_s: float
    timed_s: float
    full_untimed_s: float
    full_timed_s: float
    tree: str = ""
    recorded_duplicate: bool = False
    error: bool = False
    source: Job | None = None
    pseudo: bool = False
    ready_s: float | None = None
    started_s: float | None = None
    finished_s: float | None = None
    duplicate: bool = False
    done: simpy.Event | None = field(default=None, repr=False)


class JudgePool:
    """Serial devices sharing one queue (``judge.queue`` order), with optional spare CPUs."""

    def __init__(self, env: simpy.Environment, setup: JudgeSetup) -> None:
        if setup.policy not in ("fifo", "fair"):
            raise ValueError(f"queue policy {setup.policy!r} is not fifo or fair")
        if setup.devices < 1 or setup.speed <= 0:
            raise ValueError("devices must be >= 1 and speed > 0")
        self.env, self.setup = env, setup
        self.queue: list[SimJob] = []
        self.arrived = env.event()
        self.last_start: dict[str, float] = {}
        self.judged_trees: set[tuple[str, str]] = set()
        self.busy: list[tuple[float, float]] = []
        self.prep = simpy.Resource(env, capacity=setup.devices) if setup.overlap else None
        for _ in range(setup.devices):
            env.process(self._device())

    def submit(self, job: SimJob) -> simpy.Event:
        """Queue ``job`` now; the returned event fires when it is judged."""
        job.done = self.env.event()
        job.enqueued_s = self.env.now
        self.env.process(self._arrive(job))
        return job.done

    def _arrive(self, job: SimJob):
        if self.setup.dedupe != "recorded" and job.recorded_duplicate:
            # The run copied this verdict; under other dedupe settings it costs the full job
            # unless the pool finds its tree judged already (``_device``).
            job.untimed_s, job.timed_s = job.full_untimed_s, job.full_timed_s
        if self.prep is not None and job.untimed_s > 0 and not self._is_duplicate(job):
            # Overlap: the untimed stages run on a spare CPU while the job waits its turn.
            with self.prep.request() as slot:
                yield slot
                yield self.env.timeout(job.untimed_s / self.setup.speed)
            job.untimed_s = 0.0
        job.ready_s = self.env.now
        self.queue.append(job)
        if not self.arrived.triggered:
            self.arrived.succeed()

    def _pick(self) -> SimJob:
        job = min(self.queue, key=self._order)
        self.queue.remove(job)
        return job

    def _order(self, job: SimJob) -> tuple[float, int]:
        """``judge.queue``'s claim order: fifo by id; fair by the latest start of the job's key
        (never served: first), then by id."""
        if self.setup.policy == "fair":
            return (self.last_start.get(job.fair_key, -math.inf), job.seq)
        return (0.0, job.seq)

    def _is_duplicate(self, job: SimJob) -> bool:
        mode = self.setup.dedupe
        if mode == "recorded":
            return job.recorded_duplicate
        if mode == "on":
            return bool(job.tree) and (job.fair_key, job.tree) in self.judged_trees
        return False

    def _device(self):
        while True:
            if not self.queue:
                if self.arrived.triggered:
                    self.arrived = self.env.event()
                yield self.arrived
                continue
            job = self._pick()
            start = self.env.now
            job.started_s = start
            self.last_start[job.fair_key] = start
            job.duplicate = self._is_duplicate(job)
            if job.duplicate and self.setup.dedupe == "on":
                seconds = self.setup.duplicate_s
            else:
                seconds = job.untimed_s + job.timed_s
            yield self.env.timeout(seconds / self.setup.speed)
            job.finished_s = self.env.now
            self.busy.append((start, job.finished_s))
            if job.tree and not job.duplicate and not job.error:
                self.judged_trees.add((job.fair_key, job.tree))
            assert job.done is not None
            job.done.succeed()


@dataclass(frozen=True)
class Outcome:
    """What the judge did in one simulation, over ``[0, horizon_s]``."""

    horizon_s: float
    devices: int
    evaluations: int
    utilisation: float
    mean_wait_s: float
    p95_wait_s: float
    per_arm: dict[str, int]


def summarise(jobs: Iterable[SimJob], busy: list[tuple[float, float]], horizon_s: float,
              devices: int) -> Outcome:  # fmt: skip
    """Evaluations finished by the horizon, the devices' busy share of it, and the queue waits
    (start minus enqueue) of the agents' jobs that were judged by then."""
    done = [j for j in jobs if j.finished_s is not None and j.finished_s <= horizon_s + 1e-9]
    busy_s = sum(max(0.0, min(e, horizon_s) - max(s, 0.0)) for s, e in busy)
    waits = [j.started_s - j.enqueued_s for j in done if not j.pseudo]  # type: ignore[operator]
    per_arm: dict[str, int] = {}
    for j in done:
        per_arm[j.arm] = per_arm.get(j.arm, 0) + 1
    return Outcome(
        horizon_s=horizon_s,
        devices=devices,
        evaluations=len(done),
        utilisation=busy_s / (devices * horizon_s) if horizon_s > 0 else 0.0,
        mean_wait_s=float(np.mean(waits)) if waits else 0.0,
        p95_wait_s=float(np.percentile(waits, 95)) if waits else 0.0,
        per_arm=per_arm,
    )


def replay(jobs: list[Job], setup: JudgeSetup, horizon_s: float) -> tuple[Outcome, list[SimJob]]:
    """Feed recorded jobs, at their recorded enqueue times with their recorded judge seconds,
    through a simulated judge; jobs still waiting or running at ``horizon_s`` are withdrawn
    (the runner cancels them when the agents' phase ends).

    Returns:
        The summary and every simulated job (``source``: the recorded job).
    """
    env = simpy.Environment()
    pool = JudgePool(env, setup)
    sim_jobs: list[SimJob] = []
    for seq, job in enumerate(sorted(jobs, key=lambda j: j.enqueued_s)):
        if job.enqueued_s > horizon_s:
            continue
        untimed = job.untimed_s
        full_untimed = min(untimed, job.full_s) if job.duplicate_of is None else 0.0
        sim = SimJob(
            seq=seq,
            arm=job.arm,
            fair_key=job.fair_key,
            enqueued_s=job.enqueued_s,
            untimed_s=untimed,
            timed_s=max(job.service_s - untimed, 0.0),
            full_untimed_s=full_untimed,
            full_timed_s=max(job.full_s - full_untimed, 0.0),
            tree=job.tree,
            recorded_duplicate=job.duplicate_of is not None,
            error=job.verdict == "ERROR",
            source=job,
            pseudo=job.pseudo,
        )
        sim_jobs.append(sim)

        def arrive(sim: SimJob = sim):
            yield env.timeout(sim.enqueued_s)
            pool.submit(sim)

        env.process(arrive())
    env.run(until=horizon_s + 1e-9)
    return summarise(sim_jobs, pool.busy, horizon_s, setup.devices), sim_jobs


def simulate(
    fit: Fit,
    seats_per_arm: int | Mapping[str, int],
    setup: JudgeSetup,
    horizon_s: float,
    *,
    seed: int = 0,
    evaluations_per_arm: int | None = None,
) -> Outcome:
    """Run a fitted team of ``seats_per_arm`` seats in every arm (or, a mapping, that many in
    each arm it names; arms it leaves out get none) against a simulated judge.

    ``evaluations_per_arm``: the run's ``budget.evaluations`` (per arm): an arm submits no more
    once it has submitted that many, and the simulated run ends when the last of them is judged
    (or at ``horizon_s``), as the runner ends a run whose evaluations are spent.

    Each seat starts at one of its arm's recorded first-submission times, then loops: submit,
    wait for the verdict, wait a recorded think time. Outcomes (and their untimed and timed
    seconds) are drawn from the arm's recorded ones; a ``duplicate`` draw is judged as one.
    """
    rng = random.Random(seed)
    env = simpy.Environment()
    pool = JudgePool(env, setup)
    sim_jobs: list[SimJob] = []
    submitted: dict[str, int] = dict.fromkeys(fit.arms, 0)

    def seat(pace: ArmPace):
        first = rng.choice(pace.first_s) if pace.first_s else 0.0
        yield env.timeout(first)
        while env.now < horizon_s:
            if evaluations_per_arm is not None:
                if submitted[pace.arm] >= evaluations_per_arm:
                    return
                submitted[pace.arm] += 1
            outcome = rng.choices(list(pace.mix), weights=list(pace.mix.values()))[0]
            untimed, timed = rng.choice(pace.service[outcome])
            job = SimJob(
                seq=len(sim_jobs),
                arm=pace.arm,
                fair_key=pace.arm,
                enqueued_s=env.now,
                untimed_s=untimed,
                timed_s=timed,
                full_untimed_s=untimed,
                full_timed_s=timed,
                recorded_duplicate=outcome == "duplicate",
                error=outcome == "ERROR",
            )
            sim_jobs.append(job)
            yield pool.submit(job)
            yield env.timeout(rng.choice(pace.think_s) if pace.think_s else 0.0)

    for pace in fit.arms.values():
        if not pace.mix:
            continue
        if isinstance(seats_per_arm, Mapping):
            count = int(seats_per_arm.get(pace.arm, 0))
        else:
            count = int(seats_per_arm)
        for _ in range(count):
            env.process(seat(pace))
    env.run(until=horizon_s + 1e-9)
    end = horizon_s
    if evaluations_per_arm is not None and all(j.finished_s is not None for j in sim_jobs):
        end = max((j.finished_s for j in sim_jobs if j.finished_s is not None), default=end)
    return summarise(sim_jobs, pool.busy, end, setup.devices)
