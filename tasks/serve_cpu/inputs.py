"""Prompt generator for the ``serve_cpu`` task: one prompt (token ids) per request.

The judge calls it with its own hidden seeds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["make_prompts"]


def make_prompts(seed: int, batch: int, prompt_len: tuple[int, int], vocab: int) -> list[list[int]]:
    """`batch` prompts from `seed`: lengths uniform in the inclusive range, ids in [0, vocab).

    Same algorithm as ``public_prompts`` in ``template/harness/check.py``.
    """
    lo, hi = prompt_len
    if not 1 <= lo <= hi:
        raise ValueError(f"bad prompt_len {prompt_len!r}")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(lo, hi + 1, size=batch)
    return [rng.integers(0, vocab, size=int(n)).tolist() for n in lengths]
