"""The kernel kind's node: which function is timed, on what inputs, to what tolerance.

Today the node is the module-level ``KERNEL`` mapping of the task's input file (the file
``task.inputs`` names, which the task's fingerprint already hashes): the task schema
(``tasks/schema.py``) refuses keys it does not know, so a ``kernel:`` node of ``task.yaml`` would
be refused. When the schema takes the kind's node from the kind, ``task.kernel`` is read first
and the same fields are written there (docs/kinds-kernel.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from tasks.schema import task_root


@dataclass(frozen=True)
class KernelConfig:
    """The kernel kind's settings.

    Attributes:
        function: ``FILE.py:NAME`` of the candidate's tree: the function timed, called with the
            input arrays as positional arguments, returning one ``numpy.ndarray`` (a C kernel
            is wrapped by a Python function, through ctypes or cffi).
        generator: the function of the task's input file that draws one call's inputs:
            ``generator(seed) -> list of numpy arrays`` (the judge draws them, from a seed new
            to every call of every evaluation).
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

    function: str
    generator: str = "make_inputs"
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


class KernelTaskError(ValueError):
    """The task's kernel node or generator is unusable (the task's fault, one line)."""


def _node(task: DictConfig) -> Mapping[str, Any]:
    if "kernel" in task and task.kernel is not None:
        return OmegaConf.to_container(task.kernel, resolve=True)  # type: ignore[return-value]
    module = _inputs_module(task)
    node = module.get("KERNEL")
    if not isinstance(node, Mapping):
        raise KernelTaskError(
            f"{_inputs_file(task)}: no KERNEL mapping (function, generator, rtol, atol, ...):"
            " the kernel kind reads its settings there (docs/kinds-kernel.md)"
        )
    return node


def _inputs_file(task: DictConfig) -> Path:
    return task_root(task) / str(task.inputs).partition(":")[0]


def _inputs_module(task: DictConfig) -> dict[str, Any]:
    from tasks.folder import TaskFolderError, load_task_callable

    try:
        # Loaded by path like every task file; any function of it reaches the module's names.
        function = load_task_callable(str(task.inputs), task_root(task))
    except TaskFolderError as exc:
        raise KernelTaskError(str(exc)) from None
    return function.__globals__


def kernel_config(task: DictConfig) -> KernelConfig:
    """The kernel node of ``task``.

    Raises:
        KernelTaskError: no node, an unknown key, or a missing ``function``.
    """
    node = dict(_node(task))
    known = {f.name for f in fields(KernelConfig)}
    unknown = sorted(set(node) - known)
    if unknown or "function" not in node:
        raise KernelTaskError(
            f"{_inputs_file(task)}: KERNEL: unknown keys {', '.join(unknown)}"
            if unknown
            else f"{_inputs_file(task)}: KERNEL needs function: 'FILE.py:NAME'"
        )
    config = KernelConfig(**node)
    if config.calls < 1 or config.warmup < 0 or config.rtol < 0 or config.atol < 0:
        raise KernelTaskError(f"{_inputs_file(task)}: KERNEL: calls >= 1, warmup, tolerances >= 0")
    return config


def generator(task: DictConfig) -> Callable[[int], list[np.ndarray]]:
    """The task's input generator (``KERNEL.generator`` of its input file)."""
    name = kernel_config(task).generator
    function = _inputs_module(task).get(name)
    if not callable(function):
        raise KernelTaskError(f"{_inputs_file(task)}: KERNEL.generator: no function {name}")
    return function


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
