"""``## What is not solid``: the findings of one run that a reader should not lean on, each drawn
from its data.

A finding is a function ``(tables, run) -> lines`` (none when it does not apply);
:data:`FINDINGS` lists them in the order the report says them and :func:`not_solid` walks it.
The findings on the arms' conditions are in :mod:`analysis.report.asymmetries`, on the seats'
time in :mod:`analysis.report.seat_time`, on the judge's noise in :mod:`analysis.report.noise`.
"""

from __future__ import annotations

from collections.abc import Callable

from analysis.report.asymmetries import ASYMMETRIES
from analysis.report.budgets import unspent_budget
from analysis.report.markdown import num, short
from analysis.report.noise import noise_findings
from analysis.report.seat_time import disk_quota, early_exits, endpoint_losses, stalls
from analysis.tables import RunInfo, Tables, finite_or_none

Finding = Callable[[Tables, RunInfo], list[str]]


def incomplete(tables: Tables, run: RunInfo) -> list[str]:
    """A run that did not finish: its numbers cover only what was recorded."""
    if run.finished:
        return []
    return [
        f"**INCOMPLETE**: the run's status is `{run.status}`, not `finished`; every "
        f"number covers only the {num(run.run_seconds)} s recorded."
    ]


def one_seed(tables: Tables, run: RunInfo) -> list[str]:
    """Always: one run is one seed (a sweep's report leaves this one out)."""
    return [
        f"One seed (seed {run.seed}): each arm ran once, so part of any gap between arms "
        "is luck; a sweep (`python -m runner -m ... seed=1,2,3`) can tell."
    ]


def scripted(tables: Tables, run: RunInfo) -> list[str]:
    """Scripted agents: nothing measures a model."""
    if not run.scripted:
        return []
    return [
        "The agents are scripted (no model): they replay a move library, so nothing "
        "here measures what a model would do."
    ]


def local_isolation(tables: Tables, run: RunInfo) -> list[str]:
    """``isolation: local``: the seats were not isolated."""
    if run.isolation != "local":
        return []
    return [
        "Isolation was `local`: the agents were NOT isolated from each other or the judge's files."
    ]


def one_arm(tables: Tables, run: RunInfo) -> list[str]:
    """A single arm: no control to compare with."""
    if len(run.arms) != 1:
        return []
    return [
        f"Only one arm (`{run.arms[0]}`): no control, so no claim that the setting "
        "helped can be made from this run."
    ]


def host_firewall(tables: Tables, run: RunInfo) -> list[str]:
    """The seats' network without the host firewall: more than the model proxy was reachable."""
    firewall = str((run.meta.get("proxy") or {}).get("host_firewall") or "")
    if not firewall.startswith("off"):
        return []
    return [
        f"The host firewall for the seats' network was {firewall}: the seats could reach "
        "services of the host listening on all addresses, not only the model proxy."
    ]


def wire_gap(tables: Tables, run: RunInfo) -> list[str]:
    """Arms whose CLIs' records and the vendor's responses disagree on output tokens."""
    out = []
    for r in tables.arms.itertuples(index=False):
        wire = finite_or_none(r.wire_output_tokens)
        if wire is None:
            continue
        records = finite_or_none(r.output_tokens) or 0.0
        if abs(wire - records) > max(100.0, 0.01 * wire):
            out.append(
                f"{r.arm}: the vendor's responses reported {int(wire):,} output tokens (read "
                f"by the model proxy), the CLIs' records {int(records):,} "
                f"({int(records - wire):+,}). Token cost per gain uses the records; a gap means "
                "calls the records do not hold (a seat's token used outside its CLI) or records "
                "cut off when the agents stopped."
            )
    return out


