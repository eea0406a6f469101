"""The scripted agent's command line."""

from __future__ import annotations

import argparse
import os
import sys
import time

from agents.scripted import __doc__ as DOC
from agents.scripted.agent import ANY
from agents.scripted.card import TaskCard
from agents.scripted.critic import Critic
from agents.scripted.util import as_float
from agents.scripted.worker import Worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DOC.split("\n\n")[0])
    parser.add_argument("--role", choices=("worker", "critic"), required=True)
    parser.add_argument(
        "--direction", default="any", help="one of the task card's directions, or any"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--moves", required=True, help="the task's move library (a folder)")
    parser.add_argument(
        "--deadline",
        type=float,
        default=as_float(os.environ.get("SWARMLAB_DEADLINE")) or time.time() + 3600,
        help="epoch seconds (default: $SWARMLAB_DEADLINE, else an hour from now)",
    )
    args = parser.parse_args(argv)
    try:
        card = TaskCard.from_environ()
    except (ValueError, KeyError, TypeError) as exc:
        parser.error(f"the task card: {exc}")
    names = card.direction_names()
    if args.direction not in names and args.direction not in ANY:
        parser.error(
            f"--direction {args.direction}: task {card.name} has "
            + (f"directions {', '.join(names)}" if names else "no directions")
            + " (or use any)"
        )
    # Everything goes to stdout, tracebacks included: the supervisor keeps the container's
    # output, and a crash is restarted with SWARMLAB_KEEP_GOING=1 (it resumes from its notes).
    sys.stderr = sys.stdout
    agent: Worker | Critic = Worker(args) if args.role == "worker" else Critic(args)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
