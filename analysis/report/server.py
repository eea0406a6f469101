"""``## Server metrics``: for a server task (judge.kinds.server), each arm's best PASS as the
judge's load generator measured it at the headline concurrency: aggregate output tokens/s,
time to first token, inter-token latency and requests/s, beside the same evaluation's
baseline's time to first token. Absent for kinds that record no latencies."""

from __future__ import annotations

import pandas as pd

from analysis.report.markdown import num, short, table
from analysis.tables import RunInfo, Tables

_HEAD = ["arm", "best by", "{unit}", "× baseline", "time to first token", "baseline's TTFT",
         "inter-token", "requests/s"]  # fmt: skip


def _ms(value: object, digits: int = 0) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):.{digits}f} ms"


def server_section(tables: Tables, run: RunInfo) -> list[str]:
    """The section's lines, or none when no evaluation of the run recorded a latency."""
    ev = tables.evaluations
    if "ttft_ms" not in ev or not ev["ttft_ms"].notna().any():
        return []
    metric = run.metric
    rows = []
    for arm in run.arms:
        passes = ev[(ev["arm"] == arm) & (ev["verdict"] == "PASS") & ~ev["pseudo_agent"]]
        passes = passes[passes["score"].notna()]
        if passes.empty:
            rows.append([arm, "no PASS", "-", "-", "-", "-", "-", "-"])
            continue
        best = passes.loc[
            passes["score"].idxmax() if metric.higher_is_better else passes["score"].idxmin()
        ]
        rows.append(
            [
                arm,
                f"{best['agent']} `{short(best['commit'])}`",
                num(best["score"]),
                num(best["x_baseline"], 2),
                _ms(best["ttft_ms"]),
                _ms(best["baseline_ttft_ms"]),
                _ms(best["itl_ms"], 1),
                num(best["requests_s"], 2),
            ]
        )
    unit = metric.unit or metric.name
    return [
        "## Server metrics",
        "",
        f"Each arm's best PASS ({metric.label}), measured by the judge's own load generator"
        " (medians over the timed runs; `tables/evaluations` has every evaluation's):",
        "",
        *table([h.format(unit=unit) for h in _HEAD], rows),
        "",
    ]
