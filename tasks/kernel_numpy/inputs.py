"""The kernel_numpy task's inputs, drawn by the judge (never seen by the candidate's code
before its timed call): ``task.yaml``'s ``kernel.inputs``."""

import numpy as np

ROWS, COLS = 1024, 512


def make_inputs(seed: int) -> list[np.ndarray]:
    """One call's arguments: a float32 matrix of logits, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    return [(4.0 * rng.standard_normal((ROWS, COLS))).astype(np.float32)]
