"""The ``decode`` kind: an engine speaking JSON lines (load, prefill, decode, reset), in any
language, scored by B-row aggregate decode throughput against the frozen baseline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from judge.kinds.base import Evaluator, Metric
from judge.kinds.decode.config import DecodeTaskConfig
from judge.kinds.prompt import PromptKind
from judge.kinds.registry import task_kind

if TYPE_CHECKING:
    from judge.mutant import Mutant
    from judge.private import InputSet, JudgeHome


@task_kind("decode")
class DecodeKind(PromptKind):
    """Today's decode pipeline (``judge.kinds.decode.evaluator``) behind the kind protocol."""

    name = "decode"
    # The task config's node of this kind (judge/kinds/decode/config.py).
    task_node = DecodeTaskConfig
    # The engine protocol carries token ids only: an input generator's text prompt is refused.
    text_prompts = False

    def metric(self, task: DictConfig) -> Metric:
        """B-row aggregate decode throughput, higher is better; the pipeline writes it as
        ``tok_s`` and ``score`` (``baseline_tok_s`` and ``baseline_score``)."""
        # A task config from an old run's record may lack timing: B=16 was the only setting.
        batch = OmegaConf.select(task, "timing.batch", default=16)
        return Metric(name="tok_s", unit="tok/s", label=f"B={int(batch)} aggregate decode tok/s")

    def evaluator(self, cfg: DictConfig, home: JudgeHome) -> Evaluator:
        from judge.kinds.decode.evaluator import Evaluator

        return Evaluator(cfg, home, self)

    def generated_mutants(self, cfg: DictConfig) -> list[Mutant]:
        from judge.kinds.decode.mutants import generated

        return generated(cfg)

    def scaffold(self, target: Path, name: str | None = None) -> Path:
        """Write a working task folder of this kind into ``target`` (``new-task``)."""
        from judge.kinds.decode.scaffold import write_decode_task

        return write_decode_task(target, name)

    def required_reasons(self, task: DictConfig) -> list[str]:
        """The verdicts a preflight catalogue must hold once each (one per check)."""
        from judge.kinds.decode.mutants import required_reasons

        return required_reasons(task)

    def baseline_references(
        self, cfg: DictConfig, baseline: Path, sets: list[InputSet], progress: Any
    ) -> Any:
        """Set-up's references, made by the baseline engine (``judge.private.setup``)."""
        from judge.kinds.decode.references import baseline_references

        return baseline_references(cfg, baseline, sets, progress)
