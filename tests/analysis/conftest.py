"""Fixture runs for the analysis tests: a real event log in the runner's schema (written with the
runner's own ``EventLog``, the one place tests may import ``runner``) and, per arm, a real
``submissions.git`` whose ancestry the relays and dead ends are read from.

The default run (100 s, seed 0) holds, by design:

swarm (w1 projections, w2 moe, critic): w1 ``c1`` PASS 120 on the start; w2 ``c2`` PASS 150 on
c1 (a relay); w2 ``c3`` on c2 WRONG prefill_cap with every token correct; w1 ``c4`` REJECT on the
start, then ``c5`` on c4 WRONG mismatch flagged near_tie (one dead direction of two commits,
declared dead on the board); w2 ``c6`` PASS 160 on c2 flagged b1_unresolved (the best). w1
exits once and is restarted; the critic posts once at second 1 and then idles.

Its event log has an empty ``model_calls`` table (scripted seats call no model);
``vary(model_calls=True)`` records a proxied run's calls (see :func:`_model_calls`) and
``vary(no_model_calls_table=True)`` drops the table, as in a log written before the proxy.

solo (w1): ``s1`` PASS 110 on the start; ``s2`` PASS 105 on s1 (slower, never built on: a dead
end); ``s3`` PASS 140 on s1 (the best); ``s4`` submitted but never evaluated.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from isolation.model_proxy import ModelCall
from judge.verdict import Evaluation, Verdict
from runner.events import EventLog

T0 = 1_800_000_000.0
RUN_S = 100.0
BASELINES = [100.0, 96.0, 104.0, 100.0, 98.0, 102.0, 100.0]


@dataclass
class FixtureRun:
    """A fixture run directory and the commits it holds, by label."""

    path: Path
    commits: dict[str, str] = field(default_factory=dict)
    start: str = ""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


class _Repo:
    """A scratch clone whose commits are pushed into the arm's bare submissions.git."""

    def __init__(self, work: Path, bare: Path, start_files: dict[str, str]) -> None:
        self.work, self.bare = work, bare
        bare.mkdir(parents=True)
        _git(bare, "init", "-q", "--bare")
        work.mkdir(parents=True)
        _git(work, "init", "-q", "-b", "master")
        _git(work, "config", "user.email", "t@t")
        _git(work, "config", "user.name", "t")
        self.start = self.commit(None, start_files, "task template")

    def commit(self, parent: str | None, files: dict[str, str], message: str) -> str:
        if parent:
            _git(self.work, "checkout", "-q", parent)
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "-qm", message)
        return _git(self.work, "rev-parse", "HEAD")

    def push(self, sha: str, agent: str, n: int) -> None:
        _git(self.work, "push", "-q", str(self.bare), f"{sha}:refs/submissions/{agent}/{n}")


ENGINE = """def attention(x):
    return x


def moe(x):
    return x


def head(x):
    return x
"""


def _engine(**bodies: str) -> str:
    text = ENGINE
    for name, body in bodies.items():
        text = text.replace(f"def {name}(x):\n    return x", f"def {name}(x):\n    {body}")
    return text


def _stamp(events: EventLog, table: str, row_id: int, at: float) -> None:
    # EventLog stamps rows with the wall clock; fixtures need fixed times to assert on.
    with events.connect() as db:
        db.execute(f'UPDATE {table} SET "at" = ? WHERE id = ?', (at, row_id))


def _last_id(events: EventLog, table: str) -> int:
    with events.connect() as db:
        return int(db.execute(f"SELECT max(id) FROM {table}").fetchone()[0])


#: The decode kind's metric as the runner records it in the meta (judge.kinds.Metric.to_dict).
DECODE_METRIC = {
    "name": "tok_s",
    "unit": "tok/s",
    "label": "B=16 aggregate decode tok/s",
    "higher_is_better": True,
}
#: A lower-is-better metric for :func:`vary`'s ``latency`` variant.
LATENCY_METRIC = {
    "name": "latency_ms",
    "unit": "ms",
    "label": "p50 request latency",
    "higher_is_better": False,
}


