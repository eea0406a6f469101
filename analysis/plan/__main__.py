"""``python -m analysis.plan DIR [DIR ...] [--out OUT] [--minutes M] [--seats 1,2,5]
[--speeds 1,2] [--draws N] [--max-seeds N] [--quick]``.

Prints the plan (Markdown) and writes its tables, figure and ``plan.md`` to OUT (default:
``<first DIR>/analysis/plan``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.plan.build import make_plan, render, write_plan


def main(argv: Sequence[str] | None = None) -> int:
    """Run the planner; 0 on success, 2 when a folder holds no run."""
    parser = argparse.ArgumentParser(prog="python -m analysis.plan", description=__doc__)
    parser.add_argument("dirs", nargs="+", type=Path, help="finished run or sweep folders")
    parser.add_argument("--out", type=Path, help="where to write (default: DIR/analysis/plan)")
    parser.add_argument(
        "--minutes", type=float, help="simulated run length (default: the runs' budget)"
    )
    parser.add_argument("--draws", type=int, default=200, help="draws per power estimate")
    parser.add_argument("--max-seeds", type=int, default=10, help="most seeds per arm tried")
    parser.add_argument(
        "--seats", help="seats per arm to simulate, comma-separated (default: 1,2,5,10,20,50,100)"
    )
    parser.add_argument(
        "--speeds",
        help="judge speeds to simulate, relative to the recorded judge, comma-separated "
        "(default: 1,2; 0.5: a judge half as fast, e.g. a loaded machine)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one simulation per table row instead of three (a rough table, faster)",
    )
    args = parser.parse_args(argv)
    try:
        plan = make_plan(
            args.dirs,
            horizon_s=args.minutes * 60 if args.minutes else None,
            replications=1 if args.quick else 3,
            draws=args.draws,
            max_seeds=args.max_seeds,
            **({"seats": [int(x) for x in args.seats.split(",")]} if args.seats else {}),
            **({"speeds": [float(x) for x in args.speeds.split(",")]} if args.speeds else {}),
        )
    except ValueError as exc:
        print(f"analysis.plan: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.dirs[0] / "analysis" / "plan"
    write_plan(plan, out)
    print(render(plan, figure=str(out / "plan.png")))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
