"""One experiment's lifecycle: compose → judge up → preflight → workspaces → launch →
supervise → collect. A run killed at any point can be resumed from its directory alone
(``python -m runner resume=DIR``): every submission is on disk or in the event log."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from omegaconf import DictConfig, OmegaConf

from arms.directions import direction_texts, seat_directions
from isolation import DockerUnavailable, ImageMissing, docker_client
from isolation.backends import AgentSpec, get_backend, with_task
from isolation.gitutil import template_repo
from isolation.quota import QuotaPlan, QuotaWatch, quota_setting_problem
from isolation.taskenv import task_runtime
from isolation.workspace import ArmWorkspace, Seat, load_arm, prepare_arm, release_quotas
from judge import (
    JudgeClient,
    JudgeHome,
    JudgeQueue,
    JudgeRefused,
    JudgeService,
    agent_cpuset,
    get_kind,
    run_metric,
    save_judge_config,
)
from runner.config import budgets_meta, evaluations_budget
from runner.events import EventLog
from runner.gateway import Gateway, fair_key
from runner.progress import Progress
from runner.rejudge import plan_rejudgements, queue_rejudgements
from runner.seats import (
    MOVES_MOUNT,
    SeatProxy,
    client_meta,
    plays_moves,
    real_seat,
    record_prompts,
    scripted_env,
    seat_problem,
    seat_proxy,
    task_moves,
)
from runner.settings import settings_problems
from runner.summary import format_summary, summarize, write_summary
from runner.supervisor import Supervisor
from runrecord import CHAMPION, REJUDGING_STARTED_AT, rejudging_started_at
from tasks.schema import PROJECT_ROOT, task_root

AGENTS_DIR = PROJECT_ROOT / "agents"
# How a run ends when nobody stopped it: at its deadline, once every arm's judge budget
# (budget.evaluations) was judged, or once every seat's token or cost budget was spent
# ("budget"). Each drains, re-judges and counts as finished.
NORMAL_ENDS = ("deadline", "evaluations", "budget")
# SIGTERM in a SLURM job: SLURM preempts, cancels or ends a job that way (then SIGKILL after
# its grace time), and requeues a preempted one in the same folder. The agents are stopped and
# the run is left unfinished (nothing withdrawn, no summary), so the requeued job, or
# `python -m runner resume=DIR`, continues it with nothing lost. Exit status 143.
PREEMPTED = "preempted"
PREEMPTED_STATUS = 143


def clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class RunRefused(Exception):
    """The run cannot start (no engine, bad settings, bad from_run): one clear message."""


# What stops a run with one line and exit status 2: the runner's refusals, the judge's (a
# failed preflight, settings it would refuse, a service that keeps dying), no Docker engine,
# an image swarmlab cannot make (never pulled).
REFUSED = (RunRefused, JudgeRefused, DockerUnavailable, ImageMissing)


def judge_app_config(cfg: DictConfig) -> DictConfig:
    app = OmegaConf.create({"task": cfg.task, "judge": cfg.judge})
    # The run's seed picks the judge's stored correctness sets (a sweep over seeds varies them).
    app.judge.sets_seed = int(cfg.get("seed") or 0)
    return app


def judge_client(cfg: DictConfig) -> JudgeClient:
    """The judge of this run's task and judge settings, saying what it does on stderr."""
    return JudgeClient(judge_app_config(cfg), say)


def champion(from_run: Path) -> tuple[Path, str, dict[str, Any]]:
    """The best PASS of a finished run by its metric: (its arm's submission repo, commit,
    evaluation)."""
    db = from_run / "events.sqlite"
    if not db.is_file():
        raise RunRefused(f"from_run={from_run} is not a run directory (no events.sqlite)")
    log = EventLog(db)
    metric = run_metric(log.meta())
    scored = [
        (score, e)
        for e in log.table("evaluations")
        if e["verdict"] == "PASS" and (score := metric.score(json.loads(e["metrics"]))) is not None
    ]
    if not scored:
        raise RunRefused(f"from_run={from_run} has no PASS to continue from")
    top, best = scored[0]
    for score, e in scored[1:]:
        if metric.better(score, top):  # the first of equals, as the summary's best_pass
            top, best = score, e
    return from_run / "arms" / best["arm"] / "submissions.git", best["commit_sha"], best


