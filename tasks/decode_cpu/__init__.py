"""The bundled ``decode_cpu`` task: a numpy MoE decoder to make fast at batch 16."""

from pathlib import Path

from .inputs import make_prompts

TASK_DIR = Path(__file__).resolve().parent
TEMPLATE_DIR = TASK_DIR / "template"

__all__ = ["TASK_DIR", "TEMPLATE_DIR", "make_prompts"]
