"""A small decoder: integer embeddings, an integer recurrence and an output head.

Every number is a small integer held in float64, so every sum is exact whatever order a
matrix product takes: a batched engine gives bit-identical logits, and the same tokens.
Ties between logits go to the lowest token id (``argmax``).

The baseline decodes one row at a time: each step reads the whole output head once per row,
so aggregate throughput is flat in the batch size B.
"""

import numpy as np

VOCAB, DIM, LEVELS = 2048, 256, 17


class Engine:
    """The engine behind ``harness/serve.py``: load, prefill, decode, reset."""

    def load(self):
        rng = np.random.default_rng(1234)  # the weights: fixed, nothing downloaded
        self.embed = rng.integers(-8, 9, size=(VOCAB, DIM)).astype(np.float64)
        self.head = rng.integers(-8, 9, size=(DIM, VOCAB)).astype(np.float64)
        self.hidden = []
        return {"vocab": VOCAB, "dim": DIM}

    def prefill(self, prompts):
        self.hidden = [self._wrap(self.embed[p].sum(axis=0)) for p in prompts]

    def decode(self, steps, margins=False):
        tokens, gaps = [], []
        for h in self.hidden:  # one row at a time: the head is read once per row per step
            row, gap = [], []
            for _ in range(steps):
                logits = h @ self.head
                token = int(np.argmax(logits))
                row.append(token)
                if margins:
                    top2 = np.partition(logits, -2)[-2:]
                    gap.append(float(top2[1] - top2[0]))
                h = self._wrap(3.0 * h + self.embed[token])
            tokens.append(row)
            gaps.append(gap)
        return tokens, (gaps if margins else None)

    def reset(self):
        self.hidden = []

    @staticmethod
    def _wrap(x):
        """Back into the integers [-8, 8] (exact on float64 integers)."""
        return np.remainder(x + 8.0, LEVELS) - 8.0
