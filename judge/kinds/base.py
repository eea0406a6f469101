"""What every task kind provides: its metric, its evaluation and its generated mutants.

A kind is one package of ``judge.kinds`` (``judge/kinds/<name>/``: its config node, evaluator,
checks, references, generated mutants and scaffold) holding a class decorated with
``@task_kind("name")`` (``judge.kinds.registry``) that has the methods of :class:`TaskKind`.
Its evaluator runs each job on the shared skeleton (:class:`judge.pipeline.Run`: stages, the
judge-fault rule, the redaction, the log), passing the kind itself. It writes, for every PASS,
``metrics["score"]`` (the metric's value), ``metrics["baseline_score"]`` (the same evaluation's
baseline's) and ``metrics["x_baseline"]`` (how many times better than the baseline,
:meth:`Metric.ratio`: score / baseline score, inverted for a lower-is-better metric).
Everything after the judge (runner summary, re-judging, tables, figures, report) reads only
those keys and the :class:`Metric` the run recorded, so a new kind needs no change outside its
own package (``tests/test_import_graph.py`` checks that nothing else names a kind).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from omegaconf import DictConfig

if TYPE_CHECKING:
    from pathlib import Path

    from judge.mutant import Mutant
    from judge.private import InputSet, JudgeHome
    from judge.queue import Job
    from judge.verdict import Evaluation


@dataclass(frozen=True)
class Metric:
    """The number a kind scores a candidate by.

    ``name`` is the kind's own key of the evaluation's metrics that holds it (``score`` holds
    it too), ``unit`` what it is counted in, ``label`` how a report names it for one task,
    ``higher_is_better`` its direction (a latency's is False: the best is the minimum).
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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metric:
        """The metric a record wrote with :meth:`to_dict`."""
        return cls(
            name=str(data["name"]),
            unit=str(data.get("unit", "")),
            label=str(data.get("label") or data["name"]),
            higher_is_better=bool(data.get("higher_is_better", True)),
        )

    # Records made before kinds owned their metric hold the value under the kind's own key
    # only (and the baseline's under ``baseline_<name>``): read those as the score.
    def score_keys(self) -> tuple[str, str]:
        """The metrics keys holding the candidate's value, in the order they are looked up."""
        return ("score", self.name)

    def baseline_keys(self) -> tuple[str, str]:
        """The metrics keys holding the same evaluation's baseline value, looked up in order."""
        return ("baseline_score", f"baseline_{self.name}")

    def score(self, metrics: Mapping[str, Any]) -> float | None:
        """The candidate's value in an evaluation's ``metrics`` (None when it has none)."""
        return _first(metrics, self.score_keys())

    def baseline_score(self, metrics: Mapping[str, Any]) -> float | None:
        """The baseline's value in an evaluation's ``metrics`` (None when it has none)."""
        return _first(metrics, self.baseline_keys())

    def better(self, a: float, b: float) -> bool:
        """Whether value ``a`` is strictly better than ``b`` in this metric's direction."""
        return a > b if self.higher_is_better else a < b

    def best(self, values: Iterable[float | None]) -> float | None:
        """The best of ``values`` (NaN and None skipped; None when nothing is left)."""
        kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
        if not kept:
            return None
        return max(kept) if self.higher_is_better else min(kept)

    def ratio(self, value: float, reference: float) -> float:
        """How many times better ``value`` is than ``reference`` (> 1: better): ``value /
        reference``, or ``reference / value`` where lower is better. ``x_baseline`` is this
        ratio over the same evaluation's baseline, so it reads the same way for every kind."""
        return value / reference if self.higher_is_better else reference / value

    def gain(self, best: float, baseline: float) -> float:
        """How much better ``best`` is than ``baseline``, positive when it is better."""
        return best - baseline if self.higher_is_better else baseline - best


def _first(metrics: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


class Evaluator(Protocol):
    """Scores one job of the queue in a fresh sandbox."""

    def evaluate(self, job: Job) -> Evaluation:
        """The verdict on ``job``: PASS with ``score``/``baseline_score``/``x_baseline``, or
        WRONG/REJECT/ERROR with a reason; a judge fault is ERROR, never charged."""
        ...


class TaskKind(Protocol):
    """A kind of task: one package of ``judge.kinds``, registered by name."""

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

    def required_reasons(self, task: DictConfig) -> list[str]:
        """The verdicts (``"WRONG (mismatch)"``, …) a preflight catalogue must hold at least
        once each: one per check of the kind, so that no check goes untested."""
        ...

    # What set-up (``judge.private``) asks of the kind: a kind whose hidden inputs are prompts
    # takes all three from ``judge.kinds.prompt.PromptKind``.

    def check_inputs(self, task: DictConfig) -> str | None:
        """Why the task's inputs cannot be drawn (one line naming the file and the fix), or
        None: tried cheaply when a task is composed and again at set-up, before any folder
        is made."""
        ...

    def stored_sets(self, cfg: DictConfig, seed: int) -> list[InputSet]:
        """The hidden sets set-up stores for one sets seed, drawn from ``seed`` (the secret
        and the sets seed together), the baseline's answers recorded by
        ``baseline_references``; empty for a kind that draws every input per evaluation."""
        ...

    def inputs_files(self, task: DictConfig) -> list[Path]:
        """The task's files whose code draws its hidden inputs: their bytes join the task's
        fingerprint (``judge.private.task_fingerprint``)."""
        ...

    # Optional: ``scaffold(target: Path, name: str | None) -> Path`` writes a working task
    # folder of the kind (``python -m judge new-task DIR --kind NAME``).
    # Optional: ``task_node``, the dataclass a task of this kind is validated against: a
    # subclass of ``tasks.schema.TaskConfig`` holding the kind's own fields (default: that
    # class itself, the fields every kind has).
    # Optional: ``baseline_references(cfg, baseline, sets, progress)`` records the baseline's
    # answers to the stored sets at set-up (``judge.private.setup``; a kind without it cannot
    # be set up there), and ``text_prompts: bool`` (False if absent) lets the task's input
    # generator yield text prompts.
