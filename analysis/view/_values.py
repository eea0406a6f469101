"""Small value helpers of the view's sections (JSON-safe values, time spans), shared by
``analysis.view.data`` and ``analysis.view.seats`` without either importing the other."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["merge", "plain", "uncovered_s"]


def plain(value: Any) -> Any:
    """A JSON-safe Python value: numpy scalars unwrapped, NaN/inf/NA as None."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as sorted, disjoint ``(start, end)`` pairs (empty ones dropped)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def uncovered_s(spans: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Seconds of the union of ``spans`` that the union of ``cover`` leaves out."""
    a, b = merge(spans), merge(cover)
    total = sum(e - s for s, e in a)
    i = 0
    for start, end in a:
        while i < len(b) and b[i][1] <= start:
            i += 1
        j = i
        while j < len(b) and b[j][0] < end:
            total -= min(end, b[j][1]) - max(start, b[j][0])
            j += 1
    return total
