"""A run or sweep with a private arm (``visibility: private``, issue 28): what its seats' working
apart tells, and every difference between the arms.

Three arms answer two questions that swarm against solo mixes: a shared arm against a private
one with the same workers is the board's effect, a private arm against a one-seat arm the effect
of more seats. A private arm's best is the best of its seats' own bests, which is also what N
separate solo runs would have given ("best of N independent"). Nothing here reads the arms table
(``analysis/arms_table.py``): every number comes from the evaluations, so this module stands on
its own facts:

- :func:`visibility_of`: each arm's visibility (the meta's, else the config's, else shared);
- :func:`seat_bests`: each seat's best PASS score;
- :func:`pairs`: the named comparisons a run's arms allow;
- :func:`comparison_section`, :func:`audit_section`: a run's report sections;
- :func:`sweep_comparisons`: the named comparisons across seeds, with intervals and the tie rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import stats
from analysis.report.markdown import num, table, unit_suffix
from analysis.report.measures import baseline_noise
from analysis.tables import RunInfo, Tables

PRIVATE = "private"


@dataclass(frozen=True)
class Pair:
    """Two arms compared, and what their difference measures."""

    a: str
    b: str
    measures: str


def visibility_of(run: RunInfo) -> dict[str, str]:
    """Each arm's visibility: the run's meta (``visibility``), else its config, else shared
    (a run made before arms had one)."""
    recorded = run.meta.get("visibility") or {}
    arms_cfg = run.config.get("arms") or {}
    return {
        arm: str(recorded.get(arm) or (arms_cfg.get(arm) or {}).get("visibility") or "shared")
        for arm in run.arms
    }


def private_arms(run: RunInfo) -> list[str]:
    """The run's private arms, in its order."""
    return [a for a, v in visibility_of(run).items() if v == PRIVATE]


def _workers(run: RunInfo, arm: str) -> list[str]:
    return [s.agent for s in run.seats if s.arm == arm and s.role == "worker"]


def _directions(run: RunInfo, arm: str) -> list[str]:
    return [str(s.direction or "none") for s in run.seats if s.arm == arm and s.role == "worker"]


def pairs(run: RunInfo) -> list[Pair]:
    """The named comparisons: each shared arm of several workers against a private arm whose
    workers take the same directions (the board's effect), and each private arm against each
    one-seat arm (the effect of more seats)."""
    vis = visibility_of(run)
    out = []
    for private in private_arms(run):
        for arm in run.arms:
            if vis[arm] == PRIVATE:
                continue
            if len(_workers(run, arm)) > 1 and _directions(run, arm) == _directions(run, private):
                out.append(Pair(arm, private, "the board's effect"))
        for arm in run.arms:
            if vis[arm] != PRIVATE and sum(s.arm == arm for s in run.seats) == 1:
                out.append(Pair(private, arm, "the effect of more seats"))
    return out


def seat_bests(
    tables: Tables, run: RunInfo, arm: str, column: str = "score"
) -> dict[str, float | None]:
    """Each worker of ``arm``: its best PASS in this run (None: no PASS), from the agents' own
    evaluations (the runner's re-judgements aside). ``column``: ``score`` (best by the
    metric's direction) or ``x_baseline`` (the largest)."""
    ev = tables.evaluations
    if "run_id" in ev:
        ev = ev[ev["run_id"] == run.run_id]
    passes = ev[(ev["arm"] == arm) & (ev["verdict"] == "PASS") & ~ev["pseudo_agent"]]
    out: dict[str, float | None] = {}
    for name in _workers(run, arm):
        scores = passes.loc[passes["agent"] == name, column].dropna()
        if not len(scores):
            out[name] = None
        else:
            highest = run.metric.higher_is_better or column != "score"
            out[name] = float(scores.max() if highest else scores.min())
    return out


def _best(values: list[float | None], higher: bool) -> float | None:
    found = [v for v in values if v is not None]
    if not found:
        return None
    return max(found) if higher else min(found)


def arm_best(tables: Tables, run: RunInfo, arm: str, column: str = "score") -> float | None:
    """The arm's best PASS: the best of its seats' own bests (``column`` as in
    :func:`seat_bests`)."""
    higher = run.metric.higher_is_better or column != "score"
    return _best(list(seat_bests(tables, run, arm, column).values()), higher)


