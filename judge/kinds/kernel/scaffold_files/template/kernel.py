"""Row-wise softmax: the function the judge times (see README.md)."""

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """softmax over the last axis of a float32 matrix; a new float32 matrix, ``x`` untouched."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i] - x[i].max()
        e = np.exp(row)
        out[i] = e / e.sum()
    return out