def wrong_with_tokens_correct(tables: Tables, run: RunInfo) -> list[str]:
    """WRONG verdicts whose tokens were all correct: a timing limit, the judge first suspect."""
    ev = tables.evaluations
    wrong_ok = ev[(ev["verdict"] == "WRONG") & (ev["tokens_correct"].fillna(False))]
    if not len(wrong_ok):
        return []
    shown = ", ".join(
        f"job {j} ({a}/{g} `{short(c)}`, {r})"
        for j, a, g, c, r in zip(
            wrong_ok["job_id"],
            wrong_ok["arm"],
            wrong_ok["agent"],
            wrong_ok["commit"],
            wrong_ok["reason"],
            strict=True,
        )
    )
    return [
        f"{len(wrong_ok)} WRONG verdict(s) with every token correct: suspect the "
        f"judge first (a timing limit, not the code): {shown}."
    ]


def _flagged(tables: Tables, flag: str, meaning: str) -> list[str]:
    ev = tables.evaluations
    hit = ev[ev[flag]]
    if not len(hit):
        return []
    shown = ", ".join(
        f"job {j} ({a}/{g} {v})"
        for j, a, g, v in zip(hit["job_id"], hit["arm"], hit["agent"], hit["verdict"], strict=True)
    )
    return [f"{len(hit)} evaluation(s) flagged `{flag}`, {meaning}: {shown}."]


def near_ties(tables: Tables, run: RunInfo) -> list[str]:
    """Evaluations whose first divergence was a near tie in the reference."""
    return _flagged(
        tables,
        "near_tie",
        "the first divergence was a near tie in the reference (top-2 margin under "
        "the judge's limit): a tiny numerical difference flips the token",
    )


def b1_unresolved(tables: Tables, run: RunInfo) -> list[str]:
    """Evaluations with a B=1 regression the judge's noise could not prove."""
    return _flagged(
        tables,
        "b1_unresolved",
        "a B=1 regression above the limit that the judge's noise could not "
        "prove (passed unconvicted)",
    )


def errors(tables: Tables, run: RunInfo) -> list[str]:
    """ERROR verdicts: the judge or its infrastructure failed."""
    ev = tables.evaluations
    failed = ev[ev["verdict"] == "ERROR"]
    if not len(failed):
        return []
    return [
        f"{len(failed)} ERROR verdict(s): the judge or its infrastructure failed "
        f"(jobs {', '.join(map(str, failed['job_id']))})."
    ]


def reruns(tables: Tables, run: RunInfo) -> list[str]:
    """Evaluations that ran more than once (the judge was interrupted)."""
    ev = tables.evaluations
    again = ev[ev["attempts"] > 1]
    if not len(again):
        return []
    return [
        f"{len(again)} evaluation(s) ran more than once (the judge was interrupted): "
        f"jobs {', '.join(map(str, again['job_id']))}."
    ]


def never_evaluated(tables: Tables, run: RunInfo) -> list[str]:
    """Submissions still queued when the run ended."""
    pending = int(tables.arms["not_evaluated"].sum())
    if not pending:
        return []
    return [f"{pending} submission(s) were never evaluated (queued when the run ended)."]


def after_deadline(tables: Tables, run: RunInfo) -> list[str]:
    """The agents' evaluations that finished in the drain, after the deadline."""
    if run.deadline is None:
        return []
    ev = tables.evaluations
    late = ev[(ev["finished_at"] > run.deadline) & ~ev["pseudo_agent"]]
    if not len(late):
        return []
    return [
        f"{len(late)} evaluation(s) finished after the deadline (the drain) and "
        "count in the results."
    ]


#: Every finding, in the order the report says them.
FINDINGS: list[Finding] = [
    incomplete,
    one_seed,
    scripted,
    local_isolation,
    one_arm,
    *ASYMMETRIES,
    unspent_budget,
    endpoint_losses,
    host_firewall,
    wire_gap,
    disk_quota,
    wrong_with_tokens_correct,
    near_ties,
    b1_unresolved,
    errors,
    reruns,
    never_evaluated,
    after_deadline,
    noise_findings,
    early_exits,
    stalls,
]


def not_solid(tables: Tables, run: RunInfo) -> list[str]:
    """The findings of one run that a reader should not lean on, each drawn from its data.

    Args:
        tables: The tables of one run (a sweep's report passes each job's part).
        run: That run.

    Returns:
        One line per finding, in the order of :data:`FINDINGS`.
    """
    return [line for finding in FINDINGS for line in finding(tables, run)]
