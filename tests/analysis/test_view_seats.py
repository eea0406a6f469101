"""A seat's page in the view (``analysis.view.seats``): the time split per seat, one seat's
timeline and paged, searchable transcript from its ``trajectory.json``, else the ``steps``
table, else events.sqlite alone; the ``/api/seat`` endpoint; and the page in Chromium, live and
exported, linked from the submissions table, the board and the lineage."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable
from pathlib import Path

import pytest

from analysis.tables import build_tables
from analysis.view.cli import export
from analysis.view.seats import IDLE_GAP_S, _split, seat_page, seats_overview
from tests.analysis.conftest import T0, FixtureRun
from tests.analysis.test_view import _append_evaluation, get, serving
from tests.support.bench import load_bench
from tests.support.browser import severe, shoot, wait_for_sections

_trajectories = load_bench("seat_trajectories")
synthetic_steps, write_seat = _trajectories.synthetic_steps, _trajectories.write_seat

STEPS = 60
FIXTURES = Path(__file__).parent / "fixtures" / "tokens"


@pytest.fixture
def seat_run(run_factory: Callable[..., FixtureRun]) -> FixtureRun:
    """The fixture run; swarm/w1 with a trajectory file and steps rows, swarm/w2 with steps
    rows only, the rest with neither."""
    run = run_factory()
    write_seat(run.path, "swarm", "w1", synthetic_steps(STEPS, T0 + 0.5, 1.5))
    write_seat(run.path, "swarm", "w2", synthetic_steps(10, T0 + 1, 5.0), file=False)
    return run


def test_time_is_split_into_working_waiting_and_idle() -> None:
    # Active at 0 and 100; a submission pending from 650 to 900; the seat alive to 2000.
    working, waiting, idle = _split(0.0, 2000.0, [0.0, 100.0], [(650.0, 900.0)])
    assert working == [(0.0, 100.0 + IDLE_GAP_S)]
    assert waiting == [(100.0 + IDLE_GAP_S, 900.0)]
    assert idle == [(900.0, 2000.0)]
    total = sum(b - a for a, b in working + waiting + idle)
    assert total == pytest.approx(2000.0)


def test_the_overview_has_a_row_per_seat_summing_to_its_time(seat_run: FixtureRun) -> None:
    tables = build_tables(seat_run.path)
    rows = seats_overview(tables, time.time())["seats"]
    assert {(r["arm"], r["seat"]) for r in rows} == {(s.arm, s.agent) for s in tables.runs[0].seats}
    for r in rows:
        parts = r["working_s"] + r["waiting_s"] + r["idle_s"]
        assert parts == pytest.approx(r["alive_s"]), r
    by = {(r["arm"], r["seat"]): r for r in rows}
    assert by["swarm", "w1"]["steps"] == STEPS and by["swarm", "w1"]["trajectory"]
    assert by["swarm", "w2"]["steps"] == 10 and not by["swarm", "w2"]["trajectory"]
    assert by["solo", "w1"]["steps"] == 0


def test_a_seats_page_from_its_trajectory_is_paged_and_searched(seat_run: FixtureRun) -> None:
    tables = build_tables(seat_run.path)
    run = tables.runs[0]
    page = seat_page(tables, run, "swarm", "w1", time.time(), limit=25)
    tr = page["transcript"]
    assert tr["source"] == "trajectory.json" and tr["total"] == STEPS
    assert [s["step"] for s in tr["steps"]] == list(range(1, 26))
    call = tr["steps"][1]  # step 2 called bash, its output kept
    assert call["calls"][0]["name"] == "bash" and "run 2" in call["calls"][0]["args"]
    assert call["results"] == ["ok 2\n" * 5] and call["tokens"] == 122
    # The page holding a step, and a search over arguments and outputs.
    assert (
        seat_page(tables, run, "swarm", "w1", time.time(), limit=25, at_step=53)["transcript"][
            "offset"
        ]
        == 50
    )
    found = seat_page(tables, run, "swarm", "w1", time.time(), query="RUN 10")["transcript"]
    assert [s["step"] for s in found["steps"]] == [10]
    tl = page["timeline"]
    assert len(tl["tools"]) == STEPS // 2
    subs = tables.submissions[
        (tables.submissions["arm"] == "swarm") & (tables.submissions["agent"] == "w1")
    ]
    assert [s["submission_id"] for s in tl["submissions"]] == sorted(subs["submission_id"])
    # Each submission points at the last step at or before it was sent.
    times = {
        st["step"]: st["t_s"]
        for st in seat_page(tables, run, "swarm", "w1", 0, limit=0)["transcript"]["steps"]
    }
    for s in tl["submissions"]:
        made = [n for n, t in times.items() if t <= s["t_s"] + 1.0]
        assert s["step"] == (max(made) if made else None)
    assert any(s["step"] is not None for s in tl["submissions"])
    assert tl["lifecycle"][0]["event"] == "started"


def test_without_a_file_the_steps_table_then_the_events_are_shown(seat_run: FixtureRun) -> None:
    tables = build_tables(seat_run.path)
    run = tables.runs[0]
    w2 = seat_page(tables, run, "swarm", "w2", time.time())
    assert w2["transcript"]["source"] == "steps table" and w2["transcript"]["total"] == 10
    solo = seat_page(tables, run, "solo", "w1", time.time())
    assert solo["transcript"]["source"] == "none" and solo["transcript"]["steps"] == []
    assert len(solo["timeline"]["submissions"]) == 4  # s1..s4, from events.sqlite
    assert all(s["step"] is None for s in solo["timeline"]["submissions"])


def test_the_seat_endpoint_pages_and_refuses_unknown_seats(seat_run: FixtureRun) -> None:
    with serving(seat_run.path) as base:
        got = get(f"{base}/api/seat?arm=swarm&seat=w1&step={STEPS}")["data"]
        assert got["transcript"]["offset"] == 0 and got["transcript"]["total"] == STEPS
        with pytest.raises(urllib.error.HTTPError) as err:
            get(f"{base}/api/seat?arm=swarm&seat=nobody")
        assert err.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as err:
            get(f"{base}/api/seat?arm=swarm&seat=w1&offset=x")
        assert err.value.code == 400


def _open_from_submission(browser) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    link = browser.find_element(
        "css selector", "#subtable a.seatref[data-arm='swarm'][data-seat='w1']"
    )
    link.click()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements("id", "seat-title"))


@pytest.mark.browser
def test_a_seats_page_in_the_export(browser, seat_run: FixtureRun, tmp_path) -> None:
    out = export(seat_run.path, tmp_path / "view.html")
    browser.get(out.as_uri())
    wait_for_sections(browser)
    assert len(browser.find_elements("css selector", "#seats tbody tr")) == 4
    _open_from_submission(browser)
    page = browser.find_element("id", "seatpage")
    assert "trajectory.json" in page.text
    # The submission's step is open and marked; the rest are collapsed.
    target = page.find_elements("css selector", "details.target")
    assert len(target) == 1 and target[0].get_attribute("open") is not None
    assert len(page.find_elements("css selector", "details[open]")) == 1
    assert len(page.find_elements("css selector", "svg.seat-timeline circle.sub")) >= 1
    # Back to the evaluation from the timeline's submission.
    page.find_element("css selector", ".seat-subs a[data-lineage]").click()
    assert len(browser.find_elements("css selector", "#lineage g.node.seat-hit")) == 1
    page.find_element("css selector", "svg.seat-timeline circle.sub").click()
    assert "diff against its parent" in browser.find_element("id", "detail").text
    search = browser.find_element("id", "seatq")
    search.send_keys("run 12")
    browser.execute_script("document.getElementById('seatq').dispatchEvent(new Event('change'))")
    steps = browser.find_elements("css selector", "#seatpage details")
    assert [s.get_attribute("id") for s in steps] == ["step-12"]
    assert severe(browser) == []
    shoot(browser, "seat-export")


@pytest.mark.browser
def test_a_seats_page_live_from_the_board_and_the_lineage(browser, seat_run: FixtureRun) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    with serving(seat_run.path) as base:
        browser.get(base + "/")
        wait_for_sections(browser)
        # From the board: the critic's post opens the critic's page (events only).
        browser.find_element("css selector", "#board a.seatref[data-seat='critic']").click()
        WebDriverWait(browser, 30).until(
            lambda d: "critic" in d.find_element("id", "seatpage").text
        )
        assert "No transcript for this seat" in browser.find_element("id", "seatpage").text
        # And back: its post marked on the board.
        browser.find_element("css selector", "#seatpage .seat-posts a[data-board]").click()
        assert len(browser.find_elements("css selector", "#board .msg.seat-hit")) == 1
        # From the lineage: a swarm/w1 commit opens w1's page at the step that submitted it.
        node = browser.find_element(
            "css selector", "svg.lineage-chart[data-arm='swarm'] g.node circle:last-of-type"
        )
        browser.execute_script(
            "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", node
        )
        WebDriverWait(browser, 30).until(
            lambda d: d.find_elements("css selector", "#seatpage details.target")
        )
        assert "trajectory.json" in browser.find_element("id", "seat-title").text
        # A step the reader opens stays open when the live page redraws the seat.
        other = browser.find_element("css selector", "#seatpage details:not(.target)")
        other.find_element("tag name", "summary").click()
        opened = other.get_attribute("id")
        subs = len(browser.find_elements("css selector", "#seatpage .seat-subs li"))
        # The run goes on: w1's new submission shows on its open page, the step stays open.
        _append_evaluation(seat_run.path, 900, 250.0, T0 + 80)
        WebDriverWait(browser, 60).until(
            lambda d: len(d.find_elements("css selector", "#seatpage .seat-subs li")) == subs + 1
        )
        assert browser.find_element("id", opened).get_attribute("open") is not None
        assert severe(browser) == []


def test_a_real_writers_trajectory_reads_as_its_steps(seat_run: FixtureRun) -> None:
    """The trajectory the runner writes (``agents.trajectory``, from the Claude Code fixture
    the token readers are tested on) reads on the seat's page step for step: its tool calls,
    their results and its tokens, as the writer's own ``steps`` rows say."""
    from agents.clis import get_cli
    from agents.trajectory import build, record_turns, write

    files = [FIXTURES / "claude_code_session.jsonl"]
    usage = get_cli("claude_code").read_records(files)
    seat = build(record_turns(files, "claude_code"), seat="w1", agent_name="cc", source="cc",
                 usage=usage)  # fmt: skip
    folder = seat_run.path / "arms" / "solo" / "agents" / "w1"
    folder.mkdir(parents=True)
    write(folder, seat)
    tables = build_tables(seat_run.path)
    page = seat_page(tables, tables.runs[0], "solo", "w1", time.time(), limit=0)
    tr = page["transcript"]
    assert tr["source"] == "trajectory.json" and tr["total"] == len(seat.rows)
    for shown, row in zip(tr["steps"], seat.rows, strict=True):
        assert shown["step"] == row["step"]
        assert shown["tool"] == row["tool"]
        assert shown["tokens"] == row["tokens"]
    calls = [c for st in tr["steps"] for c in st["calls"]]
    assert calls and any(st["results"] for st in tr["steps"])
