"""The report's text, whole, against golden copies (``tests/analysis/golden/*.md``).

The report is assembled from many small modules (``analysis/report/``); these copies pin what
they write together, so a refactoring that moves a line or a finding shows here. Commits are
written as their fixture labels (``<c6>``): the fixtures' shas change with the clock. After a
deliberate change of the report, rewrite the copies and read their diff:

    SWARMLAB_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/analysis/test_report_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from analysis.report import build_report

from .conftest import FixtureRun, copy_run

GOLDEN = Path(__file__).parent / "golden"


def _labelled(text: str, run: FixtureRun) -> str:
    for label, sha in {"start": run.start, **run.commits}.items():
        text = text.replace(sha, f"<{label}>").replace(sha[:10], f"<{label}>")
    return text


def _check(name: str, text: str) -> None:
    golden = GOLDEN / f"{name}.md"
    if os.environ.get("SWARMLAB_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"no golden copy {golden}: run with SWARMLAB_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"report differs from {golden.name} (see the module doc)"


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("run", {}),
        # Re-judged bests, token records and proxied model calls: the optional sections.
        ("run_rejudged", {"rechecks": True, "tokens": True, "model_calls": True}),
        ("run_incomplete", {"status": "running", "seed": 3, "solo_prompt": "other"}),
        # Matched budgets: the budgets section, the unspent flag, best against tokens.
        ("run_budgets", {"budgets": True}),
    ],
)
def test_run_report_matches_its_golden_copy(template_run, tmp_path, name, options):
    run = copy_run(template_run, tmp_path / "run", **options)
    text = build_report(run.path).path.read_text()
    _check(name, _labelled(text, run))


def test_sweep_report_matches_its_golden_copy(template_run, tmp_path):
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    copy_run(template_run, root / "seed=1", seed=1)
    copy_run(template_run, root / "seed=2", seed=2, rechecks=True, tokens=True)
    (root / "seed=3" / ".hydra").mkdir(parents=True)
    (root / "seed=3" / ".hydra" / "config.yaml").write_text("seed: 3\n")
    text = build_report(root).path.read_text()
    _check("sweep", _labelled(text, template_run))