def agent_specs(
    cfg: DictConfig,
    run_id: str,
    arms: list[ArmWorkspace],
    deadline: float,
    home: JudgeHome,
    proxied: SeatProxy | None = None,
) -> list[AgentSpec]:
    mounts = {
        str(AGENTS_DIR): "/opt/swarmlab/agents",
        str(AGENTS_DIR / "tools"): "/opt/swarmlab/bin",
    }
    # The scripted agent's move library and task card; a real agent sees neither.
    moves = task_moves(cfg.task) if plays_moves(cfg) else None
    card = scripted_env(cfg) if moves is not None else {}
    if moves is not None:
        mounts[str(moves)] = MOVES_MOUNT
    root = os.geteuid() == 0
    specs = []
    for arm in arms:
        for name, ws in arm.agents.items():
            fill = dict(
                python=sys.executable,
                role=ws.role,
                direction=ws.direction or "any",
                seed=str(cfg.seed),
                deadline=f"{deadline:.0f}",
                agent=name,
            )
            command = [part.format(**fill) for part in cfg.agent.command]
            specs.append(
                AgentSpec(
                    arm=arm.name,
                    agent=name,
                    workspace=ws,
                    arm_workspace=arm,
                    command=command,
                    env={
                        "SWARMLAB_AGENT": name,
                        "SWARMLAB_ARM": arm.name,
                        "SWARMLAB_ROLE": ws.role,
                        "SWARMLAB_DEADLINE": f"{deadline:.0f}",
                        **card,
                    },
                    image=cfg.agent.image,
                    cpuset=agent_cpuset(cfg.isolation.cpuset, cfg.judge.sandbox.cpuset),
                    memory=cfg.isolation.memory,
                    pids_limit=cfg.isolation.pids_limit,
                    network=cfg.agent.network,
                    extra_mounts=mounts,
                    user="1000:1000" if root else f"{os.getuid()}:{os.getgid()}",
                    labels={"org.swarmlab.run": run_id, "org.swarmlab.arm": arm.name},
                    # A start is refused if any mount would reach the judge's private folder.
                    hidden_paths=[str(home.root)],
                )
            )
    # agent=claude_code|codex|gemini: the seat's CLI, prompt, key and resume (runner/seats.py).
    # The task's image and assets, and the same /build as the judge's sandbox (isolation.taskenv).
    runtime = task_runtime(cfg.task, task_root(cfg.task))
    return [
        with_task(real_seat(cfg, spec, spec.arm_workspace, deadline, proxied=proxied), runtime)
        for spec in specs
    ]


