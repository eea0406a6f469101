"""How fast is a seat's page on a run with large transcripts? Issue 26: 6 seats x 5,000 steps.

    .venv/bin/python bench/seat_pages.py [--steps 5000] [--events 20000] [--keep DIR]

Writes the synthetic run of ``bench/analysis_scale.py`` (its 6 seats: swarm w1-w4 and critic,
solo w1), then for every seat an ATIF ``trajectory.json`` of ``--steps`` steps (every other one
a ``bash`` call with its output) and the ``steps`` rows that mirror it
(``bench/seat_trajectories.py``), and times, from that directory alone: the view's first
build (every section, the seats' time split included), each seat's first page from
``/api/seat`` (the trajectory read whole, one page sent), the page that holds its last step, a
search over its whole transcript, and, when headless Chromium is installed, the live page from
a click on a seat to its page drawn, then the export (every seat's transcript inlined) opened
and a seat's page drawn from it. Seconds are from this one run; the machine's load is printed.
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

from analysis_scale import ARMS, T0, write_run
from seat_trajectories import synthetic_steps, write_seat

from analysis.tables import is_run_dir, read_run_info
from analysis.view.cli import export
from analysis.view.server import ViewState, bind


def _fetch(url: str) -> tuple[float, int, dict]:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as res:
        body = res.read()
    return time.perf_counter() - began, len(body), json.loads(body)


def _write(run_dir: Path, steps: int, events: int) -> None:
    write_run(run_dir, events)
    run_s = read_run_info(run_dir).run_seconds or 3600.0
    dt = max(0.01, run_s / steps)
    for arm, seats in ARMS.items():
        for seat in seats:
            write_seat(run_dir, arm, seat, synthetic_steps(steps, T0 + 1, dt))


def _chromium() -> tuple | None:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options), None


def _seat_in_browser(browser, url: str, arm: str, seat: str) -> dict[str, float]:
    from selenium.webdriver.support.ui import WebDriverWait

    began = time.perf_counter()
    browser.get(url)
    WebDriverWait(browser, 600).until(
        lambda d: d.execute_script(
            "return [...document.querySelectorAll('main section')]"
            ".every((s) => s.dataset.ready === '1')"
        )
    )
    page = time.perf_counter() - began
    browser.execute_script("document.getElementById('seatpage').dataset.ready = ''")
    began = time.perf_counter()
    browser.find_element(
        "css selector", f"#seats a.seatref[data-arm='{arm}'][data-seat='{seat}']"
    ).click()
    WebDriverWait(browser, 600).until(
        lambda d: (
            d.execute_script("return document.getElementById('seatpage').dataset.ready") == "1"
        )
    )
    return {"page_drawn_s": page, "seat_page_drawn_s": time.perf_counter() - began}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--keep", type=Path, help="write (or reuse) the run here")
    args = parser.parse_args()
    tmp = None
    if args.keep and is_run_dir(args.keep):
        run_dir = args.keep
    else:
        tmp = None if args.keep else tempfile.TemporaryDirectory()
        run_dir = args.keep or Path(tmp.name) / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        _write(run_dir, args.steps, args.events)
        print(f"wrote the run in {time.perf_counter() - began:.1f} s: {run_dir}")
    seats = [(arm, seat) for arm, names in ARMS.items() for seat in names]
    sizes = [
        (run_dir / "arms" / a / "agents" / s / "trajectory.json").stat().st_size for a, s in seats
    ]
    print(
        f"{len(seats)} seats x {args.steps} steps; trajectory.json {sum(sizes) / 1e6:.1f} MB in all"
    )
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    state = ViewState(run_dir)
    began = time.perf_counter()
    state.current()
    took = time.perf_counter() - began
    print(f"first build (every section, the seats' split included): {took:.2f} s")
    server, _ = bind(state, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        first, last, found = [], [], []
        for arm, seat in seats:
            q = f"{base}/api/seat?arm={arm}&seat={seat}"
            s, size, _ = _fetch(q)
            first.append(s)
            last.append(_fetch(f"{q}&step={args.steps}")[0])
            s, _, got = _fetch(f"{q}&q=run%20{args.steps // 2}")
            found.append(s)
            assert got["data"]["transcript"]["total"] >= 1
        print(
            f"/api/seat first page (200 steps, {size / 1e3:.0f} kB): max {max(first):.3f} s,"
            f" mean {sum(first) / len(first):.3f} s over {len(seats)} seats"
        )
        print(f"/api/seat page of the last step: max {max(last):.3f} s")
        print(f"/api/seat search over the whole transcript: max {max(found):.3f} s")
        made = _chromium()
        if made is None:
            print("no headless Chromium here: browser timings skipped")
            return 0
        browser = made[0]
        try:
            live = _seat_in_browser(browser, base + "/", "swarm", "w1")
            print(
                f"live page: every section drawn {live['page_drawn_s']:.2f} s; click on a seat"
                f" to its page drawn {live['seat_page_drawn_s']:.3f} s"
            )
            out = run_dir.parent / "seat_pages_view.html"
            began = time.perf_counter()
            export(run_dir, out)
            print(
                f"export (every seat's transcript inlined): {time.perf_counter() - began:.1f} s,"
                f" {out.stat().st_size / 1e6:.1f} MB"
            )
            exported = _seat_in_browser(browser, out.as_uri(), "swarm", "w1")
            print(
                f"exported page: every section drawn {exported['page_drawn_s']:.2f} s; click on"
                f" a seat to its page drawn {exported['seat_page_drawn_s']:.3f} s"
            )
        finally:
            browser.quit()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
