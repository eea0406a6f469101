"""``python -m analysis.report DIR``: tables, figures and ``report.md`` from a run or a sweep.

Everything is rebuilt from ``DIR`` alone into ``DIR/analysis/`` (``tables/``, ``figures/``,
``report.md``); building twice gives identical tables and report. A directory that is neither a
run (an ``events.sqlite`` that is a SQLite file) nor a sweep (job folders under
``multirun.yaml``, or run folders at most ``SWEEP_DEPTH`` levels down) is refused at once with one
line on stderr and exit status 2. A run that did not finish gets a report of what exists, marked
INCOMPLETE at the top.

One module per job:

- :mod:`~analysis.report.build`: :func:`build_report` and the command line;
- :mod:`~analysis.report.run_report`, :mod:`~analysis.report.sweep_report`: a run's and a
  sweep's ``report.md``, section by section;
- the sections: :mod:`~analysis.report.arms` (facts and arms tables),
  :mod:`~analysis.report.budgets` (the run's budgets, each arm's spend, which budget ended each
  seat, and the finding on an arm that ended with budget unspent),
  :mod:`~analysis.report.endpoint` (model endpoint), :mod:`~analysis.report.measured` (the
  formulas), :mod:`~analysis.report.relays`, :mod:`~analysis.report.ledger` (dead ends);
- "What is not solid": :mod:`~analysis.report.findings` (one function per finding, the list
  :func:`not_solid` walks) with :mod:`~analysis.report.asymmetries`,
  :mod:`~analysis.report.seat_time` and :mod:`~analysis.report.noise`;
- shared: :mod:`~analysis.report.markdown` (numbers and tables as text) and
  :mod:`~analysis.report.measures` (one run's part of the tables, the judge's noise, lost seat
  time).
"""

from __future__ import annotations

from analysis.report.build import (
    MixedJudgeSettings,
    Report,
    build_report,
    judge_settings_problems,
    main,
)
from analysis.report.findings import FINDINGS, not_solid
from analysis.report.ledger import DEAD_END_COLUMNS, ledger
from analysis.report.seat_time import IDLE_SHARE

__all__ = [
    "DEAD_END_COLUMNS",
    "FINDINGS",
    "IDLE_SHARE",
    "MixedJudgeSettings",
    "Report",
    "build_report",
    "judge_settings_problems",
    "ledger",
    "main",
    "not_solid",
]
