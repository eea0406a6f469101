"""The decode kind's generated mutants: derived from the task itself, no hand-written patch.

Language-agnostic: none of them edits the engine's source. The frozen-zone ones change the
tree (a byte of a frozen file, a file added to the frozen zone); the others add a small wrapper
program (``wrap.py``) in a non-frozen folder of the tree, and the judge serves that
mutant through it: the wrapper runs the task's real ``serve`` argv as a child and cheats behind
the protocol (shifted rows, a zeroed tail, stale state across reset, decode done during
prefill, B=1 twice as slow, lone requests slow only after a batch, at untimed shapes or at
random, a leak between two lone requests, a hang, a network attempt, a look for the judge's
folder).

The serve override is honoured only for the judge's own mutant repository (``<home>/mutants``),
for the commits the preflight recorded in ``<home>/mutant-serve.json``: an agent cannot write
either, so no submission can choose how it is served.
"""

from __future__ import annotations

import itertools
import json
import shutil
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from judge.mutant import (
    RANDOM_SLOW_FACTOR,
    Mutant,
    frozen_zone_mutants,
    random_slow_margin,
    wrap_dir,
)
from judge.private import batch_sizes

if TYPE_CHECKING:
    pass

WRAPPER = Path(__file__).with_name("wrap.py")

# The decode kind's checks: a catalogue must hold a WRONG with each of these reasons.
CHECK_REASONS = ("mismatch", "alternating", "prefill_cap", "b1_regression", "timeout")


def required_reasons(task: DictConfig) -> list[str]:
    """The verdicts ``verdict (reason)`` a catalogue of ``task`` must hold at least once."""
    needed = [f"WRONG ({r})" for r in CHECK_REASONS]
    if int(task.alternating.rounds) < 1:
        needed.remove("WRONG (alternating)")
    if list(task.frozen):
        needed.append("REJECT (frozen_zone)")
    return needed


def _add_wrapper(tree: Path, folder: str, settings: dict[str, object]) -> None:
    target = tree / folder
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(WRAPPER, target / "wrap.py")
    (target / "mutant.json").write_text(json.dumps(settings, indent=1) + "\n")


def stale_reason(task: DictConfig) -> str:
    """Where a B=1 request after a batched one is first seen: the correctness cases run in one
    process in order (a case of B=1 after a larger one is seen there), else the transition
    check."""
    biggest = 0
    for case in task.cases:
        if int(case.batch) == 1 and biggest > 1:
            return "mismatch"
        biggest = max(biggest, int(case.batch))
    return "alternating"


def lone_repeat_reason(cfg: DictConfig) -> str:
    """Where two lone requests first meet in one process: the transition walk (its loop at
    B=1), run before any B=1 unit, unless a naive pipeline's correctness cases hold two lone
    sets in a row first; without the walk, a unit's second lone request (its tokens checked)."""
    task = cfg.task
    lone = [int(c.batch) == 1 for c in task.cases]
    if str(cfg.judge.get("pipeline", "staged")) == "naive" and any(
        a and b for a, b in itertools.pairwise(lone)
    ):
        return "mismatch"
    return "alternating" if int(task.alternating.rounds) >= 1 else "mismatch"


