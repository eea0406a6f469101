"""The kernel kind's generated mutants: the template's function wrapped (``wrap.py``, copied
into a folder of the tree outside the frozen zone; the function's file rebinds its name to the
wrapper), so they hold for any kernel the task times, numpy or C behind ctypes/cffi."""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

from omegaconf import DictConfig

from judge.integrity import in_zone
from judge.kinds.kernel.config import kernel_config
from judge.mutant import Mutant, frozen_zone_mutants
from tasks.schema import task_root

WRAPPER = Path(__file__).with_name("wrap.py")
WRAP_DIRS = (".swarmlab_mutant", ".swarmlab_mutant_wrap")
# The kind's checks: a catalogue must hold a WRONG with each of these reasons.
CHECK_REASONS = (
    "mismatch",
    "not_array",
    "aliased",
    "input_mutated",
    "late",
    "timeout",
    "protocol",
)
# Appended to the function's file: its name rebound to the wrapper of the original.
_REBIND = """

# A swarmlab generated mutant (judge/kinds/kernel/mutants.py): {name} wrapped.
def _swarmlab_mutant(original):
    import importlib.util, json, pathlib
    here = pathlib.Path(__file__).resolve().parents[{depth}] / {folder!r}
    spec = importlib.util.spec_from_file_location("swarmlab_kernel_wrap", here / "wrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.wrap(original, json.loads((here / "mutant.json").read_text()))


{name} = _swarmlab_mutant({name})
"""


def required_reasons(task: DictConfig) -> list[str]:
    """The verdicts ``verdict (reason)`` a catalogue of ``task`` must hold at least once."""
    needed = [f"WRONG ({r})" for r in CHECK_REASONS]
    if list(task.frozen):
        needed.append("REJECT (frozen_zone)")
    return needed


def _wrap_dir(task: DictConfig) -> str:
    for name in WRAP_DIRS:
        if not in_zone(f"{name}/wrap.py", list(task.frozen)):
            return name
    raise ValueError(f"task {task.name}: its frozen zone covers every wrapper folder {WRAP_DIRS}")


def _install(tree: Path, function: str, folder: str, settings: dict[str, object]) -> None:
    file, _, name = function.partition(":")
    target = tree / folder
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(WRAPPER, target / "wrap.py")
    (target / "mutant.json").write_text(json.dumps(settings, indent=1) + "\n")
    source = tree / file
    depth = len(Path(file).parts) - 1
    source.write_text(source.read_text() + _REBIND.format(name=name, depth=depth, folder=folder))


