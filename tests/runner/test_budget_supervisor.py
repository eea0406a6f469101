"""The supervisor and a spent token budget (``runner.supervisor`` with
``isolation.spending``): a seat whose budget is spent may finish acting on its last reply,
is stopped once it asks the proxy for more (or exits, or its grace is over), gets one
``budget_spent`` event and is never restarted; a resumed run's ledger starts from the calls
already recorded, and a seat spent before the restart is not started again. (The same with
real containers, a real CLI and the real proxy: ``test_budget_docker.py``.)"""

from __future__ import annotations

import json
import time

from isolation.model_proxy import ModelCall
from isolation.spending import PER_ARM, PER_SEAT, Limit, SpendingLedger
from runner import supervisor as supervisor_module
from runner.events import EventLog
from runner.seats import spending_ledger
from runner.supervisor import BUDGET_GRACE_S, Supervisor
from tests.runner.test_seats import FakeBackend, _arms, _cfg, _cli_spec, _spec


def _usage(arm: str, agent: str, output: int, model: str = "claude-sonnet-4-5") -> ModelCall:
    call = ModelCall(arm, agent, "POST", "/v1/messages", time.time(), 200, 200)
    call.model, call.input, call.cache_read, call.cache_write = model, 10, 0, 0
    call.output, call.reasoning = output, 0
    return call


def _events(events: EventLog, name: str) -> list[tuple[str, str, dict]]:
    rows = events.table("lifecycle", f"WHERE event='{name}'")
    return [(r["arm"], r["agent"], json.loads(r["detail"])) for r in rows]


def test_a_spent_seat_is_stopped_when_it_asks_for_more_and_never_restarted(tmp_path):
    run_dir, (_, solo) = _arms(tmp_path)
    events = EventLog(run_dir / "events.sqlite")
    ledger = SpendingLedger([Limit("output_tokens", 100, PER_SEAT)])
    ledger.add_seat("tok", "solo", "w1")
    backend = FakeBackend()
    records = solo.agents["w1"].notes / ".claude" / "projects"
    sup = Supervisor(backend, events, [_cli_spec(solo, records)], budgets=ledger)
    sup.start_all()
    ledger.add("tok", _usage("solo", "w1", 60))
    assert sup.check() == 0 and not sup.all_spent()
    ledger.add("tok", _usage("solo", "w1", 70))  # crosses 100: the call in flight finished
    sup.check()
    # Still acting on its last reply (a tool call, a submit): left alone until it asks again.
    assert backend.handles[-1].alive and _events(events, "budget_spent") == []
    ledger.note_refused("solo", "w1", "output_tokens")  # the proxy answered its next call 429
    sup.check()
    assert backend.handles[-1].stopped and sup.all_spent()
    ((arm, agent, detail),) = _events(events, "budget_spent")
    assert (arm, agent) == ("solo", "w1")
    assert detail == {
        "budget": "output_tokens", "spent": 130, "limit": 100, "scope": PER_SEAT, "restarts": 0,
    }  # fmt: skip
    for _ in range(3):
        assert sup.check() == 0
    assert len(backend.started) == 1 and _events(events, "restarted") == []
    sup.stop_all("budget")
    assert _events(events, "stopped") == []  # it was stopped already, by its budget


def test_a_spent_seat_that_exits_or_runs_past_its_grace_is_ended(tmp_path, monkeypatch):
    run_dir, (swarm, _) = _arms(tmp_path)
    events = EventLog(run_dir / "events.sqlite")
    ledger = SpendingLedger([Limit("output_tokens", 100, PER_ARM)])
    specs = [_spec(swarm, "w1"), _spec(swarm, "critic")]
    for spec in specs:
        spec.command = ["python", "scripted.py"]
    backend = FakeBackend()
    sup = Supervisor(backend, events, specs, budgets=ledger, min_restart_interval_s=0.0)
    sup.start_all()
    clock = [time.time()]
    monkeypatch.setattr(supervisor_module.time, "time", lambda: clock[0])
    ledger.add_for("swarm", "w1", _usage("swarm", "w1", 150))  # the arm's pool: both seats
    w1, critic = backend.handles
    w1.alive = False  # w1 exits on its own (its CLI reported the quota error)
    sup.check()
    assert [a for _, a, _ in _events(events, "budget_spent")] == ["w1"]
    assert [r["agent"] for r in events.table("lifecycle", "WHERE event='exited'")] == ["w1"]
    assert critic.alive and not sup.all_spent()  # the critic still at its last tool call
    clock[0] += BUDGET_GRACE_S + 1
    sup.check()
    assert critic.stopped and sup.all_spent()
    assert [a for _, a, _ in _events(events, "budget_spent")] == ["w1", "critic"]
    assert len(backend.started) == 2


def test_a_resumed_run_counts_what_was_spent_and_starts_no_spent_seat(tmp_path):
    run_dir, (swarm, solo) = _arms(tmp_path)
    events = EventLog(run_dir / "events.sqlite")
    for call in (_usage("solo", "w1", 90), _usage("solo", "w1", 20), _usage("swarm", "w1", 30)):
        events.add_model_call(call)
    cfg = _cfg("experiment=swarm_vs_solo", "agent=claude_code", "match=output_tokens",
               "budget.output_tokens=100")  # fmt: skip
    ledger = spending_ledger(cfg, events)
    assert ledger is not None
    assert ledger.seat_spent("solo", "w1")["spent"] == 110
    assert ledger.seat_spent("swarm", "w1") is None
    specs = [_spec(solo, "w1"), _spec(swarm, "w1")]
    backend = FakeBackend()
    sup = Supervisor(backend, events, specs, budgets=ledger)
    sup.start_all("restarted")
    assert [(s.arm, s.agent) for s in backend.started] == [("swarm", "w1")]
    assert [(a, s) for a, s, _ in _events(events, "budget_spent")] == [("solo", "w1")]
    # A second restart of the runner: the seat is still not started, and not told twice.
    again = Supervisor(FakeBackend(), events, specs, budgets=ledger)
    again.start_all("restarted")
    assert len(_events(events, "budget_spent")) == 1
    assert again.seats[("solo", "w1")].spent is not None and not again.all_spent()
    # A new seat token of a resumed seat adds to what the seat spent before.
    ledger.add_seat("new-token", "swarm", "w1")
    ledger.add("new-token", _usage("swarm", "w1", 80))
    assert ledger.spent("new-token") == "output_tokens"
