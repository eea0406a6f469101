"""``## Relay graph``: each PASS that built on another agent's PASS (``tables/relays``)."""

from __future__ import annotations

from analysis.report.independent import private_arms
from analysis.report.markdown import num, short, table, unit_suffix
from analysis.tables import RunInfo, Tables


def relays_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## Relay graph``: one row per relay edge and the count per arm."""
    edges = tables.relays
    unit = unit_suffix(run.metric)
    private = [
        f"Relays are impossible in {a} (a private arm): each of its seats sees only its own "
        "board and submissions, so none can build on another seat's PASS."
        for a in private_arms(run)
    ]
    if not len(edges):
        return [
            "No relays: no PASS built on another agent's PASS (read from each arm's "
            "submissions.git).",
            *private,
        ]
    out = [
        "A relay is a PASS whose nearest PASS ancestor is another agent's (its first "
        "pickup of that work), read from the arm's submissions.git.",
        "",
    ]
    rows = [
        [
            r.arm,
            f"{r.from_agent} `{short(r.from_commit)}` ({num(r.from_score)}{unit}, "
            f"min {r.from_t_end_s / 60:.1f})",
            "→",
            f"{r.to_agent} `{short(r.to_commit)}` ({num(r.to_score)}{unit}, min "
            f"{r.to_t_end_s / 60:.1f})",
            num(r.to_score - r.from_score),
        ]
        for r in edges.itertuples(index=False)
    ]
    out += table(["arm", "built on (PASS)", "", "later PASS", f"Δ{unit}"], rows)
    counts = edges.groupby("arm")["to_job"].nunique()
    out += [
        "",
        "Relays per arm: " + ", ".join(f"{a} {int(counts.get(a, 0))}" for a in run.arms) + ".",
        *private,
    ]
    return out
