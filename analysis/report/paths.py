"""``## The arms' paths side by side``: each arm's improvements and the steps the arms share
(``analysis.paths``), matched by code, not by meaning."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.paths import LABEL, Improvement, Step, arm_paths, match_steps
from analysis.report.markdown import short, table
from analysis.tables import RunInfo, Tables


def run_paths(tables: Tables, run: RunInfo) -> dict[str, list[Improvement]]:
    """Every arm's improvements in one run (arms without a ``submissions.git`` left out)."""
    ev = tables.evaluations[tables.evaluations["run_id"] == run.run_id]
    subs = tables.submissions[tables.submissions["run_id"] == run.run_id]
    return arm_paths(
        run.run_dir,
        run.arms,
        ev,
        {arm: run.start_commit(arm) for arm in run.arms},
        messages=first_messages(subs),
    )


def first_messages(submissions: pd.DataFrame) -> dict[str, str]:
    """Each submitted commit's message, first line only (the first submission of it)."""
    first = submissions.sort_values("submission_id").drop_duplicates("commit")
    return {
        str(c): str(m).splitlines()[0] if isinstance(m, str) and m else ""
        for c, m in zip(first["commit"], first["message"], strict=True)
    }


def found_cell(imp: Improvement) -> str:
    """``min 12.3, 1.45x (+0.20x), w1 `abc```: when an arm found a step and what it gained."""
    return (
        f"min {imp.t_end_s / 60:.1f}, {imp.x:.2f}x (+{imp.gain_x:.2f}x), "
        f"{imp.agent} `{short(imp.commit)}`"
    )


def step_rows(steps: list[Step], arms: list[str]) -> list[list[Any]]:
    """One row per step: what changed, who found it, and each arm's cell (``-`` if not)."""
    rows = []
    for n, step in enumerate(steps, 1):
        first = min(step.members.values(), key=lambda m: m.t_end_s)
        rows.append(
            [
                n,
                first.describe(),
                step.found_by(arms),
                *[
                    "; again ".join(
                        found_cell(m)
                        for m in [step.members[a], *[x for x in step.again if x.arm == a]]
                    )
                    if a in step.members
                    else "-"
                    for a in arms
                ],
            ]
        )
    return rows


def paths_section(tables: Tables, run: RunInfo) -> list[str]:
    """The section's lines: the shared-steps table, then each arm's improvements in order."""
    by_arm = run_paths(tables, run)
    arms = [a for a in run.arms if a in by_arm]
    if not any(by_arm.values()):
        return ["No improvements: no arm has a PASS that raised its best (or no submissions.git)."]
    steps, why = match_steps({a: by_arm[a] for a in arms})
    out = [
        "An improvement is a PASS that raised its arm's best; what it changed is the diff from "
        "the commit it built on (its nearest PASSed submitted ancestor, or the start) in the "
        "arm's submissions.git. " + LABEL,
        "",
    ]
    out += table(["step", "changed (file (functions))", "found by", *arms], step_rows(steps, arms))
    for arm in arms:
        out += ["", f"Improvements of {arm}:", ""]
        rows = [
            [
                n,
                f"{i.t_end_s / 60:.1f}",
                i.agent,
                f"`{short(i.commit)}` on `{short(i.base)}`",
                f"{i.x:.2f}x",
                f"+{i.gain_x:.2f}x",
                i.describe(),
                why.get(i.key, "not matched"),
                i.message[:80] or "-",
            ]
            for n, i in enumerate(by_arm[arm], 1)
        ]
        out += table(
            ["#", "min", "agent", "commit", "x", "gain", "changed", "matched", "message"],
            rows,
        )
    return out
