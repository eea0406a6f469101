"""``analysis.view.live``: the tables kept between reads equal a full read after every write
(real SQLite written through the runner's WAL helper, real git repositories of the fixture)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import build_report
from analysis.tables import TABLES, Tables, build_tables
from analysis.view.cli import beside
from analysis.view.data import build_sections
from analysis.view.live import LiveTables
from analysis.view.server import ViewState, bind
from runner.events import EventLog
from sqlitewal import connect_wal
from tests.analysis.conftest import T0, FixtureRun
from tests.support.browser import severe, wait_for_sections


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as res:
        return json.loads(res.read())


def read(live: LiveTables) -> tuple[Tables, dict, bool]:
    """One read, then the tables assembled: as the view's server does."""
    changes = live.read()
    return live.assemble(), changes.rows, bool(changes)


def assert_same(live: Tables, full: Tables) -> None:
    """Every table of ``live`` equals ``full``'s, values and dtypes."""
    for name in (*TABLES, "relays"):
        pd.testing.assert_frame_equal(getattr(live, name), getattr(full, name), obj=name)
    assert [r.meta for r in live.runs] == [r.meta for r in full.runs]
    assert [r.end_at for r in live.runs] == [r.end_at for r in full.runs]


def _submit(path: Path, request: str, at: float, job_id: int | None) -> int:
    with connect_wal(path / "events.sqlite") as db:
        cur = db.execute(
            "INSERT INTO submissions (at, arm, agent, request_id, commit_sha, message, job_id)"
            " VALUES (?, 'swarm', 'w1', ?, ?, 'live move', ?)",
            (at, request, "f" * 40, job_id),
        )
        return int(cur.lastrowid or 0)


def _evaluate(path: Path, job_id: int, submission_id: int | None, tok_s: float, at: float) -> None:
    metrics = {"tok_s": tok_s, "score": tok_s, "baseline_score": 100.0, "x_baseline": tok_s / 100}
    with connect_wal(path / "events.sqlite") as db:
        db.execute(
            "INSERT INTO evaluations (job_id, submission_id, arm, agent, commit_sha, verdict,"
            " reason, detail, metrics, stages, flags, attempts, enqueued_at, started_at,"
            " finished_at, queue_wait_s) VALUES (?, ?, 'swarm', 'w1', ?, 'PASS', '', '', ?,"
            " '{\"total\": 9.0}', '{}', 1, ?, ?, ?, 0.0)",
            (job_id, submission_id, "f" * 40, json.dumps(metrics), at, at, at + 9),
        )


