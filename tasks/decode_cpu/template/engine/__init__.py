"""The inference engine served by ``harness/serve.py``."""

from .model import Engine

__all__ = ["Engine"]