def _metrics(tok_s: float, base: float) -> dict[str, float]:
    """A PASS's metrics as the decode pipeline writes them: its own keys and the generic ones."""
    return {
        "tok_s": tok_s,
        "score": tok_s,
        "baseline_tok_s": base,
        "baseline_score": base,
        "x_baseline": tok_s / base,
    }


def make_run(root: Path) -> FixtureRun:
    """Write the fixture run described in the module docstring into ``root`` (seed 0,
    finished, no token records; :func:`vary` makes the other variants from a copy)."""
    status, seed = "finished", 0
    root.mkdir(parents=True, exist_ok=True)
    run = FixtureRun(root)
    seats = {
        "swarm": [
            ["w1", "worker", "projections"],
            ["w2", "worker", "moe"],
            ["critic", "critic", None],
        ],
        "solo": [["w1", "worker", None]],
    }
    arms_cfg = {
        arm: {
            "name": arm,
            "start": "master",
            "seats": [{"name": n, "role": r, "direction": d} for n, r, d in rows],
        }
        for arm, rows in seats.items()
    }
    config = {
        "experiment": "swarm_vs_solo",
        "seed": seed,
        "task": {"name": "decode_cpu", "spec": {"target_x_baseline": 2.0}},
        "judge": {"queue_policy": "fair", "near_tie_policy": "wrong", "b1_unresolved": "warn"},
        "budget": {"minutes": RUN_S / 60, "drain_minutes": 0.5},
        "arms": arms_cfg,
    }
    repos = {}
    for arm in seats:
        repos[arm] = _Repo(
            root / "scratch" / arm,
            root / "arms" / arm / "submissions.git",
            {"engine.py": ENGINE, "harness/check.py": "FROZEN = 1\n"},
        )
        (root / "arms" / arm / "arm.json").write_text(json.dumps({"commit": repos[arm].start}))
    run.start = repos["swarm"].start
    events = EventLog(root / "events.sqlite")
    meta = dict(
        run_id=f"fixture-{seed}",
        experiment="swarm_vs_solo",
        seed=seed,
        task="decode_cpu",
        agent_kind="scripted",
        scripted=True,
        arms=["swarm", "solo"],
        seats=seats,
        started_at=T0,
        deadline=T0 + RUN_S,
        budget_minutes=RUN_S / 60,
        start_commit=run.start,
        champion=None,
        isolation="docker",
        status=status,
        config=config,
        metric=DECODE_METRIC,
    )
    if status == "finished":
        meta["ended_at"] = T0 + RUN_S
    events.set_meta(**meta)
    for i, (arm, agent) in enumerate(
        [("swarm", "w1"), ("swarm", "w2"), ("swarm", "critic"), ("solo", "w1")]
    ):
        events.lifecycle(arm, agent, "started", restarts=0)
        _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 0.1 * i)
    events.post("swarm", "critic", "critic", "note", "scripted: no model.")
    _stamp(events, "messages", _last_id(events, "messages"), T0 + 1)

    # (label, arm, agent, parent label, files, verdict, reason, tok_s, flags, submit t, start t,
    #  end t)
    sw, so = repos["swarm"], repos["solo"]
    plan = [
        (
            "c1",
            "swarm",
            "w1",
            None,
            {"engine.py": _engine(attention="return x + 0")},
            Verdict.PASS,
            "",
            120.0,
            {},
            2,
            2,
            12,
        ),
        (
            "s1",
            "solo",
            "w1",
            None,
            {"engine.py": _engine(moe="return x * 1")},
            Verdict.PASS,
            "",
            110.0,
            {},
            3,
            12,
            22,
        ),
        (
            "c2",
            "swarm",
            "w2",
            "c1",
            {"engine.py": _engine(attention="return x + 0", moe="return x - 0")},
            Verdict.PASS,
            "",
            150.0,
            {},
            20,
            22,
            32,
        ),
        (
            "c3",
            "swarm",
            "w2",
            "c2",
            {"engine.py": _engine(attention="return x + 0", moe="return x - 0 + 0")},
            Verdict.WRONG,
            "prefill_cap",
            None,
            {"tokens_correct": True},
            33,
            33,
            38,
        ),
        (
            "s2",
            "solo",
            "w1",
            "s1",
            {"engine.py": _engine(moe="return x * 1", head="return x") + "\n# slower\n"},
            Verdict.PASS,
            "",
            105.0,
            {},
            30,
            38,
            48,
        ),
        (
            "c4",
            "swarm",
            "w1",
            None,
            {"harness/check.py": "FROZEN = 2\n"},
            Verdict.REJECT,
            "frozen_zone",
            None,
            {},
            45,
            48,
            48.1,
        ),
        (
            "c5",
            "swarm",
            "w1",
            "c4",
            {"engine.py": _engine(head="return x[::-1]")},
            Verdict.WRONG,
            "mismatch",
            None,
            {"near_tie": True},
            50,
            50,
            55,
        ),
        (
            "c6",
            "swarm",
            "w2",
            "c2",
            {"engine.py": _engine(attention="return x + 0", moe="return x - 1 + 1")},
            Verdict.PASS,
            "",
            160.0,
            {"b1_unresolved": True},
            56,
            56,
            66,
        ),
        (
            "s3",
            "solo",
            "w1",
            "s1",
            {"engine.py": _engine(moe="return x * 1", head="return x * 1")},
            Verdict.PASS,
            "",
            140.0,
            {},
            60,
            66,
            76,
        ),
        (
            "s4",
            "solo",
            "w1",
            "s3",
            {"engine.py": _engine(moe="return 1 * x")},
            None,
            "",
            None,
            {},
            95,
            0,
            0,
        ),
    ]
    job, baselines = 100, iter(BASELINES)
    counts: dict[tuple[str, str], int] = {}
    for label, arm, agent, parent, files, verdict, reason, tok_s, flags, t_sub, t0, t1 in plan:
        repo = sw if arm == "swarm" else so
        sha = repo.commit(run.commits.get(parent, repo.start), files, label)
        run.commits[label] = sha
        counts[(arm, agent)] = counts.get((arm, agent), 0) + 1
        repo.push(sha, agent, counts[(arm, agent)])
        sid, _ = events.add_submission(arm, agent, f"{arm}/{agent}/{label}", sha, f"{label} move")
        _stamp(events, "submissions", sid, T0 + t_sub)
        if verdict is None:
            continue
        job += 1
        events.set_job(sid, job)
        metrics = {}
        if tok_s is not None:
            base = next(baselines)
            metrics = _metrics(tok_s, base)
        events.add_evaluation(
            sid,
            Evaluation(
                job_id=job,
                arm=arm,
                agent=agent,
                commit=sha,
                verdict=verdict,
                reason=reason,
                metrics=metrics,
                flags=flags,
                enqueued_at=T0 + t_sub,
                started_at=T0 + t0,
                finished_at=T0 + t1,
            ),
        )
    events.post("swarm", "w1", "worker", "dead_end", "c5 is a dead end", commit=run.commits["c5"])
    _stamp(events, "messages", _last_id(events, "messages"), T0 + 56)
    events.lifecycle("swarm", "w1", "exited", code=0, log_tail="")
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 70)
    events.lifecycle("swarm", "w1", "restarted", restarts=1, reason="exited before the deadline")
    _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 72)
    shutil.rmtree(root / "scratch")
    # What else a run writes that readers use: the exact config, and the runner's summary.
    (root / ".hydra").mkdir()
    (root / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (root / "summary.csv").write_text(
        "arm,agent_kind,evaluations,pass,metric,unit,best_score,best_x_baseline\n"
        "swarm,scripted (no model),6,3,tok_s,tok/s,160.0,1.6327\n"
        "solo,scripted (no model),3,3,tok_s,tok/s,140.0,1.3725\n"
    )
    return run


def vary(
    run: FixtureRun,
    *,
    status: str = "finished",
    seed: int = 0,
    tokens: bool = False,
    solo_prompt: str | None = None,
    rechecks: bool = False,
    model_calls: bool = False,
    no_model_calls_table: bool = False,
    legacy: bool = False,
    latency: bool = False,
    budgets: bool = False,
) -> FixtureRun:
    """Turn a copy of the fixture run into a variant: another status (no ``ended_at`` unless
    finished), another seed and run id, token records, a prompt only the solo arm has, the
    calls of seats on the model proxy, or an event log without a ``model_calls`` table.

    ``legacy``: a record made before kinds owned their metric (no ``metric`` in the meta, no
    ``score``/``baseline_score`` in the metrics). ``latency``: the same numbers read as a
    lower-is-better metric (x_baseline = baseline / score, as such a kind writes it).
    ``budgets``: a matched-budget run (see :func:`_budgets`)."""
    events = EventLog(run.path / "events.sqlite")
    meta = events.meta()
    config = meta["config"]
    config["seed"] = seed
    if solo_prompt is not None:
        config["arms"]["solo"]["prompt"] = solo_prompt
    events.set_meta(status=status, seed=seed, run_id=f"fixture-{seed}", config=config)
    if status != "finished":
        with events.connect() as db:
            db.execute("DELETE FROM meta WHERE key = 'ended_at'")
    if rechecks:
        _rechecks(events, run)
    if tokens:
        for arm, agent, output in (
            ("swarm", "w1", 1200),
            ("swarm", "w2", 800),
            ("solo", "w1", 1000),
        ):
            events.add_tokens(
                arm,
                agent,
                "model-x",
                "session.jsonl",
                input=10,
                cache_read=5,
                cache_write=1,
                output=output,
                reasoning=0,
            )
            _stamp(events, "tokens", _last_id(events, "tokens"), T0 + 90)
    if legacy or latency:
        with events.connect() as db:
            if legacy:
                db.execute("DELETE FROM meta WHERE key = 'metric'")
                db.execute(
                    "UPDATE evaluations SET metrics = json_remove(metrics, '$.score',"
                    " '$.baseline_score')"
                )
            else:
                db.execute(
                    "UPDATE evaluations SET metrics = json_set(metrics, '$.x_baseline',"
                    " json_extract(metrics, '$.baseline_score') / json_extract(metrics,"
                    " '$.score')) WHERE json_extract(metrics, '$.score') IS NOT NULL"
                )
        if latency:
            events.set_meta(metric=LATENCY_METRIC)
    if model_calls:
        _model_calls(events)
    if budgets:
        _budgets(events)
    if no_model_calls_table:
        # Last: opening an EventLog again would create the table anew.
        with events.connect() as db:
            db.execute("DROP TABLE model_calls")
    return run


#: (arm, agent, status, upstream_status, error, start s, end s) of :func:`_model_calls`.
MODEL_CALLS = [
    ("swarm", "w1", 200, 200, "", 5.0, 7.0),
    ("swarm", "w1", 429, 429, "", 10.0, 10.2),  # an outage begins ...
    ("swarm", "w1", 429, 429, "", 20.0, 20.1),
    ("swarm", "w1", 200, 200, "", 40.0, 45.0),  # ... and ends here: 30 s lost
    ("swarm", "w2", 200, 200, "", 3.0, 6.0),
    ("", "", 401, None, "no seat token: the proxy forwards seats' calls only", 4.0, 4.0),
    ("solo", "w1", 200, 200, "", 4.0, 9.0),
    ("solo", "w1", 200, 200, "", 60.0, 66.0),
    # Still failing when the seat's calls end: closed at the call's end, 1 s lost.
    ("swarm", "w2", 502, None, "vendor unreachable: OSError: down", 80.0, 81.0),
]


def _model_calls(events: EventLog) -> None:
    """A run whose seats went through the model proxy (meta ``client.proxy``): swarm/w1 gets
    two 429s then an answer (30 s lost), swarm/w2 one unreachable call at the end (1 s lost),
    solo/w1 only answers, and one call without a seat token is refused."""
    client = {"name": "claude_code", "proxy": True, "network": "proxy"}
    proxy = {"network": "swarmlab-seats-x", "calls": len(MODEL_CALLS), "record_errors": []}
    events.set_meta(client=client, proxy=proxy)
    for arm, agent, status, upstream, error, t0, t1 in MODEL_CALLS:
        events.add_model_call(
            ModelCall(
                arm,
                agent,
                "POST",
                "/v1/messages",
                T0 + t0,
                status=status,
                upstream_status=upstream,
                error=error,
                first_byte_at=T0 + t0 + 0.1 if upstream is not None else None,
                finished_at=T0 + t1,
                bytes_up=1000,
                bytes_down=500 if upstream is not None else 0,
                retry_after="2" if upstream == 429 else "",
            )
        )


#: (arm, agent, start s, output tokens) of :func:`_budgets`' calls (each ends 2 s later).
BUDGET_CALLS = [
    ("swarm", "w1", 8.0, 1500),
    ("swarm", "w2", 28.0, 1000),
    ("solo", "w1", 15.0, 700),
    ("swarm", "w2", 60.0, 800),
    ("solo", "w1", 70.0, 500),
]
#: The budgets :func:`_budgets` records (``runner.config.budgets_meta``'s shape).
BUDGETS = {
    "minutes": RUN_S / 60,
    "output_tokens": {"limit": 3000, "scope": "per_arm"},
    "evaluations": {"limit": 6, "scope": "per_arm"},
    "match": "output_tokens",
}


def _budgets(events: EventLog) -> None:
    """A run under matched budgets (3,000 output tokens and 6 evaluations per arm) whose seats
    went through the proxy: swarm spends 3,300 tokens (its pool ran out at second 62: w1 and w2
    get ``budget_spent`` events, the critic made no call) and its 6 evaluations; solo spends
    1,200 tokens and 3 evaluations, ending with both budgets unspent."""
    client = {"name": "claude_code", "proxy": True, "network": "proxy"}
    events.set_meta(client=client, budgets=BUDGETS, ended_by="deadline")
    for arm, agent, t0, output in BUDGET_CALLS:
        events.add_model_call(
            ModelCall(
                arm, agent, "POST", "/v1/messages", T0 + t0, status=200, upstream_status=200,
                first_byte_at=T0 + t0 + 0.1, finished_at=T0 + t0 + 2, bytes_up=1000,
                bytes_down=500, model="model-x", input=100, cache_read=50, cache_write=0,
                output=output, reasoning=0,
            )
        )  # fmt: skip
    # Fair use (isolation.fair_use): one of solo's calls waited 3.5 s for its slot, one of
    # swarm/w2's was answered 429 past the bound (never forwarded).
    fair = {"concurrency": 2, "rpm": 20.0, "max_wait_s": 60.0}
    events.set_meta(proxy={"network": "swarmlab-seats-x", "calls": 6, "fair_use": fair})
    with events.connect() as db:
        db.execute("UPDATE model_calls SET queued_s = 3.5 WHERE arm = 'solo' AND id = ("
                   "SELECT min(id) FROM model_calls WHERE arm = 'solo')")  # fmt: skip
    events.add_model_call(
        ModelCall(
            "swarm", "w2", "POST", "/v1/messages", T0 + 50, status=429, finished_at=T0 + 110,
            error="fair use: swarmlab fair use: ...", retry_after="3", queued_s=60.0,
        )
    )  # fmt: skip
    for agent in ("w1", "w2"):
        events.lifecycle(
            "swarm", agent, "budget_spent", budget="output_tokens", spent=3300, limit=3000
        )
        _stamp(events, "lifecycle", _last_id(events, "lifecycle"), T0 + 62)


def _rechecks(events: EventLog, run: FixtureRun) -> None:
    """What runner/rejudge.py adds after the deadline: each arm's best re-judged twice
    (``confirm``: swarm PASS 150 and 155; solo PASS 138 then WRONG) and its start re-judged
    twice (``baseline``: x 1.0, 0.96, 1.04, 1.0 over the arms)."""
    events.set_meta(rechecks_started_at=T0 + RUN_S, ended_at=T0 + RUN_S + 40)
    plan = [
        ("swarm", "confirm", run.commits["c6"], Verdict.PASS, 150.0),
        ("solo", "confirm", run.commits["s3"], Verdict.PASS, 138.0),
        ("swarm", "baseline", run.start, Verdict.PASS, 100.0),
        ("solo", "baseline", run.start, Verdict.PASS, 96.0),
        ("swarm", "confirm", run.commits["c6"], Verdict.PASS, 155.0),
        ("solo", "confirm", run.commits["s3"], Verdict.WRONG, None),
        ("swarm", "baseline", run.start, Verdict.PASS, 104.0),
        ("solo", "baseline", run.start, Verdict.PASS, 100.0),
    ]
    for i, (arm, agent, sha, verdict, tok_s) in enumerate(plan):
        job, t = 200 + i, T0 + RUN_S + 4 * i
        sid, _ = events.add_submission(arm, agent, f"{arm}/{agent}/recheck-{i}", sha, "re-judged")
        _stamp(events, "submissions", sid, t)
        events.set_job(sid, job)
        metrics = {} if tok_s is None else _metrics(tok_s, 100.0)
        events.add_evaluation(sid, Evaluation(
            job_id=job, arm=arm, agent=agent, commit=sha, verdict=verdict, metrics=metrics,
            enqueued_at=t, started_at=t, finished_at=t + 4,
        ))  # fmt: skip


@pytest.fixture(scope="session")
def template_run(tmp_path_factory: pytest.TempPathFactory) -> FixtureRun:
    """Built once per session (git and SQLite take about a second); tests get copies."""
    return make_run(tmp_path_factory.mktemp("template") / "run")


def copy_run(template: FixtureRun, root: Path, **options: object) -> FixtureRun:
    """A copy of the template run at ``root``, varied by ``options`` (see :func:`vary`)."""
    shutil.copytree(template.path, root)
    run = FixtureRun(root, dict(template.commits), template.start)
    return vary(run, **options) if options else run  # type: ignore[arg-type]


@pytest.fixture
def run_factory(tmp_path: Path, template_run: FixtureRun) -> Callable[..., FixtureRun]:
    """``run_factory(name, **options)``: a fresh copy of the fixture run under ``tmp_path``."""

    def factory(name: str = "run", **options: object) -> FixtureRun:
        return copy_run(template_run, tmp_path / name, **options)

    return factory


@pytest.fixture
def fixture_run(run_factory: Callable[..., FixtureRun]) -> FixtureRun:
    return run_factory()


@pytest.fixture
def sweep_dir(tmp_path: Path, template_run: FixtureRun) -> Path:
    """A Hydra multirun folder: seeds 1 and 2 finished, and a job that failed before its run."""
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    copy_run(template_run, root / "seed=1", seed=1)
    copy_run(template_run, root / "seed=2", seed=2)
    failed = root / "seed=3" / ".hydra"
    failed.mkdir(parents=True)
    (failed / "config.yaml").write_text("seed: 3\n")
    return root