class Run:
    """A run directory and everything needed to drive it."""

    def __init__(self, cfg: DictConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.events = EventLog(run_dir / "events.sqlite")
        self.stopping: str | None = None
        # SIGINT/SIGTERM received: the first stops the run in order, a later one only
        # makes that stop faster (agents get no grace period), never cuts it short.
        self.signals = 0
        self._handlers: dict[int, Any] = {}

    # -- start ---------------------------------------------------------------------------

    def start(self) -> int:
        cfg = self.cfg
        # Checked before Hydra made the folder too (runner.settings.CheckSettings); here for
        # a sweep's swept values and for callers that compose the config themselves.
        problems = settings_problems(cfg)
        if problems:
            raise RunRefused("bad settings: " + "; ".join(problems))
        backend = get_backend(cfg.isolation.backend)
        problem = seat_problem(cfg)  # a missing key or CLI: before the judge or any container
        if problem:
            raise RunRefused(problem)
        source, commit, champ = self.starting_point()  # a bad from_run fails before any work
        quota = QuotaPlan.here(cfg.isolation.disk_quota_mb)  # a seat's disk: isolation/quota.py
        if quota_setting_problem(quota.mb):
            raise RunRefused(str(quota_setting_problem(quota.mb)))
        if quota.warning():
            say(str(quota.warning()))
        home = self.judge_up()
        run_id = f"{cfg.experiment}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        arms = []
        for arm in cfg.arms.values():
            # Workers without a direction of their own take the task's, in order.
            directions = seat_directions(cfg.task, arm)
            seats = [Seat(s.name, s.role, d) for s, d in zip(arm.seats, directions, strict=True)]
            uid = 1000 if os.geteuid() == 0 else None
            # A private arm's seats each get a board and submission repo of their own.
            visibility = str(arm.get("visibility") or "shared")
            arms.append(
                prepare_arm(
                    self.run_dir, arm.name, source, commit, seats, uid, uid, quota, visibility
                )
            )
        self.events.set_meta(disk_quota=quota.meta())
        started = time.time()
        deadline = started + 60 * cfg.budget.minutes
        self.events.set_meta(
            run_id=run_id,
            experiment=cfg.experiment,
            seed=cfg.seed,
            task=cfg.task.name,
            # What the scores count: summary, re-judging and analysis read it from here.
            metric=get_kind(cfg.task.kind).metric(cfg.task).to_dict(),
            agent_kind=cfg.agent.kind,
            scripted=bool(cfg.agent.scripted),
            arms=[a.name for a in arms],
            seats={
                a.name: [[s.name, s.role, s.direction] for s in a.agents.values()] for a in arms
            },
            visibility={a.name: a.visibility for a in arms},
            started_at=started,
            deadline=deadline,
            budget_minutes=cfg.budget.minutes,
            budgets=budgets_meta(cfg),
            start_commit=commit,
            champion=champ,
            judge_home=str(home.root),
            isolation=cfg.isolation.backend,
            status="running",
            config=OmegaConf.to_container(cfg, resolve=True),
        )
        if cfg.agent.get("client"):  # each seat's prompt: hashes here, text beside its folders
            self.events.set_meta(
                client=client_meta(cfg),
                prompts=record_prompts(arms, deadline, direction_texts(cfg.task)),
            )
        say(f"run {run_id}: {', '.join(a.name for a in arms)} until {clock(deadline)}")
        try:
            return self.supervise(backend, home, arms, run_id, deadline, first_event="started")
        finally:
            self.restore_signals()

    def judge_up(self) -> JudgeHome:
        cfg = self.cfg
        try:
            docker_client().close()
        except DockerUnavailable as exc:
            raise RunRefused(
                f"{exc} The judge always scores in containers, so it needs the engine whatever"
                " the isolation; isolation=local only takes the agents out of containers"
                " (development only)."
            ) from None
        return judge_client(cfg).make_ready(cfg.judge.preflight)

    def starting_point(self) -> tuple[Path, str, dict[str, Any] | None]:
        cfg = self.cfg
        starts = {a.start for a in cfg.arms.values()}
        if "champion" in starts:
            if not cfg.from_run:
                raise RunRefused("a continuation needs from_run=DIR (a finished run's directory)")
            repo, commit, best = champion(Path(cfg.from_run).resolve())
            say(
                f"continuation: every agent starts from {commit[:10]}"
                f" ({best['arm']}/{best['agent']})"
            )
            return (
                repo,
                commit,
                {
                    "commit": commit,
                    "arm": best["arm"],
                    "agent": best["agent"],
                    "metrics": json.loads(best["metrics"]),
                },
            )
        repo, commit = template_repo(
            task_root(cfg.task) / cfg.task.template, self.run_dir / "template"
        )
        return repo, commit, None

    # -- the loop ------------------------------------------------------------------------

    def supervise(
        self,
        backend: Any,
        home: JudgeHome,
        arms: list[ArmWorkspace],
        run_id: str,
        deadline: float,
        first_event: str,
    ) -> int:
        cfg = self.cfg
        link = JudgeService(
            home,
            cfg.judge.device,
            save_judge_config(cfg.task, cfg.judge, self.run_dir / "judge.yaml"),
            self.run_dir / "judge-service.log",
        )
        # Every job this run queues names its settings; only a worker with them judges it.
        queue = link.open_queue(cfg.judge.queue_policy)
        # A resumed run takes over what its killed runner queued: their turns count again.
        queue.adopt([s["job_id"] for s in self.events.pending_jobs()])
        recorded = self.events.meta().get("judge_settings_hash")
        if recorded and recorded != link.settings:
            say(f"judge: this run was judged under settings {recorded}, now {link.settings}")
        self.events.set_meta(judge_settings_hash=recorded or link.settings)
        link.start()
        try:
            gateway = Gateway(
                self.events,
                queue,
                arms,
                max_submissions_per_agent=cfg.budget.max_submissions_per_agent,
                evaluations_per_arm=evaluations_budget(cfg, "per_arm"),
                evaluations_per_seat=evaluations_budget(cfg, "per_seat"),
                fetch_grace=0.0,  # a seat's commit is copied off this loop: nobody waits on it
            )
            progress = Progress(self.events, queue, [a.name for a in arms], cfg.progress_every_s)
            quotas = QuotaWatch.for_arms(self.events, arms)
            # Real seats reach their vendor only through the run's model proxy (runner/seats.py).
            with seat_proxy(cfg, self.events, run_id) as proxied:
                specs = agent_specs(cfg, run_id, arms, deadline, home, proxied)
                ledger = proxied.ledger if proxied is not None else None
                supervisor = Supervisor(backend, self.events, specs, budgets=ledger)
                if first_event == "started":
                    self.remeasure_champion(arms, queue)
                self.install_signals()
                backend.cleanup(run_id)
                reason = "deadline"
                try:
                    supervisor.start_all(first_event)
                    while not self.stopping and time.time() < deadline:
                        gateway.poll()
                        supervisor.check()
                        ends = gateway.arms_ended(supervisor.spent_seats())
                        if all(ends.values()):
                            # Each arm ended on its judge budget, its seats' token or cost
                            # budgets, or a mix: nothing more any arm does can be scored.
                            if all(why == "evaluations" for why in ends.values()):
                                reason = "evaluations"
                                say("every arm's judge budget is spent: stopping the agents")
                            else:
                                reason = "budget"
                                say(
                                    "every arm's budget is spent ("
                                    + ", ".join(f"{a}: {w}" for a, w in sorted(ends.items()))
                                    + "): the run ends"
                                )
                            break
                        quotas.check()
                        link.ensure_running()
                        progress.maybe_print(deadline)
                        time.sleep(0.25)
                    reason = self.stopping or reason
                finally:
                    supervisor.stop_all(self.stopping or reason, grace_s=self.stop_grace_s)
                    backend.cleanup(run_id)
            if reason == PREEMPTED:
                self.events.set_meta(preempted_at=time.time())
                say(
                    "stopped by SLURM (SIGTERM): the agents are stopped and the run is left"
                    f" unfinished; a requeued job or `python -m runner resume={self.run_dir}`"
                    " continues it"
                )
                return PREEMPTED_STATUS
            self.events.set_meta(ended_by=reason)
            self.drain(gateway, queue, link, reason)
            if reason in NORMAL_ENDS:
                self.rejudge(gateway, queue, link, arms)
            return self.collect(reason, link, queue)
        except Exception:
            # A run that fails leaves no judge service behind that it started and nobody uses.
            link.stop_when_idle(queue)
            raise
        finally:
            for problem in release_quotas(arms):  # the seats' files back in plain folders
                say(f"WARNING: seat quota not released: {problem}")

    def remeasure_champion(self, arms: list[ArmWorkspace], queue: JudgeQueue) -> None:
        """A continuation's champion is judged again first, in this run, so its gain is
        measured against the champion on the same machine and day, not an old number."""
        champ = self.events.meta().get("champion")
        if not champ:
            return
        for arm in arms:
            if self.cfg.arms[arm.name].start != "champion":
                continue
            sid, job = self.events.add_submission(
                arm.name,
                CHAMPION,
                f"{arm.name}/{CHAMPION}/remeasure",
                champ["commit"],
                "the starting champion, re-measured by the judge",
            )
            if job is None:
                job = queue.enqueue(
                    arm=arm.name,
                    agent=CHAMPION,
                    repo=str(arm.origin),
                    commit=champ["commit"],
                    label=CHAMPION,
                    fair_key=fair_key(str(self.events.meta().get("run_id") or ""), arm.name),
                    # A measurement of this run's own: never another run's verdict reused.
                    rejudge=True,
                )
                self.events.set_job(sid, job)

    def install_signals(self) -> None:
        """SIGINT and SIGTERM stop the run in order: agents stopped, queued jobs withdrawn,
        status and summary written. A second or third signal never interrupts that cleanup
        (an exception there left containers running and the run marked running): it only
        takes the agents' grace period away."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.signals += 1
            if self.signals == 1 and signum == signal.SIGTERM and os.environ.get("SLURM_JOB_ID"):
                self.stopping = self.stopping or PREEMPTED
                say("SIGTERM from SLURM: stopping the agents; the run stays resumable")
            elif self.signals == 1:
                self.stopping = self.stopping or "interrupted"
                say(
                    "stopping: agents are being stopped; the results so far will be written"
                    " (Ctrl-C again: stop the agents without a grace period)"
                )
            elif self.signals == 2:
                say("stopping faster: agents are killed at once; the results are still written")
            else:
                say("still stopping: the results so far are being written")

        for signum in (signal.SIGINT, signal.SIGTERM):
            self._handlers.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, on_signal)

    def restore_signals(self) -> None:
        """The handlers from before :meth:`install_signals`: a run's handler does not outlive
        it (the next job of a sweep would otherwise take a Ctrl-C for the finished run's)."""
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._handlers.clear()

    def stop_grace_s(self) -> float:
        """Seconds an agent gets to exit after SIGTERM: none once a second signal came."""
        return 0.0 if self.signals > 1 else 5.0

    def drain(self, gateway: Gateway, queue: JudgeQueue, link: JudgeService, reason: str) -> None:
        """Let submissions made before the end be judged, for at most drain_minutes."""
        limit = time.time() + (60 * self.cfg.budget.drain_minutes if reason in NORMAL_ENDS else 0)
        # Submissions asked for before the end whose commits are still being copied.
        gateway.settle() if reason in NORMAL_ENDS else gateway.poll()
        # Ctrl-C during the drain ends it: what is still queued is withdrawn.
        while self.events.pending_jobs() and time.time() < limit and not self.stopping:
            link.ensure_running()
            gateway.poll()
            time.sleep(0.5)
        gateway.poll()
        left = [s["job_id"] for s in self.events.pending_jobs()]
        cancelled = queue.cancel(left, f"run ended ({reason})")
        if left:
            say(
                f"{len(left)} submission(s) not evaluated before the end"
                f" ({len(cancelled)} withdrawn from the judge's queue)"
            )

    def rejudge(
        self, gateway: Gateway, queue: JudgeQueue, link: JudgeService, arms: list[ArmWorkspace]
    ) -> None:
        """Judge each arm's best and its starting commit again, all arms alike."""
        # A run saved before the word was settled names the node `confirm` (resumed as saved).
        rejudging = self.cfg.get("rejudge") or self.cfg.confirm
        if self.stopping:  # Ctrl-C before the phase began: nothing is queued for it
            return
        plan = plan_rejudgements(self.events, arms, rejudging.runs, rejudging.baseline_runs)
        if not plan:
            return
        if not rejudging_started_at(self.events.meta()):
            self.events.set_meta(**{REJUDGING_STARTED_AT: time.time()})
        queue_rejudgements(self.events, queue, plan)
        say(
            f"re-judging each arm's best ({rejudging.runs}x) and the starting commit"
            f" ({rejudging.baseline_runs}x): {len(plan)} evaluations,"
            f" at most {rejudging.max_minutes:g} min"
        )
        limit = time.time() + 60 * rejudging.max_minutes
        while self.events.pending_jobs() and time.time() < limit and not self.stopping:
            link.ensure_running()
            gateway.poll()
            time.sleep(0.5)
        gateway.poll()
        left = [s["job_id"] for s in self.events.pending_jobs()]
        if left:
            queue.cancel(left, "re-judging phase ended")
            say(f"{len(left)} re-judgement(s) not finished in time (withdrawn)")

    def collect(self, reason: str, link: JudgeService, queue: JudgeQueue) -> int:
        ended = time.time()
        self.events.set_meta(status="finished" if reason in NORMAL_ENDS else reason, ended_at=ended)
        rows = summarize(self.events, self.run_dir)
        write_summary(rows, self.run_dir / "summary.csv")
        # What is still pending now is never recorded: withdrawn, even from the judge's hands.
        link.stop_when_idle(queue, [s["job_id"] for s in self.events.pending_jobs()])
        print(format_summary(rows))
        print(f"results: {self.run_dir}")
        return 0 if reason in NORMAL_ENDS else 130


def print_plan(cfg: DictConfig) -> int:
    """``plan=DIR``: print the planner's recommendation for this run (a simulation from the
    finished runs in DIR) before anything starts; 2 when DIR holds no finished run."""
    from analysis.plan.launch import recommend  # only a run that asks for a plan needs it

    workers = {
        name: sum(1 for seat in arm.seats if seat.role != "critic")
        for name, arm in (cfg.get("arms") or {}).items()
    }
    try:
        text = recommend(
            [Path(str(cfg.plan))],
            minutes=float(cfg.budget.minutes),
            policy=str(cfg.judge.queue_policy),
            workers=workers,
        )
    except ValueError as exc:
        say(f"runner: plan={cfg.plan}: {exc}")
        return 2
    say(text)
    return 0


def start_experiment(cfg: DictConfig, run_dir: Path) -> int:
    """Run a composed experiment in ``run_dir``; returns the exit status."""
    if cfg.get("plan") and (status := print_plan(cfg)):
        return status
    try:
        run = Run(cfg, run_dir)  # the event log exists from here: the view can read it
        from analysis.view.cli import beside  # the view's own process reads the run

        with beside(run_dir, bool(cfg.get("view", False))):
            return run.start()
    except REFUSED as exc:
        say(f"runner: {exc}")
        return 2
    except KeyboardInterrupt:  # before any agent started (judge setup, preflight)
        say("runner: interrupted before any agent started")
        return 130


def resume_experiment(run_dir: Path) -> int:
    """Continue a run that was killed: same arms, same deadline, no submission lost."""
    saved = run_dir / ".hydra" / "config.yaml"
    db = run_dir / "events.sqlite"
    if not saved.is_file() or not db.is_file():
        say(f"runner: {run_dir} is not a run directory (no .hydra/config.yaml or events.sqlite)")
        return 2
    cfg = OmegaConf.load(saved)
    run = Run(cfg, run_dir)  # type: ignore[arg-type]
    meta = run.events.meta()
    if meta.get("status") != "running":
        say(f"runner: {run_dir} ended ({meta.get('status')}); nothing to resume")
        return 2
    problem = seat_problem(cfg)  # type: ignore[arg-type]
    if problem:
        say(f"runner: {problem}")
        return 2
    try:
        backend = get_backend(cfg.isolation.backend)
        home = judge_client(cfg).set_up()  # type: ignore[arg-type]
        arms = [load_arm(run_dir, name) for name in meta["arms"]]
        for arm in arms:
            for agent in arm.agents:
                run.events.lifecycle(arm.name, agent, "resumed", after="runner restart")
        say(f"resuming {meta['run_id']} until {clock(meta['deadline'])}")
        try:
            return run.supervise(
                backend, home, arms, meta["run_id"], float(meta["deadline"]), "restarted"
            )
        finally:
            run.restore_signals()
    except REFUSED as exc:
        say(f"runner: {exc}")
        return 2
    except KeyboardInterrupt:  # before any agent started: the run stays resumable
        say(f"runner: interrupted before any agent started; resume={run_dir} continues it")
        return 130
