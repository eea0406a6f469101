"""Prompt generator for the ``decode_c`` task (the judge feeds it its hidden seeds).

Loaded by the judge from this file (never imported as a package). Standard library only; the
same generator as ``template/harness/check.py``'s public prompts.
"""

from __future__ import annotations

__all__ = ["make_prompts"]

_MASK = (1 << 64) - 1


def _splitmix64(state: int) -> tuple[int, int]:
    """One step of splitmix64: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def make_prompts(seed: int, batch: int, prompt_len: tuple[int, int], vocab: int) -> list[list[int]]:
    """`batch` prompts from `seed`: lengths uniform in the inclusive range, ids in [0, vocab).

    Integer arithmetic only, so the same seed gives the same prompts on every machine.
    """
    lo, hi = (int(n) for n in prompt_len)
    if not 1 <= lo <= hi:
        raise ValueError(f"bad prompt_len {prompt_len!r}")
    if vocab < 1 or batch < 0:
        raise ValueError(f"bad batch {batch!r} or vocab {vocab!r}")
    state = int(seed) & _MASK
    prompts = []
    for _ in range(batch):
        state, draw = _splitmix64(state)
        length = lo + draw % (hi - lo + 1)
        row = []
        for _ in range(length):
            state, draw = _splitmix64(state)
            row.append(draw % vocab)
        prompts.append(row)
    return prompts