def generated(cfg: DictConfig) -> list[Mutant]:
    """The kind's mutants of ``cfg.task``: the template, every cheat, a wrong and a slow one."""
    task = cfg.task
    config = kernel_config(task)
    folder = _wrap_dir(task)

    def wrapped(
        name: str,
        mode: str,
        expect: str,
        reason: str | None,
        why: str,
        max_x: float | None = None,
        also: tuple[str, ...] = (),
    ) -> Mutant:
        settings = {"mode": mode, "rtol": config.rtol, "atol": config.atol}
        return Mutant(
            name=name,
            patch=None,
            expect=expect,
            reason=reason,
            max_x_baseline=max_x,
            also_accept=also,
            why=why,
            tree=partial(_install, function=config.function, folder=folder, settings=settings),
            source="generated",
        )

    mutants = [
        Mutant(
            name="baseline",
            patch=None,
            expect="PASS",
            min_x_baseline=0.5,
            max_x_baseline=2.0,
            why="the template as it is: valid, and about as fast as itself",
            source="generated",
        ),
        wrapped("gen_wrong", "wrong", "WRONG", "mismatch", "one value of the result off by one"),
        wrapped(
            "gen_cache_identity",
            "cache_identity",
            "WRONG",
            "mismatch",
            "results cached by the arguments' identity: the harness reuses its buffers, so the"
            " second call answers the first call's values",
        ),
        # Fresh inputs on every call: a cache keyed on content never answers, so it gains
        # nothing (were any input repeated, x would be far above the bound).
        wrapped(
            "gen_cache_content",
            "cache_content",
            "PASS",
            None,
            "results cached by the arguments' content: never a hit, no gain",
            max_x=1.5,
        ),
        wrapped(
            "gen_inplace",
            "inplace",
            "WRONG",
            "input_mutated",
            "the first argument used as scratch after the result is made",
        ),
        wrapped(
            "gen_alias",
            "alias",
            "WRONG",
            "aliased",
            "the result written into the first argument's memory and returned",
        ),
        wrapped(
            "gen_lazy",
            "lazy",
            "WRONG",
            "not_array",
            "a lazy object returned, the work done when the result is read",
        ),
        wrapped(
            "gen_late_thread",
            "late_thread",
            "WRONG",
            "late",
            "an empty result returned while a thread computes it after the clock stops",
            # Read back before the thread finished, the zeros are simply wrong.
            also=("WRONG (mismatch)",),
        ),
        # A red team's cheats (docs/kinds-kernel.md): work after the clock stopped, hidden by
        # fitting the result to a commitment sent ahead (possible against a linear fold, not
        # against the sha256 the call now commits to), and replies from the candidate's
        # process that once made an uncharged judge fault.
        wrapped(
            "gen_defer_to_get_fold_fit",
            "defer_to_get_fold_fit",
            "WRONG",
            "late",
            "the harness's call rewritten to answer at once with the commitment of zeros, the"
            " work done in the untimed get and fitted to it within the tolerance",
        ),
        wrapped(
            "gen_late_thread_fold_fit",
            "late_thread_fold_fit",
            "WRONG",
            "late",
            "zeros returned at once, a thread writing the result after the clock stops, fitted"
            " to the zeros' commitment within the tolerance",
            also=("WRONG (mismatch)",),
        ),
        wrapped(
            "gen_reply_field_types",
            "reply_field_types",
            "WRONG",
            "protocol",
            "the harness's get rewritten to reply inputs=7: a malformed reply is the"
            " candidate's (charged), never a judge fault",
        ),
        wrapped(
            "gen_shape_overflow",
            "shape_overflow",
            "WRONG",
            "protocol",
            "the harness's get rewritten to reply shape [2**32, 2**32] with nbytes 0 (the"
            " product wraps an int64 to 0): refused as a protocol error, not a judge fault",
        ),
        wrapped(
            "gen_short_read",
            "short_read",
            "WRONG",
            "protocol",
            "the harness's read rewritten to send 3 bytes, whatever was asked for: refused as a"
            " protocol error, not a judge fault",
        ),
        wrapped(
            "gen_huge_shape",
            "huge_shape",
            "WRONG",
            "protocol",
            "the harness's get rewritten to reply shape [0, 2**62] with nbytes 0 (a size that"
            " adds up, a shape numpy cannot make): the candidate's, never a judge fault",
        ),
        wrapped(
            "gen_get_type_flip",
            "get_type_flip",
            "WRONG",
            "protocol",
            "the call says ndarray with its sha256, the untimed get says list with no layout:"
            " the candidate's, never a judge fault",
        ),
        wrapped(
            "gen_error_on_demand",
            "error_on_demand",
            "WRONG",
            "protocol",
            "a wrong result that its own untimed check in get turns into a reply that once made"
            " an uncharged judge fault (an evaluation re-rolled until lucky): charged",
            also=("WRONG (mismatch)",),
        ),
        wrapped(
            "gen_stop_reading_stdin",
            "stop_reading_stdin",
            "WRONG",
            "timeout",
            "after its reply to the first call's last read, the harness never reads stdin again"
            " and writes stderr without end: the next put is a send that times out (it once"
            " hung the judge for good)",
        ),
        wrapped(
            "gen_slower",
            "slower",
            "PASS",
            None,
            "every call computed three times: correct, about a third as fast",
            max_x=0.8,
        ),
        wrapped("gen_hang", "hang", "WRONG", "timeout", "a call never returns"),
        wrapped("gen_crash", "crash", "WRONG", "crash", "a call raises"),
    ]
    if not config.exact:
        mutants.insert(
            2,
            wrapped(
                "gen_within_tolerance",
                "within_tolerance",
                "PASS",
                None,
                "float results moved by a tenth of rtol: within the task's tolerance",
            ),
        )
    template = task_root(task) / task.template
    return mutants + frozen_zone_mutants(template, list(task.frozen))
