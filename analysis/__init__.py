"""Tidy tables, the seed's formulas, statistics, figures and the report, read only from a run or
sweep directory.

    python -m analysis.report DIR     # tables/, figures/ and report.md into DIR/analysis/

Names are imported on first use, so ``import analysis`` (or ``python -m analysis.tokens``) does
not pay for pandas and matplotlib it does not need.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    # tables
    "Tables": "analysis.tables",
    "RunInfo": "analysis.tables",
    "build_tables": "analysis.tables",
    "write_tables": "analysis.tables",
    "is_run_dir": "analysis.tables",
    "is_sweep_dir": "analysis.tables",
    # formulas
    "judge_capacity": "analysis.formulas",
    "judge_utilisation": "analysis.formulas",
    "token_cost_per_gain": "analysis.formulas",
    "marginal_token_cost": "analysis.formulas",
    # statistics
    "ArmSpread": "analysis.stats",
    "ArmComparison": "analysis.stats",
    "arm_spread": "analysis.stats",
    "compare_arms": "analysis.stats",
    "noise_sigma": "analysis.stats",
    # figures and report
    "FigureResult": "analysis.figures",
    "make_figures": "analysis.figures",
    "Report": "analysis.report",
    "build_report": "analysis.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
