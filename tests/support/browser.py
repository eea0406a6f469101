"""Debian's headless Chromium driven by Selenium with the system chromedriver (``make setup``
installs both: ``scripts/browser.sh``), for the view's pages: the fixture, waiting for every
section, the console's errors and screenshots. Without a browser a test skips, except under CI,
where it fails (``tests.support.ci``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import cannot_run

# Each section's screenshot lands here (a test artefact, git-ignored with results/).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "results" / "view-screenshots"


def find_browser() -> tuple[str, str] | None:
    """(chromium, chromedriver) on PATH, or None."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium with its console log kept; quit after the test."""
    found = find_browser()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        found = None
    if found is None:
        cannot_run(
            "browser",
            "chromium, chromedriver and selenium (make setup installs them)",
            "one of them is missing",
        )
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1000", f"--user-data-dir={tmp_path / 'profile'}"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_sections(driver: Any, timeout: float = 60) -> None:
    """Until every section of the page says it is drawn (``data-ready``)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script(
            "return [...document.querySelectorAll('main section')]"
            ".every((s) => s.dataset.ready === '1')"
        )
    )


def severe(driver: Any) -> list[dict]:
    """The console's errors since the last call."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def shoot(driver: Any, name: str) -> None:
    """A screenshot of each section, ``SCREENSHOTS/<name>-<section>.png``."""
    from analysis.view.data import SECTIONS  # the plugin loads for every test: no pandas then

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for sid in (*SECTIONS[1:], "plan"):  # the planner's section is served on its own
        element = driver.find_element("id", sid)
        element.screenshot(str(SCREENSHOTS / f"{name}-{sid}.png"))
