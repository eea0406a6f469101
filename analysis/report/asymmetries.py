"""Findings on whether the arms ran under the same conditions: their settings, agent kinds,
start times, token records, prompts and seat counts, and a runner restarted mid-run (see
:mod:`analysis.report.findings`). All but the restart need two arms or more."""

from __future__ import annotations

from analysis.report.independent import private_arms
from analysis.report.markdown import num
from analysis.tables import RunInfo, Tables


def arm_settings(tables: Tables, run: RunInfo) -> list[str]:
    """Arms whose configuration differs in anything but their name and seats."""
    out = []
    arms_cfg = run.config.get("arms") or {}
    if len(run.arms) < 2:
        return out
    # A private arm's visibility is its design, as the seats are: the audit lists it
    # (analysis/report/independent.py).
    by_design = {"name", "seats", "visibility"}
    if private_arms(run):  # the audit lists each arm's directions: how they were chosen aside
        by_design.add("task_directions")
    for key in sorted({k for a in run.arms for k in (arms_cfg.get(a) or {})} - by_design):
        values = {a: (arms_cfg.get(a) or {}).get(key) for a in run.arms}
        if len({repr(v) for v in values.values()}) > 1:
            shown = ", ".join(f"{a}: `{v}`" for a, v in values.items())
            out.append(f"Arms differ in `{key}` ({shown}): not the same conditions.")
    return out


def agent_kinds(tables: Tables, run: RunInfo) -> list[str]:
    """Arms whose seats ran different agent kinds."""
    if len(run.arms) < 2:
        return []
    kinds = {a: sorted({s.agent_kind for s in run.seats if s.arm == a}) for a in run.arms}
    if len({tuple(v) for v in kinds.values()}) > 1:
        shown = "; ".join(f"{a}: {', '.join(v)}" for a, v in kinds.items())
        return [f"Arms ran different agent kinds ({shown})."]
    return []


def start_times(tables: Tables, run: RunInfo) -> list[str]:
    """Arms whose first seats started far apart (more than 30 s and 5% of the run)."""
    if len(run.arms) < 2:
        return []
    started = tables.lifecycle[tables.lifecycle["event"] == "started"]
    firsts = started.groupby("arm")["t_s"].min()
    if len(firsts) > 1 and firsts.max() - firsts.min() > max(30.0, 0.05 * run.run_seconds):
        shown = ", ".join(f"{a} at {num(t)} s" for a, t in firsts.items())
        return [f"Arms started at different times ({shown}): unequal budgets."]
    return []


def token_records(tables: Tables, run: RunInfo) -> list[str]:
    """Token records that exist for some arms only."""
    if len(run.arms) < 2:
        return []
    with_tokens = set(tables.tokens["arm"])
    if with_tokens and with_tokens != set(run.arms):
        missing = ", ".join(a for a in run.arms if a not in with_tokens)
        return [f"Token records exist for some arms only (none for {missing})."]
    return []


def prompts(tables: Tables, run: RunInfo) -> list[str]:
    """Arms whose seats read different instructions beyond what the role puts in.

    The runner records per seat the sha256 of the prompt's template and its version (meta
    ``prompts``); the direction and "you are alone" are the role's and the seat's, by design.
    A role whose template or version differs between arms means the arms were not told the
    same thing.
    """
    if len(run.arms) < 2:
        return []
    recorded = run.meta.get("prompts") or {}
    out = []
    by_role: dict[str, dict[str, set[tuple[str, str]]]] = {}
    for arm, seats in recorded.items():
        for seat in (seats or {}).values():
            key = (str(seat.get("template_sha256", "")), str(seat.get("version", "")))
            by_role.setdefault(str(seat.get("role", "")), {}).setdefault(arm, set()).add(key)
    for role, arms in sorted(by_role.items()):
        variants = {key for keys in arms.values() for key in keys}
        if len(variants) > 1:
            shown = "; ".join(
                f"{arm}: " + ", ".join(f"`{t[:10]}` v{v}" for t, v in sorted(keys))
                for arm, keys in sorted(arms.items())
            )
            out.append(
                f"The {role} prompts differ between arms beyond the role ({shown}): the arms "
                "were not given the same instructions."
            )
    return out


def seat_counts(tables: Tables, run: RunInfo) -> list[str]:
    """Arms with different numbers of seats: by design, said so a reader does not wonder."""
    if len(run.arms) < 2:
        return []
    seats = {a: sum(s.arm == a for s in run.seats) for a in run.arms}
    if len(set(seats.values())) > 1:
        shown = ", ".join(f"{a} {n}" for a, n in seats.items())
        return [f"(By design, not a flaw: seat counts differ: {shown}.)"]
    return []


def resumed(tables: Tables, run: RunInfo) -> list[str]:
    """Seats the runner resumed after it was restarted mid-run."""
    again = tables.lifecycle[tables.lifecycle["event"] == "resumed"]
    if not len(again):
        return []
    shown = ", ".join(
        sorted({f"{a}/{g}" for a, g in zip(again["arm"], again["agent"], strict=True)})
    )
    return [
        f"The runner was restarted mid-run and resumed {shown}: the arms were "
        "interrupted (the seed's solo run lost five minutes this way)."
    ]


#: In the order the report lists them.
ASYMMETRIES = [arm_settings, agent_kinds, start_times, token_records, prompts, seat_counts, resumed]
