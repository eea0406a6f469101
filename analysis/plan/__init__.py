"""The planner: ``python -m analysis.plan DIR [DIR ...]`` (runs, sweeps, or both).

From what finished runs recorded, before the next run is paid for: how many agents a judge can
feed (a simpy simulation of the judge queue: team size x judge speed x devices, and the knee),
what another judge would have done with the same submissions (counterfactual replay), and how
many seeds per arm a comparison needs (power with the report's own test). Every prediction is
a simulation and is labelled so; docs/plan.md says what it reads and assumes.

Modules: :mod:`~analysis.plan.fit` (what a run recorded), :mod:`~analysis.plan.sim` (the judge
pool), :mod:`~analysis.plan.team` (the team table and knee), :mod:`~analysis.plan.counterfactual`
(replays and the self-replay check), :mod:`~analysis.plan.power` (seeds and power),
:mod:`~analysis.plan.figure` and :mod:`~analysis.plan.build` (the whole plan, its Markdown and
files).
"""

from __future__ import annotations

from analysis.plan.build import Plan, make_plan, render, write_plan

__all__ = ["Plan", "make_plan", "render", "write_plan"]
