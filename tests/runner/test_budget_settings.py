"""Token, cost and matched budgets in the runner's settings (``runner.settings.budget_problems``,
``runner.config.budgets_meta``): a bad one is one line and exit status 2 before any folder (a
real ``python -m runner``), ``match=`` forces its budget per arm, and the meta says what was
set. Fast: no engine, no CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from runner.config import budget_scope, budgets_meta, register_configs
from runner.seats import spending_ledger
from runner.settings import settings_problems
from tasks.schema import PROJECT_ROOT

CLI = ("agent=claude_code",)  # token budgets are counted at a CLI's model proxy


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="runner", overrides=list(overrides))


def _budget_problems(*overrides: str) -> list[str]:
    return [p for p in settings_problems(_compose(*overrides)) if "budget" in p or "match" in p]


BAD = [
    (("experiment=swarm_vs_solo", *CLI, "match=output_tokens"), "match=output_tokens needs"),
    (
        ("experiment=swarm_vs_solo", "match=evaluations"),
        "match=evaluations needs budget.evaluations",
    ),
    (("arm=solo", *CLI, "match=output_tokens", "budget.output_tokens=10"), "one arm has nothing"),
    (("experiment=swarm_vs_solo", *CLI, "match=tokens"), "match='tokens': use one of"),
    (("arm=solo", "budget.output_tokens=1000"), "counted at the model proxy"),
    (("arm=solo", *CLI, "budget.output_tokens=0"), "budget.output_tokens=0"),
    (("arm=solo", *CLI, "budget.cost_usd=-1"), "budget.cost_usd=-1"),
    (("arm=solo", *CLI, "budget.scope.output_tokens=team"), "budget.scope.output_tokens='team'"),
    (("arm=solo", *CLI, "budget.prices.gpt-5.output=-2"), "budget.prices.gpt-5.output=-2"),
    (
        ("arm=solo", *CLI, "budget.cost_usd=5", "~budget.prices.default"),
        "needs budget.prices.default",
    ),
]


@pytest.mark.parametrize("overrides,named", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_a_bad_budget_is_named(overrides, named):
    problems = _budget_problems(*overrides)
    assert any(named in p for p in problems), problems


def test_match_without_its_budget_is_one_line_and_exit_2_before_any_folder(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "runner", "experiment=swarm_vs_solo", "match=output_tokens",
         f"hydra.run.dir={run_dir}", f"judge.private_dir={tmp_path / 'judge'}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "match=output_tokens needs budget.output_tokens=N" in lines[0]
    assert not run_dir.exists() and not (tmp_path / "judge").exists()


def test_match_forces_its_budget_per_arm_and_the_meta_says_so():
    cfg = _compose(
        "experiment=swarm_vs_solo", *CLI, "match=output_tokens", "budget.output_tokens=5000",
        "budget.scope.output_tokens=per_seat", "budget.cost_usd=2.5",
        "budget.scope.cost_usd=per_seat", "budget.evaluations=4",
    )  # fmt: skip
    assert [p for p in settings_problems(cfg) if "budget" in p or "match" in p] == []
    assert budget_scope(cfg, "output_tokens") == "per_arm"  # matched: per arm whatever was set
    assert budget_scope(cfg, "cost_usd") == "per_seat"
    assert budgets_meta(cfg) == {
        "minutes": 60.0,
        "output_tokens": {"limit": 5000, "scope": "per_arm"},
        "cost_usd": {"limit": 2.5, "scope": "per_seat"},
        "evaluations": {"limit": 4, "scope": "per_arm"},
        "match": "output_tokens",
        "prices_estimate": True,
    }
    ledger = spending_ledger(cfg)
    assert ledger is not None
    assert [(lim.budget, lim.limit, lim.scope) for lim in ledger.limits] == [
        ("output_tokens", 5000.0, "per_arm"),
        ("cost_usd", 2.5, "per_seat"),
    ]
    # The shipped table prices the clients' default models, a dated release by its prefix.
    assert ledger.prices["claude-sonnet-4"].output == 15.0 and "default" in ledger.prices


def test_without_token_budgets_there_is_no_ledger_and_the_meta_has_the_minutes():
    cfg = _compose("experiment=swarm_vs_solo")
    assert spending_ledger(cfg) is None
    assert budgets_meta(cfg) == {"minutes": 60.0, "match": None}
    assert [p for p in settings_problems(cfg) if "budget" in p or "match" in p] == []
