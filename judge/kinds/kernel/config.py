"""The kernel kind's node: which function is timed, on what inputs, to what tolerance.

A kernel task's ``task.yaml`` holds a ``kernel:`` node (:class:`KernelConfig`), its task
validated against :class:`KernelTaskConfig` (the kind's ``task_node``): an unknown key or a
value of the wrong type is Hydra's own error when the task is composed (docs/kinds-kernel.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import MISSING, DictConfig, OmegaConf

from tasks.schema import TaskConfig, task_root


@dataclass
class KernelConfig:
    """The kernel kind's settings (``task.kernel``).

    Attributes:
        function: ``FILE.py:NAME`` of the candidate's tree: the function timed, called with the
            input arrays as positional arguments, returning one ``numpy.ndarray`` (a C kernel
            is wrapped by a Python function, through ctypes or cffi).
        inputs: ``FILE.py:FUNCTION`` of the task folder that draws one call's inputs:
            ``f(seed) -> list of numpy arrays`` (the judge draws them, from a seed new to every
            call of every evaluation); the file joins the task's fingerprint.
        rtol: relative tolerance of the comparison with the baseline's output
            (``numpy.allclose``); 0 with ``atol`` 0: equal bytes.
        atol: absolute tolerance.
        warmup: untimed (but checked) calls per process before the timed ones.
        calls: timed calls of each side, candidate and baseline in pairs on the same inputs,
            the order alternating; the score is the median of each side's times.
        timeout_factor: a candidate's call may take this many times the baseline's slowest
            call so far, plus ``timeout_floor_s``.
        timeout_floor_s: see ``timeout_factor``.
        load_timeout_s: how long importing the function may take.
    """

    function: str = MISSING
    inputs: str = "inputs.py:make_inputs"
    rtol: float = 0.0
    atol: float = 0.0
    warmup: int = 1
    calls: int = 5
    timeout_factor: float = 20.0
    timeout_floor_s: float = 2.0
    load_timeout_s: float = 60.0

    @property
    def exact(self) -> bool:
        """Whether outputs must be equal byte for byte."""
        return self.rtol == 0 and self.atol == 0


@dataclass
class KernelTaskConfig(TaskConfig):
    """A task of the kernel kind: the fields every kind has and its ``kernel`` node (no
    prompt fields: the kind draws its inputs per call, and runs the judge's own harness, never
    a command of the task)."""

    kernel: KernelConfig = MISSING


class KernelTaskError(ValueError):
    """The task's kernel node or generator is unusable (the task's fault, one line)."""


def _task_file(task: DictConfig) -> Path:
    return task_root(task) / "task.yaml"


def _inputs_file(task: DictConfig) -> Path:
    return task_root(task) / kernel_config(task).inputs.partition(":")[0]


def kernel_config(task: DictConfig) -> KernelConfig:
    """The kernel node of ``task``.

    Raises:
        KernelTaskError: no node, an unknown key, a missing ``function``, or a count or
            tolerance out of range.
    """
    node = task.get("kernel") if isinstance(task, DictConfig) else None
    if node is None:
        raise KernelTaskError(
            f"{_task_file(task)}: no kernel node (function, inputs, rtol, atol, ...):"
            " the kernel kind reads its settings there (docs/kinds-kernel.md)"
        )
    try:
        # Typed by the schema when the task was composed; merged here too for a plain mapping.
        typed = OmegaConf.merge(OmegaConf.structured(KernelConfig), node)
        config: KernelConfig = OmegaConf.to_object(typed)  # type: ignore[assignment]
    except Exception as exc:  # omegaconf's errors: an unknown key, a missing value, a type
        # omegaconf's message ends with where the node lies (full_key, types): the key's name
        # is already in it.
        said = " ".join(str(exc).partition("full_key:")[0].split())
        raise KernelTaskError(f"{_task_file(task)}: kernel: {said}") from None
    if config.calls < 1 or config.warmup < 0 or config.rtol < 0 or config.atol < 0:
        raise KernelTaskError(f"{_task_file(task)}: kernel: calls >= 1, warmup, tolerances >= 0")
    return config


def generator(task: DictConfig) -> Callable[[int], list[np.ndarray]]:
    """The task's input generator (``kernel.inputs``), loaded from its file by path.

    Raises:
        KernelTaskError: the file or the function cannot be loaded.
    """
    from tasks.folder import TaskFolderError, load_task_callable

    try:
        return load_task_callable(kernel_config(task).inputs, task_root(task))
    except TaskFolderError as exc:
        raise KernelTaskError(str(exc)) from None


def inputs_problem(task: DictConfig) -> str | None:
    """Why the task's kernel node or generator is unusable (one line), or None: the node is
    read and one call's inputs drawn on the host."""
    try:
        draw_inputs(task, 0)
    except KernelTaskError as exc:
        return str(exc)
    return None


def draw_inputs(task: DictConfig, seed: int) -> list[np.ndarray]:
    """One call's inputs, drawn from ``seed`` by the task's generator, checked.

    Raises:
        KernelTaskError: the generator raised or returned anything but a non-empty list of
            numeric numpy arrays.
    """
    try:
        arrays = generator(task)(int(seed))
    except KernelTaskError:
        raise
    except Exception as exc:  # the task's code: any failure is the task's to fix
        raise KernelTaskError(
            f"{_inputs_file(task)}: the generator raised {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(arrays, list | tuple) or not arrays:
        raise KernelTaskError(f"{_inputs_file(task)}: the generator must return a list of arrays")
    out = []
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
            raise KernelTaskError(
                f"{_inputs_file(task)}: the generator returned a {type(a).__name__}"
                " where a numeric numpy array belongs"
            )
        out.append(np.ascontiguousarray(a))
    return out
