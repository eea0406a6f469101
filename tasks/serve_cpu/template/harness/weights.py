"""The model's dimensions and its deterministic weights (frozen zone: any change is rejected).

Every weight is a small integer held in float64, generated from ``WEIGHT_SEED`` at load time
(nothing is downloaded). Activations are small integers too (``engine/model.py`` requantises
after every product), so every dot product is an exact integer in any summation order: a row
computed alone, in a batch of 16 or in a prompt's matrix gives the same bits, and the same
tokens. (They stay exact in float32 as well: every partial sum is far below 2**24.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOCAB = 4096
DIM = 128
HEADS = 4
HEAD_DIM = DIM // HEADS
FF = 512
LAYERS = 2
MAX_POS = 2048  # prompt + max_tokens may not exceed this
LEVEL = 8  # activations lie in [-LEVEL, LEVEL]
SHIFT = 6  # a product is divided by 2**SHIFT (floor) before it is clipped
WINDOW = 64  # attention weights: max(0, score - best score + WINDOW)
LOGIT_SCALE = 16.0  # logprobs are log_softmax(logits / LOGIT_SCALE)
WEIGHT_SEED = 20_251_201
MODEL_NAME = "serve-cpu-int"


@dataclass(frozen=True)
class Layer:
    """One decoder layer; matrices are (in, out) so that ``x @ w`` serves one row or many."""

    wq: np.ndarray  # (DIM, DIM)
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    w1: np.ndarray  # (DIM, FF)
    w2: np.ndarray  # (FF, DIM)


@dataclass(frozen=True)
class Weights:
    """All weights: token and position embeddings, the layers and the output head."""

    embed: np.ndarray  # (VOCAB, DIM)
    pos: np.ndarray  # (MAX_POS, DIM)
    layers: tuple[Layer, ...]
    head: np.ndarray  # (DIM, VOCAB)


def _ints(rng: np.random.Generator, shape: tuple[int, ...], bound: int) -> np.ndarray:
    return rng.integers(-bound, bound + 1, size=shape).astype(np.float64)


def load_weights(seed: int = WEIGHT_SEED) -> Weights:
    """Generate every weight from `seed` (same seed, same bytes)."""
    rng = np.random.default_rng(seed)
    embed = _ints(rng, (VOCAB, DIM), LEVEL)
    pos = _ints(rng, (MAX_POS, DIM), 2)
    layers = tuple(
        Layer(
            wq=_ints(rng, (DIM, DIM), 8),
            wk=_ints(rng, (DIM, DIM), 8),
            wv=_ints(rng, (DIM, DIM), 8),
            wo=_ints(rng, (DIM, DIM), 8),
            w1=_ints(rng, (DIM, FF), 8),
            w2=_ints(rng, (FF, DIM), 8),
        )
        for _ in range(LAYERS)
    )
    head = _ints(rng, (DIM, VOCAB), 32)
    return Weights(embed=embed, pos=pos, layers=layers, head=head)
