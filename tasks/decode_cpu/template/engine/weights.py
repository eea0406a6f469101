"""Deterministic 4-bit weights (frozen zone: any change here is rejected by the judge).

Every weight matrix is generated from ``WEIGHT_SEED`` at load time (nothing is downloaded) and
stored the way llama.cpp's Q4_0 stores it: along the input dimension, each group of 32 values
has one float scale and 16 bytes; byte ``j`` of a group holds value ``j`` in its low nibble and
value ``j + 16`` in its high nibble; a value is ``(nibble - 8) * scale``. Norm gains stay float.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .config import CONFIG, WEIGHT_SEED, ModelConfig

# Variance of (nibble - 8) for a uniform nibble in 0..15; scales are sized from it so that a
# layer's output has roughly unit variance when its input does.
_NIBBLE_VAR = 21.25


class QTensor(NamedTuple):
    """A 4-bit matrix (or a stack of them): packed nibbles and one scale per group."""

    packed: np.ndarray  # uint8, shape (..., out, in // 2)
    scales: np.ndarray  # float32, shape (..., out, in // group)


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer: attention, then an MoE block with a shared expert."""

    attn_norm: np.ndarray  # float32 (d_model,)
    wq: QTensor  # (d_model, d_model)
    wk: QTensor
    wv: QTensor
    wo: QTensor
    ffn_norm: np.ndarray  # float32 (d_model,)
    router: QTensor  # (n_experts, d_model)
    w_gate: QTensor  # (n_experts, d_ff, d_model)
    w_up: QTensor  # (n_experts, d_ff, d_model)
    w_down: QTensor  # (n_experts, d_model, d_ff)
    shared_gate: QTensor  # (d_ff_shared, d_model)
    shared_up: QTensor  # (d_ff_shared, d_model)
    shared_down: QTensor  # (d_model, d_ff_shared)


@dataclass(frozen=True)
class Weights:
    """All weights of the model."""

    embed: QTensor  # (vocab, d_model)
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray  # float32 (d_model,)
    head: QTensor  # (vocab, d_model)


def _quant(rng: np.random.Generator, shape: tuple[int, ...], gain: float, group: int) -> QTensor:
    """Random packed nibbles and group scales for a matrix of `shape` (..., out, in)."""
    *lead, n_out, n_in = shape
    packed = rng.integers(0, 256, size=(*lead, n_out, n_in // 2), dtype=np.uint8)
    base = gain / np.sqrt(_NIBBLE_VAR * n_in)
    jitter = rng.uniform(0.5, 1.5, size=(*lead, n_out, n_in // group))
    return QTensor(packed, (base * jitter).astype(np.float32))


def _norm(rng: np.random.Generator, width: int) -> np.ndarray:
    return (1.0 + 0.1 * rng.standard_normal(width)).astype(np.float32)


def load_weights(cfg: ModelConfig = CONFIG, seed: int = WEIGHT_SEED) -> Weights:
    """Generate every weight of the model from `seed` (same seed, same bytes)."""
    rng = np.random.default_rng(seed)
    d, g, e = cfg.d_model, cfg.group, cfg.n_experts
    # The embedding's "input" is one-hot, so its rows get unit variance directly.
    embed = _quant(rng, (cfg.vocab, d), np.sqrt(d), g)
    layers = []
    for _ in range(cfg.n_layers):
        layers.append(
            LayerWeights(
                attn_norm=_norm(rng, d),
                wq=_quant(rng, (d, d), 1.0, g),
                wk=_quant(rng, (d, d), 1.0, g),
                wv=_quant(rng, (d, d), 1.0, g),
                wo=_quant(rng, (d, d), 1.0, g),
                ffn_norm=_norm(rng, d),
                router=_quant(rng, (e, d), 2.0, g),
                w_gate=_quant(rng, (e, cfg.d_ff, d), 1.0, g),
                w_up=_quant(rng, (e, cfg.d_ff, d), 1.0, g),
                w_down=_quant(rng, (e, d, cfg.d_ff), 1.0, g),
                shared_gate=_quant(rng, (cfg.d_ff_shared, d), 1.0, g),
                shared_up=_quant(rng, (cfg.d_ff_shared, d), 1.0, g),
                shared_down=_quant(rng, (d, cfg.d_ff_shared), 1.0, g),
            )
        )
    final_norm = _norm(rng, d)
    head = _quant(rng, (cfg.vocab, d), 3.0, g)
    return Weights(embed=embed, layers=tuple(layers), final_norm=final_norm, head=head)
