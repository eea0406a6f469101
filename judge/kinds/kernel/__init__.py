"""The ``kernel`` kind: one function of the candidate's tree (numpy, or C behind ctypes/cffi)
called on inputs drawn per evaluation, its results checked against the baseline's on the same
inputs, scored by its median call time against the baseline's (docs/kinds-kernel.md).

Everything of the kind is in this package: its node (``config``), the judge's harness run in
the sandbox (``harness``), the evaluator (``evaluator``) and the generated mutants
(``mutants``, ``wrap``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig

from judge.kinds.base import Evaluator, Metric
from judge.kinds.kernel.config import KernelTaskConfig
from judge.kinds.registry import task_kind
from tasks.schema import task_root

if TYPE_CHECKING:
    from judge.mutant import Mutant
    from judge.private import InputSet, JudgeHome


@task_kind("kernel")
class KernelKind:
    """A function timed call by call by the judge's harness, in the sandbox."""

    name = "kernel"
    # The task config's node of this kind: the fields every kind has and ``kernel``.
    task_node = KernelTaskConfig

    def metric(self, task: DictConfig) -> Metric:
        """The median time of one call (ms), lower is better; written as ``call_ms`` and
        ``score`` (``baseline_call_ms`` and ``baseline_score``)."""
        from judge.kinds.kernel.config import KernelTaskError, kernel_config

        try:
            function = kernel_config(task).function.partition(":")[2]
        except (KernelTaskError, KeyError, AttributeError):  # an old record's bare task
            function = "kernel"
        return Metric(
            name="call_ms", unit="ms", label=f"median {function} call ms", higher_is_better=False
        )

    def evaluator(self, cfg: DictConfig, home: JudgeHome) -> Evaluator:
        from judge.kinds.kernel.evaluator import KernelEvaluator

        return KernelEvaluator(cfg, home, self)

    def generated_mutants(self, cfg: DictConfig) -> list[Mutant]:
        from judge.kinds.kernel.mutants import generated

        return generated(cfg)

    def scaffold(self, target: Path, name: str | None = None) -> Path:
        """Write a working task folder of this kind into ``target`` (``new-task``): a row-wise
        softmax in numpy, a Python loop over rows to start from.

        Raises:
            FileExistsError: ``target`` exists and is not an empty folder.
        """
        from judge.kinds.scaffold import write_scaffold

        return write_scaffold(Path(__file__).with_name("scaffold_files"), target, name)

    def required_reasons(self, task: DictConfig) -> list[str]:
        """The verdicts a preflight catalogue must hold once each (one per check)."""
        from judge.kinds.kernel.mutants import required_reasons

        return required_reasons(task)

    def check_inputs(self, task: DictConfig) -> str | None:
        """Why the task's kernel node or input generator is unusable (one line), or None: the
        node is read and one call's inputs drawn, on the host."""
        from judge.kinds.kernel.config import inputs_problem

        return inputs_problem(task)

    def stored_sets(self, cfg: DictConfig, seed: int) -> list[InputSet]:
        """None: every evaluation draws its inputs, call by call, and runs the baseline on
        them (set-up stores no set)."""
        return []

    def inputs_files(self, task: DictConfig) -> list[Path]:
        """The file of the task's input generator (``kernel.inputs``): it joins the task's
        fingerprint."""
        from judge.kinds.kernel.config import kernel_config

        path = task_root(task) / kernel_config(task).inputs.partition(":")[0]
        return [path] if path.is_file() else []

    def baseline_references(
        self, cfg: DictConfig, baseline: Path, sets: list[InputSet], progress: Any
    ) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
        """Set-up's stored references: none (:meth:`stored_sets` stores no set; every
        evaluation runs the baseline on its own fresh inputs); the kernel node and the input
        generator are checked here, once, on the host.

        Raises:
            KernelTaskError: the node or the generator is unusable.
        """
        from judge.kinds.kernel.config import draw_inputs, kernel_config

        kernel_config(cfg.task)
        draw_inputs(cfg.task, 0)
        empty = np.zeros((0,), dtype=np.int64)
        # ``sets`` is :meth:`stored_sets`' (none): each would get an empty reference.
        arrays = {}
        for s in sets:
            arrays[f"tokens/{s.name}"] = empty
            arrays[f"margins/{s.name}"] = empty.astype(np.float64)
        return arrays, {s.name: (0.0, 0.0) for s in sets}