def generated(cfg: DictConfig) -> list[Mutant]:
    """The decode kind's generic mutants of ``cfg.task``, each with its expected verdict."""
    from judge.private import home_path
    from tasks.schema import task_root

    task = cfg.task
    template = task_root(task) / task.template
    folder = wrap_dir(task)
    serve = ["{python}", "-I", "-B", f"{folder}/wrap.py", *list(task.serve)]
    steps = [int(c.new_tokens) for c in task.cases]
    steps += [
        int(task.timing.new_tokens),
        int(task.b1.new_tokens),
        int(task.alternating.new_tokens),
    ]
    home = home_path(cfg)
    b1_margin = round(1.0 - float(task.spec.b1_max_regression), 4)

    def wrapped(
        name: str,
        mode: str,
        expect: str,
        reason: str | None,
        why: str,
        max_x: float | None = None,
        b1_margin: float | None = None,
        **extra: object,
    ) -> Mutant:
        settings = {"mode": mode, "vocab": int(task.vocab), **extra}
        return Mutant(
            name=name,
            patch=None,
            expect=expect,
            reason=reason,
            max_x_baseline=max_x,
            b1_margin=b1_margin,
            why=why,
            tree=partial(_add_wrapper, folder=folder, settings=settings),
            serve=serve,
            source="generated",
        )

    mutants = [
        Mutant(
            name="baseline",
            patch=None,
            expect="PASS",
            # One evaluation's x for identical code scatters (SD ~0.12 seen, heavy tails).
            max_x_baseline=2.0,
            why="the template as it is: valid, and about as fast as itself",
            source="generated",
        ),
        wrapped(
            "gen_row_shift",
            "row_shift",
            "WRONG",
            "mismatch",
            "when B > 1, row i returns row (i+1) % B's tokens",
        ),
        wrapped(
            "gen_early_stop",
            "early_stop",
            "WRONG",
            "mismatch",
            "each row's last min(8, steps/4) steps are not decoded (zeros)",
        ),
        wrapped(
            "gen_garbage_row",
            "garbage_row",
            "WRONG",
            "mismatch",
            "the last row's tokens are each off by one",
        ),
        wrapped(
            "gen_fake_metric",
            "fake_metric",
            "PASS",
            None,
            "prints and writes a fake 999999 tok/s (stderr, /tmp/timing.json,"
            " $SWARMLAB_BUILD/timing.json), then runs the engine unchanged; never trusted",
            max_x=2.0,
        ),
        wrapped(
            "gen_decode_in_prefill",
            "decode_in_prefill",
            "WRONG",
            "prefill_cap",
            f"prefill also decodes {max(steps)} steps ahead; decode serves them from memory",
            ahead=max(steps),
        ),
        wrapped(
            "gen_b1_slow_2x",
            "b1_slow",
            "WRONG",
            "b1_regression",
            "at B=1 every prefill and decode waits as long as it took: twice as slow",
            # 2x lies this far beyond the limit: a machine resolving B=1 no finer is UNRESOLVED.
            b1_margin=b1_margin,
        ),
        wrapped(
            "gen_b1_pad_after_batch",
            "pad_after_batch",
            "WRONG",
            "b1_regression",
            "once it has served a batch, every lone request is padded to that batch's size"
            " (a natural B=16 optimisation): as fast as ever in a fresh process",
            b1_margin=b1_margin,
        ),
        wrapped(
            "gen_b1_pad_after_small_batch",
            "pad_after_small_batch",
            "WRONG",
            "b1_regression",
            "a lone request after a batch smaller than the largest is padded to the largest"
            " (red team: one batch size per unit never convicted it)",
            b1_margin=b1_margin,
            largest=max(batch_sizes(task)),
        ),
        wrapped(
            "gen_b1_slow_untimed",
            "b1_slow_untimed",
            "WRONG",
            "b1_regression",
            "lone requests twice as slow at every prompt or output length but the b1 block's"
            f" ({int(task.b1.new_tokens)} steps, prompts of {list(task.b1.prompt_len)})",
            b1_margin=b1_margin,
            timed_steps=int(task.b1.new_tokens),
            timed_prompt_len=[int(n) for n in task.b1.prompt_len],
        ),
        wrapped(
            "gen_b1_random_slow",
            "b1_random_slow",
            "WRONG",
            "b1_regression",
            f"2 of every 5 lone requests, drawn at random, {RANDOM_SLOW_FACTOR:g} times as slow"
            " (the median untouched)",
            b1_margin=random_slow_margin(float(task.spec.b1_max_regression)),
            slow_factor=RANDOM_SLOW_FACTOR,
        ),
        wrapped(
            "gen_lone_repeat_leak",
            "lone_repeat_leak",
            "WRONG",
            lone_repeat_reason(cfg),
            "a lone request right after another lone request in the same process gets wrong"
            " tokens (a row cache kept between two requests of one size)",
        ),
        wrapped("gen_hang", "hang", "WRONG", "timeout", "decode never answers"),
        wrapped(
            "gen_network",
            "network",
            "WRONG",
            "crash",
            "a UDP connect() to TEST-NET-1 (no packet sent) at start; exits when it fails,"
            " serves honestly (PASS) where the sandbox has a network",
        ),
        wrapped(
            "gen_read_judge",
            "read_judge",
            "WRONG",
            "crash",
            "looks for the judge's private folder and queue at start; exits when none is"
            " reachable, serves honestly (PASS) where one is",
            paths=[str(home), str(home / "queue.sqlite")],
            basename="queue.sqlite",
        ),
    ]
    if int(task.alternating.rounds) >= 1 or stale_reason(task) == "mismatch":
        mutants.append(
            wrapped(
                "gen_stale_state",
                "stale_state",
                "WRONG",
                stale_reason(task),
                "a B=1 request after a batched one in the same process returns that"
                " batch's row 0 (state that survived reset)",
            )
        )
    mutants += frozen_zone_mutants(template, list(task.frozen))
    return mutants
