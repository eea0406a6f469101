"""What every task kind provides: its metric, its evaluation and its generated mutants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from omegaconf import DictConfig

if TYPE_CHECKING:
    from judge.preflight import Mutant
    from judge.private import JudgeHome
    from judge.queue import Job
    from judge.verdict import Evaluation


@dataclass(frozen=True)
class Metric:
    """The number a kind scores a candidate by.

    ``name`` is the key of the evaluation's metrics that holds it (``score`` holds it too),
    ``unit`` what it is counted in, ``label`` how a report names it for one task.
    """

    name: str
    unit: str
    label: str
    higher_is_better: bool = True

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "unit": self.unit,
            "label": self.label,
            "higher_is_better": self.higher_is_better,
        }


class Evaluator(Protocol):
    """Scores one job of the queue in a fresh sandbox."""

    def evaluate(self, job: Job) -> Evaluation: ...


class TaskKind(Protocol):
    """A kind of task: one module of ``judge.kinds``, registered by name."""

    name: str

    def metric(self, task: DictConfig) -> Metric:
        """The metric of ``task`` (name, unit, label, direction)."""
        ...

    def evaluator(self, cfg: DictConfig, home: JudgeHome) -> Evaluator:
        """An evaluator of candidates of ``cfg.task`` against ``home``'s baseline."""
        ...

    def generated_mutants(self, cfg: DictConfig) -> list[Mutant]:
        """The kind's generic mutants, derived from the task itself (no hand-written patch)."""
        ...
