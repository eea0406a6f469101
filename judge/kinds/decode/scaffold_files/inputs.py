"""Hidden prompts (the judge calls this with its own secret seeds; loaded from this file)."""

import random


def make_prompts(seed, batch, prompt_len, vocab):
    """`batch` prompts from `seed`: lengths uniform in the inclusive range, ids in [0, vocab)."""
    lo, hi = prompt_len
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(batch)]
