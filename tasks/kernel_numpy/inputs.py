"""The kernel_numpy task's inputs, drawn by the judge (never seen by the candidate's code
before its timed call) and the kernel kind's node (``KERNEL``)."""

import numpy as np

# The kernel kind's settings (judge/kinds/kernel/config.py: KernelConfig).
KERNEL = {
    # The function timed: softmax(x) of the candidate's kernel.py.
    "function": "kernel.py:softmax",
    "generator": "make_inputs",
    # float32 sums in another order differ in the last bits: equal within these. The outputs
    # are ~1/COLS (2e-3) and far smaller in a row's tail: an atol near them would take a
    # third of them returned as 0, so the bound is relative, atol only under float32's
    # resolution of a whole row's sum (1 / 2**24 of it) for values that round away anyway.
    "rtol": 1e-5,
    "atol": 1e-9,
    "warmup": 1,
    "calls": 5,
    "timeout_factor": 20.0,
    "timeout_floor_s": 2.0,
}
ROWS, COLS = 1024, 512


def make_inputs(seed: int) -> list[np.ndarray]:
    """One call's arguments: a float32 matrix of logits, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    return [(4.0 * rng.standard_normal((ROWS, COLS))).astype(np.float32)]


def set_up_draw(seed, batch, prompt_len, vocab):
    """What set-up's shape check still draws of every task (rows of ids): unused here."""
    return [[0] * int(prompt_len[0]) for _ in range(int(batch))]
