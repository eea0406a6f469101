"""How fast is the live view on a very large run? Goals (issue 16): first paint under 2 s,
updates under 200 ms, for the 1,000,000-event run of ``bench/analysis_scale.py``.

    .venv/bin/python bench/view_scale.py [--events 1000000] [--keep DIR]

Writes the synthetic run of ``bench/analysis_scale.py`` (or reuses ``--keep DIR`` when it holds
one), then times, from that directory alone: the view's first build (the first read of every row,
the tables assembled, every section), each endpoint's answer (size and time, from the build's
cache), the page in headless Chromium when one is installed (first paint, every section drawn),
and updates: each time one evaluation (and its submission) appended through a WAL connection,
then the page's poll (``/api/changes``: the read of the new rows, which it carries), and the
background rebuild of the sections that follows (the arms table, formulas, lineage over every
row: throttled, no request waits for it). Seconds are from this one run; the machine's load is
printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from analysis_scale import write_run

from analysis.tables import is_run_dir
from analysis.view.data import SECTIONS
from analysis.view.server import MIN_REBUILD_S, REBUILD_FACTOR, ViewState, bind
from sqlitewal import connect_wal


def _fetch(url: str) -> tuple[float, int]:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as res:
        size = len(res.read())
    return time.perf_counter() - began, size


def _append(run_dir: Path) -> None:
    with connect_wal(run_dir / "events.sqlite") as db:
        job = db.execute("SELECT max(job_id) FROM evaluations").fetchone()[0] + 1
        at = db.execute("SELECT max(finished_at) FROM evaluations").fetchone()[0] + 1
        cur = db.execute(
            "INSERT INTO submissions (at, arm, agent, request_id, commit_sha, message, job_id)"
            " VALUES (?, 'swarm', 'w1', ?, ?, 'bench move', ?)",
            (at, f"bench-{job}", f"{job:040x}", job),
        )
        db.execute(
            "INSERT INTO evaluations (job_id, submission_id, arm, agent, commit_sha, verdict,"
            " reason, detail, metrics, stages, flags, attempts, enqueued_at, started_at,"
            " finished_at, queue_wait_s) VALUES (?, ?, 'swarm', 'w1', ?, 'PASS', '', '',"
            ' \'{"score": 5000.0, "baseline_score": 670.0, "x_baseline": 7.46}\','
            " '{\"total\": 9.0}', '{}', 1, ?, ?, ?, 0.0)",
            (job, cur.lastrowid, f"{job:040x}", at, at, at + 9),
        )


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=600) as res:
        return json.loads(res.read())


def _update(run_dir: Path, base: str, state: ViewState) -> dict[str, float]:
    """One evaluation appended; the poll that brings it; the rebuild of the sections after."""
    held = state.seq
    while state.snapshot is None or state.snapshot.seq != held:  # the last rebuild done
        time.sleep(0.05)
    _append(run_dir)
    began = time.perf_counter()
    got = _get(f"{base}/api/changes?since={held}")
    poll_s = time.perf_counter() - began
    if not got["rows"] or not got["rows"]["evaluations"]:
        raise RuntimeError(f"the poll did not carry the new evaluation: {got}")
    state.min_rebuild_s = state.rebuild_factor = 0.0  # the rebuild itself, not the throttle
    while _get(f"{base}/api/changes?since={got['seq']}")["sections_seq"] != got["seq"]:
        time.sleep(0.05)
    rebuilt_s = time.perf_counter() - began
    state.min_rebuild_s, state.rebuild_factor = MIN_REBUILD_S, REBUILD_FACTOR
    return {"poll_s": round(poll_s, 4), "sections_rebuilt_s": round(rebuilt_s, 3)}


def _browser(base: str) -> dict[str, float] | None:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    try:
        began = time.perf_counter()
        browser.get(base + "/")
        WebDriverWait(browser, 600).until(
            lambda d: d.execute_script(
                "return [...document.querySelectorAll('main section')]"
                ".every((s) => s.dataset.ready === '1')"
            )
        )
        drawn = time.perf_counter() - began
        paints = browser.execute_script(
            "return Object.fromEntries(performance.getEntriesByType('paint')"
            ".map((e) => [e.name, e.startTime]))"
        )
        return {
            "first_paint_s": paints.get("first-paint", 0) / 1000,
            "first_contentful_paint_s": paints.get("first-contentful-paint", 0) / 1000,
            "every_section_drawn_s": drawn,
        }
    finally:
        browser.quit()


def main() -> int:
    """Write (or reuse) the run, time the view on it, print the numbers as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the run here and leave it")
    parser.add_argument("--updates", type=int, default=5, help="evaluations appended, one by one")
    args = parser.parse_args()
    run_dir = args.keep or Path(tempfile.mkdtemp(prefix="swarmlab-view-bench-"))
    out: dict = {"events": args.events, "load_before": os.getloadavg()}
    if not is_run_dir(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        out["rows"] = write_run(run_dir, args.events)
        out["write_s"] = time.perf_counter() - began
    state = ViewState(run_dir, background=True)
    began = time.perf_counter()
    state.read()
    out["first_read_s"] = time.perf_counter() - began
    state.current()
    out["first_build_s"] = time.perf_counter() - began
    server, _ = bind(state, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        out["endpoints"] = {}
        for name in ("version", *SECTIONS):
            seconds, size = _fetch(f"{base}/api/{name}")
            out["endpoints"][name] = {"s": round(seconds, 4), "bytes": size}
        out["page_html"] = dict(zip(("s", "bytes"), _fetch(base + "/"), strict=True))
        out["browser"] = _browser(base)
        out["updates"] = [_update(run_dir, base, state) for _ in range(args.updates)]
        polls = sorted(u["poll_s"] for u in out["updates"])
        out["update_poll_median_s"] = polls[len(polls) // 2]
        out["update_poll_max_s"] = polls[-1]
    finally:
        server.shutdown()
        server.server_close()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
