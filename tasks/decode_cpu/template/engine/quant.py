"""Dequantisation of the 4-bit weights (see ``weights.py`` for the layout)."""

from __future__ import annotations

import numpy as np

from .weights import QTensor


def dequantize(w: QTensor) -> np.ndarray:
    """Return `w` as float64, shape (..., out, in).

    ``(nibble - 8) * scale`` is exact in float64 (a 4-bit integer times a float32 value), so
    any correct dequantisation gives the same bits; only the arithmetic that follows can round.
    """
    packed, scales = w.packed, w.scales
    *lead, n_out, half = packed.shape
    n_groups = scales.shape[-1]
    blocks = packed.reshape(*lead, n_out, n_groups, half // n_groups)
    nibbles = np.concatenate([blocks & 0x0F, blocks >> 4], axis=-1).view(np.int8) - np.int8(8)
    values = nibbles * scales[..., None].astype(np.float64)
    return values.reshape(*lead, n_out, 2 * half)
