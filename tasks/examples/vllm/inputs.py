"""Prompts for the vLLM example: token ids the judge sends as `prompt` (a list of ints).

Random ids from an ordinary-text range of the tokenizer (not its special tokens, which sit at
the top of most vocabularies), from the judge's hidden seeds. A task that wants natural text
would tokenise a prompt set here instead (with the tokenizer in its assets).
"""

from __future__ import annotations

import numpy as np

__all__ = ["make_prompts"]

# Ids in [LOW, HIGH): plain word pieces for Qwen2.5's tokenizer; adjust for another model.
LOW, HIGH = 1_000, 100_000


def make_prompts(seed: int, batch: int, prompt_len: tuple[int, int], vocab: int) -> list[list[int]]:
    """`batch` prompts from `seed`, lengths uniform in the inclusive range `prompt_len`."""
    lo, hi = prompt_len
    if not 1 <= lo <= hi:
        raise ValueError(f"bad prompt_len {prompt_len!r}")
    top = min(HIGH, vocab)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(lo, hi + 1, size=batch)
    return [rng.integers(LOW, top, size=int(n)).tolist() for n in lengths]
