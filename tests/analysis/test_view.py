"""``analysis.view``: the live page's server on fixture runs (real SQLite, real git, a real HTTP
server on loopback), its command line, the export, and the page in a real headless browser.

Every endpoint's numbers are checked against ``analysis.tables``; a run being written (an
evaluation appended to a copy's event log while the server runs) shows on the next poll.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from analysis.tables import build_tables, phase_busy_s
from analysis.view._values import merge, uncovered_s
from analysis.view.cli import export
from analysis.view.data import SECTIONS
from analysis.view.server import ViewState, bind
from runrecord import REJUDGING_AGENTS
from sqlitewal import connect_wal
from tests.analysis.conftest import T0, FixtureRun
from tests.support.browser import severe, shoot, wait_for_sections

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(path: Path) -> Iterator[str]:
    """The view's server on a free loopback port, in a thread; yields its base URL."""
    server, _ = bind(ViewState(path, min_rebuild_s=0, rebuild_factor=0), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as res:
        return json.loads(res.read())


def section(base: str, name: str) -> dict:
    return get(f"{base}/api/{name}")["data"]


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None or pd.isna(b):
        return a is None and (b is None or pd.isna(b))
    return abs(float(a) - float(b)) < 1e-9


def test_every_endpoint_equals_the_tables(run_factory: Callable[..., FixtureRun]) -> None:
    run = run_factory(tokens=True, rechecks=True)
    with connect_wal(run.path / "events.sqlite") as db:
        db.execute(
            "INSERT INTO messages (at, arm, author, role, kind, text) VALUES"
            " (?, 'swarm', 'w2', 'worker', 'note', ?)",
            (T0 + 21, f"built on {run.commits['c1'][:10]}, not on deadbeefcafe"),
        )
    tables = build_tables(run.path)
    arms = tables.arms.set_index("arm")
    with serving(run.path) as base:
        data = {name: section(base, name) for name in SECTIONS}
        detail = get(f"{base}/api/evaluation?job=101")["data"]

    # The race: each arm's last step is the arm's best; the re-judged best is the table's.
    for curve in data["race"]["curves"]:
        last = curve["points"][-1]
        assert close(last["score"], arms.at[curve["arm"], "best_score"])
        assert close(last["x_baseline"], arms.at[curve["arm"], "best_x_baseline"])
        assert last["commit"] == arms.at[curve["arm"], "best_commit"]
    assert [p["score"] for p in data["race"]["curves"][0]["points"]] == [120.0, 150.0, 160.0]
    for row in data["race"]["arms"]:
        assert close(row["rejudged_x_baseline"], arms.at[row["arm"], "rejudged_x_baseline"])
    assert data["race"]["target_x"] == 2.0
    assert data["race"]["time_left_s"] == 0.0  # finished

    # The judge: every evaluation, the queue (the never-judged s4), capacity and busy share.
    judge = data["judge"]
    assert [e["job_id"] for e in judge["evaluations"]] == tables.evaluations["job_id"].tolist()
    assert [e["verdict"] for e in judge["evaluations"]] == tables.evaluations["verdict"].tolist()
    assert [(q["arm"], q["commit"], q["state"]) for q in judge["queue"]] == [
        ("solo", run.commits["s4"], "never judged")
    ]
    for row in judge["capacity"]:
        assert close(row["judge_capacity"], arms.at[row["arm"], "judge_capacity"])
        assert close(row["judge_utilisation"], arms.at[row["arm"], "judge_utilisation"])
    ev = tables.evaluations[~tables.evaluations["agent"].isin(list(REJUDGING_AGENTS))]
    info = tables.runs[0]
    (shared,) = judge["shared"]
    assert close(shared["busy_share"], phase_busy_s(ev, info.run_seconds) / info.run_seconds)
    assert shared["evaluations"] == len(ev)
    # s2 waited from second 30; the judge was idle between c2's end (32) and c3's start (33).
    assert shared["idle_with_work_s"] == pytest.approx(1.0)
    formula = "\n".join(judge["formula"][0]["lines"])
    assert "judge capacity =" in formula and "the one shared judge" in formula

    # The board: every message in order, the dead end linked to c5's verdict.
    board = data["board"]["messages"]
    assert [m["message_id"] for m in board] == tables.messages["message_id"].tolist()
    dead = next(m for m in board if m["kind"] == "dead_end")
    c5 = tables.evaluations.set_index("commit").loc[run.commits["c5"]]
    assert (dead["ref_job"], dead["ref_verdict"]) == (int(c5["job_id"]), "WRONG")

    # A commit named in a message's text links its verdict too.
    said = next(m for m in board if m["text"].startswith("built on"))
    c1 = tables.evaluations.set_index("commit").loc[run.commits["c1"]]
    assert said["mentions"] == [
        {"commit": run.commits["c1"], "job": int(c1["job_id"]), "verdict": "PASS"}
    ]

    # Submissions: every one with its verdict, reason and judge time.
    rows = data["submissions"]["rows"]
    subs = tables.submissions
    assert [r["submission_id"] for r in rows] == subs["submission_id"].tolist()
    assert [r["verdict"] for r in rows] == subs["verdict"].tolist()
    assert [r["reason"] for r in rows] == subs["reason"].tolist()
    by_job = tables.evaluations.set_index("job_id")
    for r in rows:
        if r["job_id"] is not None:
            assert close(r["duration_s"], by_job.at[r["job_id"], "duration_s"])

    # The lineage: relays as the table has them, the champion's path back to the start.
    graphs = {g["arm"]: g for g in data["lineage"]["graphs"]}
    relays = tables.relays
    for arm, g in graphs.items():
        ours = relays[relays["arm"] == arm]
        assert [(r["from_commit"], r["to_commit"]) for r in g["relays"]] == list(
            zip(ours["from_commit"], ours["to_commit"], strict=True)
        )
        assert g["champion"] == arms.at[arm, "best_commit"]
    c = run.commits
    assert graphs["swarm"]["champion_path"] == [c["c6"], c["c2"], c["c1"]]
    assert graphs["solo"]["champion_path"] == [c["s3"], c["s1"]]
    assert {n["commit"] for n in graphs["solo"]["nodes"]} == {c["s1"], c["s2"], c["s3"], c["s4"]}
    assert {"from": c["c4"], "to": c["c5"]} in graphs["swarm"]["edges"]
    # The report's dead-end ledger: w2's c3, w1's c4 -> c5 line, and solo's slower s2.
    swarm_dead = [d["commits"] for d in graphs["swarm"]["dead_ends"]]
    assert swarm_dead == [[c["c3"]], [c["c4"], c["c5"]]]
    assert [d["commits"] for d in graphs["solo"]["dead_ends"]] == [[c["s2"]]]

    # Cost: tokens per seat and arm as the tables sum them.
    tok = tables.tokens.groupby(["arm", "agent"])["output"].sum()
    assert {(s["arm"], s["agent"]): s["output"] for s in data["cost"]["per_seat"]} == {
        k: int(v) for k, v in tok.items()
    }
    for row in data["cost"]["arms"]:
        assert row["output_tokens"] == arms.at[row["arm"], "output_tokens"]
        assert close(row["token_cost_per_gain"], arms.at[row["arm"], "token_cost_per_gain"])

    # One evaluation opened: its verdict and the commit's diff from the arm's repository.
    assert (detail["commit"], detail["verdict"]) == (c["c1"], "PASS")
    assert "engine.py" in detail["diff"] and "return x + 0" in detail["diff"]


def test_a_lower_is_better_metric_races_downwards(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(latency=True)
    tables = build_tables(run.path)
    with serving(run.path) as base:
        race = section(base, "race")
        meta = section(base, "run")
    assert meta["metric"]["higher_is_better"] is False
    arms = tables.arms.set_index("arm")
    swarm = next(c for c in race["curves"] if c["arm"] == "swarm")
    assert [p["score"] for p in swarm["points"]] == [120.0]  # every later latency was higher
    for curve in race["curves"]:
        assert close(curve["points"][-1]["score"], arms.at[curve["arm"], "best_score"])
        assert close(curve["points"][-1]["x_baseline"], arms.at[curve["arm"], "best_x_baseline"])


def test_idle_with_work_is_waiting_time_no_evaluation_covers() -> None:
    assert merge([(0, 2), (1, 3), (5, 6), (4, 4)]) == [(0, 3), (5, 6)]
    assert uncovered_s([(0, 10)], [(1, 2), (3, 4), (9, 12)]) == 7
    assert uncovered_s([(0, 1), (5, 7)], [(0.5, 6)]) == 1.5
    assert uncovered_s([(2, 3)], [(0, 10)]) == 0


def test_cost_shows_each_seats_model_endpoint_outages(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(model_calls=True)
    tables = build_tables(run.path)
    with serving(run.path) as base:
        cost = section(base, "cost")
    lost = {(o["arm"], o["agent"]): o["lost_s"] for o in cost["outages"]}
    assert lost == pytest.approx({("swarm", "w1"): 30.0, ("swarm", "w2"): 1.0, ("solo", "w1"): 0.0})
    arms = tables.arms.set_index("arm")
    for row in cost["arms"]:
        assert close(row["model_lost_s"], arms.at[row["arm"], "model_lost_s"])
        assert row["model_call_failures"] == arms.at[row["arm"], "model_call_failures"]


def test_a_large_run_comes_in_columns_and_the_latest_rows(
    run_factory: Callable[..., FixtureRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    import analysis.view.data as data

    run = run_factory(rechecks=True)
    tables = build_tables(run.path)
    for name, value in (("TIMELINE_BARS", 2), ("MAX_ROWS", 3), ("LINEAGE_NODES", 4)):
        monkeypatch.setattr(data, name, value)
    out = data.build_sections(tables, 0.0)
    judge = out["judge"]
    assert judge["evaluations"] == [] and judge["evaluation_count"] == len(tables.evaluations)
    (timeline,) = judge["timeline"]
    width = timeline["t_max"] / timeline["columns"]
    ev = tables.evaluations
    for lane in timeline["lanes"]:
        mine = (
            ev[ev["pseudo_agent"]]
            if lane["arm"] is None
            else ev[(ev["arm"] == lane["arm"]) & ~ev["pseudo_agent"]]
        )
        # The columns hold every judge second of the lane (rounded to 3 digits per column).
        assert sum(lane["busy"]) * width == pytest.approx(mine["duration_s"].sum(), abs=0.2)
        assert sum(map(sum, lane["verdicts"].values())) == len(mine)
        assert {v: sum(c) for v, c in lane["verdicts"].items()} == mine[
            "verdict"
        ].value_counts().to_dict()
    board, subs = out["board"], out["submissions"]
    assert [m["message_id"] for m in board["messages"]] == tables.messages["message_id"].tolist()[
        -3:
    ]
    assert board["total"] == len(tables.messages)
    assert [r["submission_id"] for r in subs["rows"]] == tables.submissions[
        "submission_id"
    ].tolist()[-3:]
    swarm = next(g for g in out["lineage"]["graphs"] if g["arm"] == "swarm")
    kept = {n["commit"] for n in swarm["nodes"]}
    assert swarm["total_nodes"] == 6 and len(kept) == 4
    assert set(swarm["champion_path"]) <= kept  # the champion's path is always drawn
    assert all(e["from"] in kept and e["to"] in kept for e in swarm["edges"])


def _post(path: Path, texts: list[str]) -> None:
    with connect_wal(path / "events.sqlite") as db:
        for i, text in enumerate(texts):
            db.execute(
                "INSERT INTO messages (at, arm, author, role, kind, text) VALUES"
                " (?, 'solo', 'w1', 'worker', 'note', ?)",
                (T0 + 60 + i, text),
            )


def test_the_board_is_searched_on_the_server_over_every_message(
    run_factory: Callable[..., FixtureRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    import analysis.view.data as data

    monkeypatch.setattr(data, "MAX_ROWS", 3)
    run = run_factory()
    _post(run.path, ["an old NEEDLE", "b", "c", "d"])
    with serving(run.path) as base:
        board = section(base, "board")
        found = get(f"{base}/api/board/search?q=needle")["data"]
        dead = get(f"{base}/api/board/search?q=DEAD%20END&arm=swarm")["data"]
        none = get(f"{base}/api/board/search?q=dead&arm=solo")["data"]
    assert board["total"] == 6 and len(board["messages"]) == 3
    assert "an old NEEDLE" not in [m["text"] for m in board["messages"]]
    assert [m["text"] for m in found["messages"]] == ["an old NEEDLE"]
    assert [m["kind"] for m in dead["messages"]] == ["dead_end"] and dead["matches"] == 1
    assert dead["messages"][0]["ref_verdict"] == "WRONG"
    assert none["messages"] == [] and none["matches"] == 0


def test_a_sweep_serves_every_seed(sweep_dir: Path) -> None:
    tables = build_tables(sweep_dir)
    with serving(sweep_dir) as base:
        run = section(base, "run")
        race = section(base, "race")
    assert run["kind"] == "sweep" and len(run["runs"]) == 2 and len(run["missing_jobs"]) == 1
    assert len(race["curves"]) == 2 * 2  # every seed's curve per arm
    medians = tables.arms.groupby("arm")["best_x_baseline"].median()
    assert race["medians_x"] == pytest.approx(medians.to_dict())


def test_unknown_paths_and_foreign_hosts_are_refused(fixture_run: FixtureRun) -> None:
    with serving(fixture_run.path) as base:
        for path in ("/api/nothing", "/../events.sqlite", "/static/view.js"):
            with pytest.raises(urllib.error.HTTPError) as err:
                get(base + path)
            assert err.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as err:
            get(f"{base}/api/evaluation?job=x")
        assert err.value.code == 400
        # A page elsewhere that rebinds its name to 127.0.0.1 sends its own Host header.
        request = urllib.request.Request(base + "/api/run", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        assert err.value.code == 403


def _view(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "analysis.view", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_folder_that_is_no_run_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "events.sqlite").write_text("not a database")
    proc = _view(str(tmp_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "neither a run directory" in err


def test_a_port_in_use_takes_the_next_free_one(fixture_run: FixtureRun) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _view(str(fixture_run.path), "--port", str(port))
        try:
            said = proc.stdout.readline()  # type: ignore[union-attr]
            address = proc.stdout.readline()  # type: ignore[union-attr]
            assert re.search(rf"port {port}\b[0-9, ]* in use", said)  # (and maybe its next)
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", address)
            assert found and int(found.group(1)) != port
            version = get(f"http://127.0.0.1:{found.group(1)}/api/version")
            assert "events.sqlite" in version["version"]
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def _append_evaluation(path: Path, job_id: int, tok_s: float, at: float) -> None:
    """What the runner writes when the judge answers: a submission and its evaluation, through
    the same WAL connection helper the runner's event log uses."""
    with connect_wal(path / "events.sqlite") as db:
        cur = db.execute(
            "INSERT INTO submissions (at, arm, agent, request_id, commit_sha, message, job_id)"
            " VALUES (?, 'swarm', 'w1', ?, ?, 'live move', ?)",
            (at, f"live-{job_id}", "f" * 40, job_id),
        )
        metrics = {"tok_s": tok_s, "score": tok_s, "baseline_score": 100.0}
        metrics["x_baseline"] = tok_s / 100.0
        db.execute(
            "INSERT INTO evaluations (job_id, submission_id, arm, agent, commit_sha, verdict,"
            " reason, detail, metrics, stages, flags, attempts, enqueued_at, started_at,"
            " finished_at, queue_wait_s) VALUES (?, ?, 'swarm', 'w1', ?, 'PASS', '', '', ?,"
            " '{\"total\": 9.0}', '{}', 1, ?, ?, ?, 0.0)",
            (job_id, cur.lastrowid, "f" * 40, json.dumps(metrics), at, at, at + 9),
        )


def test_a_run_being_written_shows_on_the_next_poll(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(status="running")
    with serving(run.path) as base:
        before = get(f"{base}/api/version")["version"]
        first = section(base, "race")
        assert first["curves"][0]["points"][-1]["score"] == 160.0
        assert first["time_left_s"] is not None
        _append_evaluation(run.path, 900, 250.0, T0 + 80)
        after = get(f"{base}/api/version")["version"]
        assert after != before
        race = section(base, "race")
        judge = section(base, "judge")
        subs = section(base, "submissions")
    assert race["curves"][0]["points"][-1]["score"] == 250.0
    assert judge["evaluations"][-1]["job_id"] == 900
    assert subs["rows"][-1]["verdict"] == "PASS"


def test_rebuilds_are_throttled_while_a_run_keeps_writing(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(status="running")
    state = ViewState(run.path, min_rebuild_s=3600)
    first = state.current()
    _append_evaluation(run.path, 900, 250.0, T0 + 80)
    assert state.version() != first.version
    assert state.current() is first  # too soon: the last build is served
    state.min_rebuild_s = state.rebuild_factor = 0
    fresh = state.current()
    assert fresh is not first and fresh.version == state.version()
    assert 900 in fresh.tables.evaluations["job_id"].tolist()


def test_an_unreadable_log_keeps_the_last_good_read(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(status="running")
    with serving(run.path) as base:
        good = section(base, "submissions")
        db = run.path / "events.sqlite"
        db.write_bytes(db.read_bytes()[:16] + b"\x00garbage" * 64)  # still SQLite's magic
        version = get(f"{base}/api/version")
        again = section(base, "submissions")
    assert version["error"] and "DatabaseError" in version["error"]
    assert again == good  # what was read last, never an error page


def test_the_server_never_writes_the_run(fixture_run: FixtureRun) -> None:
    def files() -> dict[str, int]:
        return {
            str(p.relative_to(fixture_run.path)): p.stat().st_mtime_ns
            for p in fixture_run.path.rglob("*")
            if p.is_file()
        }

    db = fixture_run.path / "events.sqlite"
    before, data = files(), db.read_bytes()
    with serving(fixture_run.path) as base:
        for name in SECTIONS:
            section(base, name)
        get(f"{base}/api/evaluation?job=101")
    after = files()
    # A WAL reader may create the (empty) -wal and -shm files any SQLite reader needs; the
    # database and every other file stay as they were.
    added = set(after) - set(before)
    assert added <= {"events.sqlite-wal", "events.sqlite-shm"}
    if "events.sqlite-wal" in added:
        assert (fixture_run.path / "events.sqlite-wal").stat().st_size == 0
    assert {k: after[k] for k in before} == before
    assert db.read_bytes() == data
    # The planner's section is simulated once and kept beside the report's files
    # (analysis/plan), the one folder the server writes; asked again, it is read back.
    with serving(fixture_run.path) as base:
        first = get(f"{base}/api/plan")
    plan_files = set(files()) - set(after)
    assert plan_files and all(p.startswith("analysis/plan/") for p in plan_files)
    stamp = (fixture_run.path / "analysis" / "plan" / "stamp.json").stat().st_mtime_ns
    with serving(fixture_run.path) as base:
        assert get(f"{base}/api/plan") == first
    assert (fixture_run.path / "analysis" / "plan" / "stamp.json").stat().st_mtime_ns == stamp
    assert db.read_bytes() == data


def test_the_export_is_one_file_without_network_references(
    run_factory: Callable[..., FixtureRun], tmp_path: Path
) -> None:
    run = run_factory()
    hostile = "</script><script>alert(1)</script> see https://example.invalid/x"
    with connect_wal(run.path / "events.sqlite") as db:
        db.execute(
            "INSERT INTO messages (at, arm, author, role, kind, text) VALUES"
            " (?, 'swarm', 'w2', 'worker', 'note', ?)",
            (T0 + 90, hostile),
        )
    out = export(run.path, tmp_path / "view.html")
    html = out.read_text()
    assert not re.search(r"https?://", html)
    assert "<script>alert(1)" not in html
    assert html.count("<script") == 2  # the data element and the page's script, nothing else
    data = json.loads(re.search(r'id="inline-data"[^>]*>(.*?)</script>', html, re.S).group(1))
    assert set(data["sections"]) == {*SECTIONS, "plan"}
    plan = data["sections"]["plan"]
    assert plan["label"] == "simulation" and plan["reason"] is None
    assert plan["figure"].startswith("data:image/png;base64,")  # offline: no file beside it
    assert sum(r["knee"] for r in plan["team"]) == plan_knees(plan)
    assert data["sections"]["board"]["messages"][-1]["text"] == hostile  # the same text back
    tables = build_tables(run.path)
    assert len(data["details"]) == len(tables.evaluations)
    best = {c["arm"]: c["points"][-1]["score"] for c in data["sections"]["race"]["curves"]}
    assert best == tables.arms.set_index("arm")["best_score"].to_dict()


# -- the page in a real browser ------------------------------------------------------------


@pytest.mark.browser
def test_the_page_in_a_browser_renders_and_updates_live(
    browser, run_factory: Callable[..., FixtureRun]
) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    run = run_factory(status="running", tokens=True)
    hostile = '<img src=x onerror="window.__pwned = 1"><b id="injected">x</b>'
    with connect_wal(run.path / "events.sqlite") as db:  # an agent's post is an adversary's
        db.execute(
            "INSERT INTO messages (at, arm, author, role, kind, text) VALUES"
            " (?, 'swarm', 'w2', 'worker', 'note', ?)",
            (T0 + 90, hostile),
        )
        db.execute("UPDATE submissions SET message = ? WHERE id = 1", (hostile,))
    tables = build_tables(run.path)
    with serving(run.path) as base:
        browser.get(base + "/")
        wait_for_sections(browser)
        assert severe(browser) == []
        assert browser.execute_script("return window.__pwned") is None
        assert browser.find_elements("id", "injected") == []
        assert hostile in browser.find_element("id", "board").text  # shown as text
        _assert_plan_drawn(browser)
        text = browser.find_element("id", "race").text
        best = tables.arms.set_index("arm")["best_x_baseline"]
        for arm, x in best.items():
            assert f"{x:,.3f}" in text, arm
        bars = browser.find_elements("css selector", "#judge-chart g.bar")
        assert len(bars) == len(tables.evaluations)
        rows = browser.find_elements("css selector", "#subtable tbody tr")
        assert len(rows) == len(tables.submissions)
        # A row opens the evaluation's stages, detail and diff.
        browser.find_element("css selector", "#subtable tbody tr.clickable").click()
        WebDriverWait(browser, 30).until(lambda d: d.find_elements("id", "detail-title"))
        assert "diff against its parent" in browser.find_element("id", "detail").text
        # The board's search filters.
        browser.find_element("id", "boardq").send_keys("dead end")
        assert len(browser.find_elements("css selector", "#board .msg")) == 1
        shoot(browser, "running")
        # A new evaluation arrives while the page is open: it shows without a reload.
        browser.execute_script("window.__sameDocument = true")
        _append_evaluation(run.path, 900, 250.0, T0 + 80)
        WebDriverWait(browser, 60).until(
            lambda d: (
                len(d.find_elements("css selector", "#judge-chart g.bar"))
                == len(tables.evaluations) + 1
            )
        )
        assert browser.execute_script("return window.__sameDocument") is True
        assert "2.500" in browser.find_element("id", "race").text
        assert severe(browser) == []


@pytest.mark.browser
def test_the_export_opens_in_a_browser_with_no_server(
    browser, run_factory: Callable[..., FixtureRun], tmp_path: Path
) -> None:
    run = run_factory(rechecks=True)
    out = export(run.path, tmp_path / "view.html")
    browser.get(out.as_uri())
    wait_for_sections(browser)
    assert severe(browser) == []
    _assert_plan_drawn(browser)
    browser.find_element("css selector", "#subtable tbody tr.clickable").click()
    assert "diff against its parent" in browser.find_element("id", "detail").text
    # The arms' paths: swarm's and solo's moe steps matched, a step opens its evaluation.
    paths = browser.find_element("id", "paths").text
    assert "both arms" in paths and "only swarm" in paths and "by code, not by meaning" in paths
    browser.find_element("css selector", "#paths .path-step").click()
    assert "diff against its parent" in browser.find_element("id", "detail").text
    shoot(browser, "export")


def plan_knees(plan: dict) -> int:
    """How many judges of the planner's section have a knee in its team table."""
    return sum(k["knee_seats_per_arm"] is not None for k in plan["knees"])


def _assert_plan_drawn(browser) -> None:
    """The planner's section: labelled a simulation, the knee rows highlighted, a replay
    table, and its figure loaded (a decoded image has a width)."""
    text = browser.find_element("id", "plan").text
    assert "simulation" in text and "Counterfactual replay" in text
    team = browser.find_elements("css selector", "#plan-team tbody tr")
    knees = browser.find_elements("css selector", "#plan-team tbody tr.knee")
    assert team and knees and len(knees) < len(team)
    for row in knees:
        assert row.find_elements("css selector", "td")[-1].text == "yes"  # saturated
    img = browser.find_element("id", "plan-figure")
    assert browser.execute_script("return arguments[0].naturalWidth", img) > 0


@pytest.mark.browser
def test_a_large_runs_page_draws_columns_in_a_browser(
    browser, run_factory: Callable[..., FixtureRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    import analysis.view.data as data

    for name, value in (("TIMELINE_BARS", 2), ("MAX_ROWS", 3), ("LINEAGE_NODES", 4)):
        monkeypatch.setattr(data, name, value)
    run = run_factory(rechecks=True)
    _post(run.path, ["an old NEEDLE", "b", "c", "d"])
    with serving(run.path) as base:
        browser.get(base + "/")
        wait_for_sections(browser)
        assert severe(browser) == []
        assert browser.find_elements("css selector", "#judge-chart rect.col")
        assert "NEEDLE" not in browser.find_element("id", "board").text
        browser.find_element("id", "boardq").send_keys("needle")
        WebDriverWait(browser, 30).until(
            lambda d: "an old NEEDLE" in d.find_element("id", "board").text
        )
        assert "searched all 6 on the server" in browser.find_element("id", "board").text
        assert "the latest 3 of" in browser.find_element("id", "submissions").text
        shoot(browser, "large")


@pytest.mark.browser
def test_a_sweeps_page_picks_a_seed_in_a_browser(browser, sweep_dir: Path) -> None:
    from selenium.webdriver.support.ui import Select

    with serving(sweep_dir) as base:
        browser.get(base + "/")
        wait_for_sections(browser)
        assert severe(browser) == []
        runs = Select(browser.find_element("id", "runsel"))
        assert [o.text.split(" · ")[0] for o in runs.options] == ["seed 1", "seed 2"]
        assert "sweep of 2 runs" in browser.find_element("id", "title").text
        # The planner reads both seeds (one plan) and replays each: the page shows the picked one.
        assert browser.find_element("id", "plan").text.count("Counterfactual replay of") == 1
        first = browser.find_element("css selector", "#plan h3:nth-of-type(2)").text
        runs.select_by_index(1)
        wait_for_sections(browser)
        assert severe(browser) == []
        assert browser.find_element("id", "plan").text.count("Counterfactual replay of") == 1
        assert browser.find_element("css selector", "#plan h3:nth-of-type(2)").text != first
        shoot(browser, "sweep")
