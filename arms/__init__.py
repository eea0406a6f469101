"""The arms' instructions to agents: versioned prompt templates for each role, rendered per
seat and hashed so that the report can tell which seats read what."""

from arms.prompts import PROMPT_VERSION, RenderedPrompt, render_prompt

__all__ = ["PROMPT_VERSION", "RenderedPrompt", "render_prompt"]
