"""The ``server`` kind: an OpenAI-compatible inference server (vLLM-shaped: streaming
``/v1/completions`` or ``/v1/chat/completions`` with token ids), started by the task's
``serve`` in the sandbox and scored by the judge's own load generator as aggregate output
tok/s at the headline concurrency against the frozen baseline server
(``judge.kinds.server.evaluator``; docs/tasks.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from judge.kinds.base import Evaluator, Metric
from judge.kinds.prompt import PromptKind
from judge.kinds.registry import task_kind
from judge.kinds.server.config import ServerTaskConfig

if TYPE_CHECKING:
    from judge.mutant import Mutant
    from judge.private import InputSet, JudgeHome


@task_kind("server")
class ServerKind(PromptKind):
    """A server behind the OpenAI-compatible wire contract, judged through a sidecar client."""

    name = "server"
    # The task config's node of this kind (judge/kinds/server/config.py).
    task_node = ServerTaskConfig
    # A server may be sent text prompts (sent as they are; its tokenizer makes the ids).
    text_prompts = True

    def metric(self, task: DictConfig) -> Metric:
        """Aggregate output tok/s (ids the judge received / wall time) at ``timing.batch``
        concurrent streams, higher is better; written as ``out_tok_s`` and ``score``."""
        batch = OmegaConf.select(task, "timing.batch", default=16)
        return Metric(
            name="out_tok_s",
            unit="tok/s",
            label=f"c={int(batch)} aggregate output tok/s",
        )

    def evaluator(self, cfg: DictConfig, home: JudgeHome) -> Evaluator:
        from judge.kinds.server.evaluator import ServerEvaluator

        return ServerEvaluator(cfg, home, self)

    def generated_mutants(self, cfg: DictConfig) -> list[Mutant]:
        from judge.kinds.server.mutants import generated

        return generated(cfg)

    def required_reasons(self, task: DictConfig) -> list[str]:
        """The verdicts a preflight catalogue must hold once each (one per check)."""
        from judge.kinds.server.mutants import required_reasons

        return required_reasons(task)

    def baseline_references(
        self, cfg: DictConfig, baseline: Path, sets: list[InputSet], progress: Any
    ) -> Any:
        """Set-up's references, made by the baseline server (``judge.private.setup``)."""
        from judge.kinds.server.evaluator import baseline_references

        return baseline_references(cfg, baseline, sets, progress)