def comparison_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## Three arms``: each arm's best, the named differences and the best of N independent;
    nothing for a run without a private arm."""
    privates = private_arms(run)
    if not privates:
        return []
    unit = unit_suffix(run.metric)
    higher = run.metric.higher_is_better
    vis = visibility_of(run)
    bests = {arm: arm_best(tables, run, arm) for arm in run.arms}
    rows = [
        [arm, vis[arm], len(_workers(run, arm)), sum(s.arm == arm for s in run.seats),
         num(bests[arm]) + (unit if bests[arm] is not None else "")]
        for arm in run.arms
    ]  # fmt: skip
    out = [
        f"Each arm's best PASS ({run.metric.name}, "
        f"{'higher' if higher else 'lower'} is better), the best of its seats' own bests:",
        "",
        *table(["arm", "visibility", "workers", "seats", "best PASS"], rows),
        "",
    ]
    for pair in pairs(run):
        a, b = bests[pair.a], bests[pair.b]
        if a is None or b is None:
            gap = f"not measured ({pair.a if a is None else pair.b} has no PASS)"
        else:
            ahead = pair.a if (a > b) == higher and a != b else pair.b if a != b else "neither"
            gap = f"{num(a - b)}{unit} ({ahead} ahead)"
        out.append(f"- **{pair.a} vs {pair.b}** ({pair.measures}): {gap}.")
    for private in privates:
        own = seat_bests(tables, run, private)
        shown = ", ".join(f"{s} {num(v)}" for s, v in own.items())
        best = _best(list(own.values()), higher)
        measured = [v for v in own.values() if v is not None]
        typical = float(pd.Series(measured).median()) if measured else None
        out.append(
            f"- **Best of {len(own)} independent** ({private}, what {len(own)} separate solo "
            f"runs on these directions would have given): seats' own bests {shown}; best "
            f"{num(best)}{unit if best is not None else ''}, median seat "
            f"{num(typical)}{unit if typical is not None else ''}."
        )
    out += [
        "",
        "One run is one draw per arm: these are differences, not effects; a sweep over seeds "
        "(`python -m runner -m experiment=swarm_vs_independent_vs_solo seed=1,2,3`) gives "
        "each with an interval and the tie rule.",
    ]
    return out


def audit_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## What differs between the arms``: every difference in the arms' settings, one line
    each (seats, their directions, visibility, and any other arm setting that differs); the
    run's other settings are one config, the same for every arm. Nothing for a run without a
    private arm."""
    if not private_arms(run) or len(run.arms) < 2:
        return []
    vis = visibility_of(run)

    def seats(arm: str) -> str:
        roles = [s.role for s in run.seats if s.arm == arm]
        return ", ".join(f"{roles.count(r)} {r}(s)" for r in dict.fromkeys(roles))

    facts = {
        "seats": {a: seats(a) for a in run.arms},
        "directions": {a: ", ".join(_directions(run, a)) or "none" for a in run.arms},
        "visibility": vis,
    }
    arms_cfg = run.config.get("arms") or {}
    # task_directions is how the directions were chosen: the directions themselves are above.
    skip = {"name", "seats", "visibility", "task_directions"}
    for key in sorted({k for a in run.arms for k in (arms_cfg.get(a) or {})} - skip):
        facts[key] = {a: str((arms_cfg.get(a) or {}).get(key)) for a in run.arms}
    rows = [
        [key, *(values[a] for a in run.arms)]
        for key, values in facts.items()
        if len(set(values.values())) > 1
    ]
    if not rows:
        return ["The arms differ in nothing but their names."]
    return [
        "Every setting in which the arms differ; everything else (task, seed, agent kind, "
        "budgets, judge, isolation) is one config for all of them.",
        "",
        *table(["differs in", *run.arms], rows),
    ]


def sweep_comparisons(tables: Tables) -> list[str]:
    """The named comparisons across a sweep's seeds (each seed's arm best, the best of its
    seats), with the Hodges-Lehmann interval and the tie rule of :func:`stats.compare_arms`;
    nothing when no job has a private arm."""
    named: dict[tuple[str, str], str] = {}
    for run in tables.runs:
        for pair in pairs(run):
            named.setdefault((pair.a, pair.b), pair.measures)
    if not named:
        return []
    metric = tables.runs[0].metric
    noise = baseline_noise(tables)
    # compare_arms calls the larger better: a lower-is-better metric is compared by its
    # x_baseline (times better than the baseline), as the sweep's other comparisons are.
    column = "score" if metric.higher_is_better else "x_baseline"
    out = []
    for (a, b), measures in named.items():
        xs, ys = [], []
        for run in tables.runs:
            if a in run.arms and b in run.arms:
                best_a, best_b = arm_best(tables, run, a, column), arm_best(tables, run, b, column)
                if best_a is not None and best_b is not None:
                    xs.append(best_a)
                    ys.append(best_b)
        if not xs:
            out.append(f"- **{a} vs {b}** ({measures}): no seed where both have a PASS.")
            continue
        # The judge's relative noise at the scale of the values compared.
        sigma = noise[0] / noise[1] * float(pd.Series(ys).median()) if noise else None
        result = stats.compare_arms(xs, ys, arm_a=a, arm_b=b, noise_sigma=sigma)
        out.append(
            f"- **{a} vs {b}** ({measures}, {len(xs)} seed(s), {column}): difference "
            f"{num(result.difference)} [{num(result.ci_low)}, {num(result.ci_high)}] "
            f"({result.confidence:.0%} interval), p = {result.p_value:.3f}: {result.outcome}. "
            f"{result.reason}"
        )
    return out