def test_an_appended_evaluation_arrives_alone_and_equals_a_full_read(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(status="running")
    live = LiveTables(run.path)
    tables, _, changed = read(live)
    assert changed
    assert_same(tables, build_tables(run.path))
    # Nothing written: nothing read, the same tables.
    again, rows, changed = read(live)
    assert not changed and again is tables
    sub = _submit(run.path, "live-1", T0 + 80, 900)
    _evaluate(run.path, 900, sub, 250.0, T0 + 81)
    tables, rows, changed = read(live)
    assert changed
    assert rows["evaluations"]["job_id"].tolist() == [900]
    assert rows["submissions"]["submission_id"].tolist() == [sub]
    assert rows["messages"] is None
    assert_same(tables, build_tables(run.path))


def test_what_the_runner_completes_later_is_read_again(
    run_factory: Callable[..., FixtureRun],
) -> None:
    run = run_factory(status="running")
    live = LiveTables(run.path)
    read(live)
    log = EventLog(run.path / "events.sqlite")
    # A submission before its job, then its job id, then (after a later job) its evaluation.
    sub = _submit(run.path, "live-2", T0 + 82, None)
    tables, rows, _ = read(live)
    assert rows["submissions"]["verdict"].tolist() == ["not evaluated"]
    assert_same(tables, build_tables(run.path))
    log.set_job(sub, 950)
    later = _submit(run.path, "live-3", T0 + 83, 960)
    _evaluate(run.path, 960, later, 300.0, T0 + 84)
    tables, rows, _ = read(live)
    assert_same(tables, build_tables(run.path))
    _evaluate(run.path, 950, sub, 120.0, T0 + 95)  # the re-queued job, finished late
    log.post("swarm", "w2", "worker", "note", "f" * 12 + " is faster")
    log.set_tokens("swarm", "w1", "test", [])  # the runner replaces a seat's token rows
    log.set_meta(status="finished", ended_at=T0 + 100)
    tables, rows, _ = read(live)
    assert rows["evaluations"]["job_id"].tolist() == [950]
    assert len(rows["messages"]) == 1
    assert_same(tables, build_tables(run.path))
    assert tables.runs[0].finished


def test_a_sweep_is_kept_per_run(sweep_dir: Path) -> None:
    live = LiveTables(sweep_dir)
    read(live)
    _evaluate(sweep_dir / "seed=2", 901, None, 222.0, T0 + 70)
    tables, rows, changed = read(live)
    assert changed and rows["evaluations"]["job_id"].tolist() == [901]
    assert_same(tables, build_tables(sweep_dir))


def test_a_replaced_file_is_read_in_full(run_factory: Callable[..., FixtureRun]) -> None:
    run = run_factory(status="running")
    live = LiveTables(run.path)
    read(live)
    db = run.path / "events.sqlite"
    other = run.path / "other"
    other.mkdir()
    (other / "events.sqlite").write_bytes(db.read_bytes())
    _evaluate(other, 970, None, 1.0, T0 + 90)
    (other / "events.sqlite").replace(db)  # another file (inode), as a restore would leave
    tables, _, changed = read(live)
    assert changed and 970 in tables.evaluations["job_id"].tolist()
    assert_same(tables, build_tables(run.path))


def test_the_poll_brings_an_appended_evaluation_as_a_full_build_shows_it(
    run_factory: Callable[..., FixtureRun],
) -> None:
    """The incremental path end to end: the sections are not rebuilt (throttled), yet the
    page's poll carries the new evaluation, its submission and a message, each row equal to the
    row a full read and build of the sections gives."""
    run = run_factory(status="running")
    state = ViewState(run.path, min_rebuild_s=3600)
    server, _ = bind(state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        held = get(f"{base}/api/judge")["seq"]
        assert get(f"{base}/api/changes?since={held}")["rows"]["evaluations"] == []
        sub = _submit(run.path, "live-9", T0 + 80, 900)
        _evaluate(run.path, 900, sub, 250.0, T0 + 81)
        EventLog(run.path / "events.sqlite").post("swarm", "w2", "worker", "note", "f" * 9)
        got = get(f"{base}/api/changes?since={held}")
        again = get(f"{base}/api/changes?since={got['seq']}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert got["sections_seq"] == held and got["seq"] > held  # no rebuild: the rows alone
    assert not got["reset"] and again["rows"]["evaluations"] == []
    full = build_sections(build_tables(run.path), 0.0)
    rows = got["rows"]
    assert rows["evaluations"] == [e for e in full["judge"]["evaluations"] if e["job_id"] == 900]
    assert rows["submissions"] == [r for r in full["submissions"]["rows"] if r["job_id"] == 900]
    assert rows["messages"] == full["board"]["messages"][-1:]
    assert [m["job"] for m in rows["messages"][0]["mentions"]] == [900]  # the text names it


def test_beside_serves_the_run_and_stops_with_the_block(
    fixture_run: FixtureRun, capfd: pytest.CaptureFixture[str]
) -> None:
    """What the runner's ``view=true`` calls: a child process serving the run, its address
    printed to stderr before the block runs, gone after it."""
    with beside(fixture_run.path, port=0) as url:
        assert url is not None and url in capfd.readouterr().err
        run = get(f"{url}api/run")["data"]
        assert run["runs"][0]["run_id"] == build_tables(fixture_run.path).runs[0].run_id
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}api/run", timeout=5)


def test_beside_off_starts_nothing(fixture_run: FixtureRun) -> None:
    with beside(fixture_run.path, enabled=False) as url:
        assert url is None


def test_the_report_writes_the_exported_view_and_links_it(fixture_run: FixtureRun) -> None:
    report = build_report(fixture_run.path)
    page = report.path.parent / "view.html"
    text = page.read_text()
    inline = text.split('<script id="inline-data" type="application/json">', 1)[1]
    data = json.loads(inline.split("</script>", 1)[0])
    assert data["sections"]["run"]["runs"][0]["run_id"] == report.tables.runs[0].run_id
    lines = report.path.read_text().splitlines()
    linked = [i for i, line in enumerate(lines) if "](view.html)" in line]
    assert linked == [lines.index("## Run") - 2]  # one line, before the first section


@pytest.mark.browser
def test_the_page_adds_the_polled_rows_without_a_rebuild(
    browser,
    run_factory: Callable[..., FixtureRun],
) -> None:
    """In a real browser: with the sections' rebuild held off, a new evaluation, its
    submission and a message still appear (the poll's rows), in the same document."""
    from selenium.webdriver.support.ui import WebDriverWait

    run = run_factory(status="running")
    tables = build_tables(run.path)
    state = ViewState(run.path, min_rebuild_s=3600)
    server, _ = bind(state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait_for_sections(browser)
        built = state.snapshot
        browser.execute_script("window.__sameDocument = true")
        sub = _submit(run.path, "live-7", T0 + 80, 900)
        _evaluate(run.path, 900, sub, 250.0, T0 + 81)
        EventLog(run.path / "events.sqlite").post("swarm", "w2", "worker", "note", "polled in")

        def arrived(d) -> bool:  # type: ignore[no-untyped-def]
            bars = d.find_elements("css selector", "#judge-chart g.bar")
            rows = d.find_elements("css selector", "#subtable tbody tr")
            return (
                len(bars) == len(tables.evaluations) + 1
                and len(rows) == len(tables.submissions) + 1
                and "polled in" in d.find_element("id", "board").text
            )

        WebDriverWait(browser, 60).until(arrived)
        assert state.snapshot is built  # no rebuild: the rows came through the poll
        assert browser.execute_script("return window.__sameDocument") is True
        assert "2.500" not in browser.find_element("id", "race").text  # totals: next build
        assert severe(browser) == []
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
