"""The dead-end ledger: every abandoned direction of every run and arm, as a table
(``tables/dead_ends``) and as the report's ``## Dead-end ledger``."""

from __future__ import annotations

import pandas as pd

from analysis._git import CommitGraph, DeadEnd, dead_ends
from analysis.report.markdown import short, table
from analysis.report.measures import subset
from analysis.tables import Tables

DEAD_END_COLUMNS = [
    "run_id", "seed", "arm", "agent", "agent_kind", "direction", "commits", "verdicts", "moves",
    "base", "base_owner", "t_first_s", "t_last_s", "best_score", "best_x_baseline", "files",
    "functions", "declared"
]  # fmt: skip


def ledger(tables: Tables) -> pd.DataFrame:
    """The dead-end ledger of every run and arm, one row per abandoned direction."""
    rows = []
    for run in tables.runs:
        part = subset(tables, run)
        directions = {(s.arm, s.agent): s.direction for s in run.seats}
        kinds = {(s.arm, s.agent): s.agent_kind for s in run.seats}
        for arm in run.arms:
            repo = run.run_dir / "arms" / arm / "submissions.git"
            if not repo.is_dir():
                continue
            best = part.arms.loc[part.arms["arm"] == arm, "best_commit"]
            ends: list[DeadEnd] = dead_ends(
                repo,
                part.submissions[part.submissions["arm"] == arm],
                part.relays[part.relays["arm"] == arm] if len(part.relays) else part.relays,
                best.iloc[0] if len(best) and isinstance(best.iloc[0], str) else None,
                run.start_commit(arm),
                messages=part.messages[part.messages["arm"] == arm],
                graph=CommitGraph.load(repo),
            )
            for end in ends:
                ch = end.changes
                rows.append(
                    [
                        run.run_id,
                        run.seed,
                        arm,
                        end.agent,
                        kinds.get((arm, end.agent), "unknown"),
                        directions.get((arm, end.agent)) or "",
                        " ".join(short(c) for c in end.commits),
                        "; ".join(end.verdicts),
                        "; ".join(end.messages),
                        end.base or "",
                        end.base_owner,
                        end.t_first_s,
                        end.t_last_s,
                        end.best_score,
                        end.best_x_baseline,
                        "; ".join(ch.files) if ch else "",
                        "; ".join(f"{f}: {', '.join(v)}" for f, v in ch.functions.items())
                        if ch
                        else "",
                        " / ".join(end.declared),
                    ]
                )
    df = pd.DataFrame(rows, columns=DEAD_END_COLUMNS)
    df["seed"] = df["seed"].astype("Int64")
    return df


def ledger_section(led: pd.DataFrame) -> list[str]:
    """``## Dead-end ledger``: the ledger's rows as a table (or a line saying there are none)."""
    if led.empty:
        return ["No dead ends: every submitted commit is in the ancestry of a kept PASS."]
    out = [
        "A dead end is a line of one agent's submitted commits of which none reached a PASS "
        "the arm's best or another agent built on; pinned to its commits and to the files "
        "and functions changed from the commit it started on.",
        "",
    ]
    rows = []
    for r in led.itertuples(index=False):
        changed = r.functions or r.files or "(not diffed)"
        rows.append(
            [
                r.arm,
                f"{r.agent}" + (f" ({r.direction})" if r.direction else ""),
                r.commits,
                r.verdicts,
                r.moves,
                f"{r.base_owner} `{short(r.base)}`",
                changed,
                f"{r.t_first_s / 60:.1f}–{r.t_last_s / 60:.1f}",
                r.declared[:160] or "-",
            ]
        )
    out += table(
        [
            "arm",
            "agent",
            "commits",
            "verdicts",
            "moves",
            "started on",
            "changed (file: functions)",
            "minutes",
            "declared on the board",
        ],
        rows,
    )
    return out
