"""The model: an integer decoder with a KV cache (baseline: one row, one token at a time).

Every activation is a small integer held in float64 and every product is requantised
(``requant``), so any correct way of computing a row (alone, in a batch, a prompt at once,
float32) gives the same integers and the same greedy tokens. Ties go to the lowest token id.
"""

from __future__ import annotations

import numpy as np
from harness.weights import (
    HEAD_DIM,
    HEADS,
    LAYERS,
    LEVEL,
    LOGIT_SCALE,
    SHIFT,
    WINDOW,
    Weights,
    load_weights,
)

_DOWN = 2.0**-SHIFT


def requant(y: np.ndarray) -> np.ndarray:
    """A product back into the activations' integers: floor(y / 2**SHIFT), clipped."""
    return np.clip(np.floor(y * _DOWN), -LEVEL, LEVEL)


def clip(x: np.ndarray) -> np.ndarray:
    """A residual sum back into [-LEVEL, LEVEL]."""
    return np.clip(x, -LEVEL, LEVEL)


class Cache:
    """One request's keys and values, per layer, for `capacity` positions."""

    def __init__(self, capacity: int) -> None:
        self.keys = [np.zeros((capacity, HEADS, HEAD_DIM)) for _ in range(LAYERS)]
        self.values = [np.zeros((capacity, HEADS, HEAD_DIM)) for _ in range(LAYERS)]
        self.length = 0


class Model:
    """The weights and the forward pass."""

    def __init__(self) -> None:
        self.w: Weights = load_weights()

    def new_cache(self, capacity: int) -> Cache:
        """An empty cache for a request of `capacity` positions (prompt + new tokens)."""
        return Cache(capacity)

    def prefill(self, cache: Cache, prompt: list[int]) -> np.ndarray:
        """Run the prompt, one token at a time; the logits after its last token."""
        for token in prompt[:-1]:
            self.forward(cache, token, logits=False)
        return self.forward(cache, prompt[-1])

    def forward(self, cache: Cache, token: int, logits: bool = True) -> np.ndarray | None:
        """Run one token at the cache's next position; its logits (VOCAB,) when asked."""
        w, pos = self.w, cache.length
        x = clip(w.embed[token] + w.pos[pos])
        for index, layer in enumerate(w.layers):
            q = requant(x @ layer.wq).reshape(HEADS, HEAD_DIM)
            k = requant(x @ layer.wk).reshape(HEADS, HEAD_DIM)
            v = requant(x @ layer.wv).reshape(HEADS, HEAD_DIM)
            cache.keys[index][pos] = k
            cache.values[index][pos] = v
            att = attend(q, cache.keys[index][: pos + 1], cache.values[index][: pos + 1])
            x = clip(x + requant(att @ layer.wo))
            h = np.maximum(requant(x @ layer.w1), 0.0)
            x = clip(x + requant(h @ layer.w2))
        cache.length = pos + 1
        return x @ w.head if logits else None


def attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One position's attention over its cache: integer weights, a floored weighted mean.

    q (HEADS, HEAD_DIM); keys, values (T, HEADS, HEAD_DIM); returns (HEADS * HEAD_DIM,).
    """
    scores = np.einsum("hd,thd->ht", q, keys)
    weights = np.maximum(scores - scores.max(axis=1, keepdims=True) + WINDOW, 0.0)
    total = np.einsum("ht,thd->hd", weights, values)
    return np.floor(total / weights.sum(axis=1, keepdims=True)).reshape(-1)


def greedy(logits: np.ndarray) -> int:
    """The next token: the highest logit, the lowest id on a tie."""
    return int(np.argmax(logits))


def top_logprobs(logits: np.ndarray, k: int) -> tuple[float, list[tuple[int, float]]]:
    """The greedy token's logprob and the top-k (id, logprob), best first (lowest id on ties)."""
    scaled = logits / LOGIT_SCALE
    peak = scaled.max()
    lps = scaled - (peak + np.log(np.exp(scaled - peak).sum()))
    order = np.lexsort((np.arange(lps.size), -lps))[:k]
    top = [(int(t), float(lps[t])) for t in order]
    return top[0][1], top
