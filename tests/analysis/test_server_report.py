"""A server task's run (judge.kinds.server): the evaluations table carries the latencies the
judge's load generator measured, and the report shows each arm's best with its time to first
token. A real fixture run whose PASSes are given the metrics a server evaluation records."""

from __future__ import annotations

import json
import sqlite3

from analysis.report import build_report
from analysis.tables import build_tables


def _as_server_run(run) -> None:
    with sqlite3.connect(run.path / "events.sqlite") as db:
        rows = db.execute("SELECT job_id, metrics FROM evaluations WHERE verdict = 'PASS'")
        for job, metrics in rows.fetchall():
            m = json.loads(metrics)
            m.update(ttft_ms=1000.0 + job, itl_ms=7.25, requests_s=2.5, baseline_ttft_ms=4000.0)
            db.execute("UPDATE evaluations SET metrics = ? WHERE job_id = ?", (json.dumps(m), job))


def test_server_latencies_reach_the_table_and_the_report(run_factory):
    run = run_factory("server")
    _as_server_run(run)
    tables = build_tables(run.path, git=False)
    ev = tables.evaluations
    passes = ev[ev["verdict"] == "PASS"]
    assert (passes["ttft_ms"] == 1000.0 + passes["job_id"]).all()
    assert ev.loc[ev["verdict"] != "PASS", "ttft_ms"].isna().all()
    text = build_report(run.path).path.read_text()
    section = text.split("## Server metrics", 1)[1].split("\n## ", 1)[0]
    best = tables.arms.set_index("arm")
    for arm in ("swarm", "solo"):
        job = int(
            passes[(passes["arm"] == arm) & (passes["score"] == best.loc[arm, "best_score"])
                   & ~passes["pseudo_agent"]]["job_id"].iloc[0]
        )  # fmt: skip
        assert f"| {arm} |" in section and f"{1000 + job} ms" in section
    assert "4000 ms" in section and "7.2 ms" in section  # 7.25 to one digit (banker's: 7.2)


def test_a_decode_run_has_no_server_section(run_factory):
    run = run_factory("decode")
    assert "## Server metrics" not in build_report(run.path).path.read_text()
