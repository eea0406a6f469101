"""The inference engine: greedy decoding of a batch of sequences (baseline).

This baseline is correct and deliberately naive: it handles the rows of a batch one after the
other, and for every row and every token it dequantises every weight matrix it touches, so a
batch of B rows costs B times one row.

All arithmetic is float64. Token-for-token equality between a batched run and single-sequence
runs must not hinge on float32 rounding differences between BLAS gemv and gemm code paths (or
between summation orders); in float64 those differences are ~1e-16 relative, so an argmax can
only flip on a near-tie far closer than any the model produces in practice.
"""

from __future__ import annotations

import numpy as np

from .config import CONFIG, ModelConfig
from .quant import dequantize
from .weights import LayerWeights, QTensor, Weights, load_weights


def _rmsnorm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * gain


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _row(w: QTensor, index: int) -> QTensor:
    """One matrix out of a stacked QTensor (one expert)."""
    return QTensor(w.packed[index], w.scales[index])


class _Sequence:
    """One row of the batch: its KV cache, position and the logits after its last token."""

    def __init__(self, cfg: ModelConfig, capacity: int = 128) -> None:
        shape = (capacity, cfg.n_heads, cfg.head_dim)
        self.keys = [np.empty(shape) for _ in range(cfg.n_layers)]
        self.values = [np.empty(shape) for _ in range(cfg.n_layers)]
        self.length = 0
        self.logits: np.ndarray | None = None

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store this position's key and value, growing the cache when it is full."""
        if self.length == self.keys[layer].shape[0]:
            self.keys[layer] = np.concatenate([self.keys[layer], np.empty_like(self.keys[layer])])
            self.values[layer] = np.concatenate(
                [self.values[layer], np.empty_like(self.values[layer])]
            )
        self.keys[layer][self.length] = k
        self.values[layer][self.length] = v


class Engine:
    """Greedy decoder speaking the calls made by ``harness/serve.py``."""

    def __init__(self, cfg: ModelConfig = CONFIG) -> None:
        self.cfg = cfg
        self.weights: Weights | None = None
        self.seqs: list[_Sequence] = []
        half = cfg.head_dim // 2
        self._inv_freq = cfg.rope_theta ** (-np.arange(half, dtype=np.float64) / half)

    def load(self) -> dict:
        """Generate the weights; return a description of the model."""
        self.weights = load_weights(self.cfg)
        return {"engine": "baseline", "vocab": self.cfg.vocab, "layers": self.cfg.n_layers}

    def reset(self) -> None:
        """Forget every sequence."""
        self.seqs = []

    def prefill(self, prompts: list[list[int]]) -> None:
        """Run every prompt token; keep the logits after each row's last prompt token."""
        self.reset()
        for prompt in prompts:
            if not prompt:
                raise ValueError("empty prompt")
            if not all(0 <= t < self.cfg.vocab for t in prompt):
                raise ValueError("token id out of range")
            seq = _Sequence(self.cfg)
            for i, token in enumerate(prompt):
                self._forward(seq, token, logits=i == len(prompt) - 1)
            self.seqs.append(seq)

    def decode(
        self, steps: int, margins: bool = False
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """Emit `steps` greedy tokens per row, running the model on each emitted token."""
        tokens: list[list[int]] = [[] for _ in self.seqs]
        gaps: list[list[float]] = [[] for _ in self.seqs]
        for _ in range(steps):
            for row, seq in enumerate(self.seqs):
                token = int(np.argmax(seq.logits))  # the lowest id wins a tie
                tokens[row].append(token)
                if margins:
                    top2 = np.partition(seq.logits, -2)[-2:]
                    gaps[row].append(float(top2[1] - top2[0]))
                self._forward(seq, token, logits=True)
        return tokens, (gaps if margins else None)

    def _forward(self, seq: _Sequence, token: int, logits: bool) -> None:
        """Run one token of one sequence through the model."""
        cfg, w = self.cfg, self.weights
        if w is None:
            raise RuntimeError("load() first")
        row = slice(token, token + 1)
        x = dequantize(QTensor(w.embed.packed[row], w.embed.scales[row]))[0]
        for index, layer in enumerate(w.layers):
            x = x + self._attention(seq, index, layer, _rmsnorm(x, layer.attn_norm, cfg.norm_eps))
            x = x + self._moe(layer, _rmsnorm(x, layer.ffn_norm, cfg.norm_eps))
        seq.length += 1
        if logits:
            seq.logits = dequantize(w.head) @ _rmsnorm(x, w.final_norm, cfg.norm_eps)

    def _rope(self, x: np.ndarray, position: int) -> np.ndarray:
        """Rotate each head's halves by this row's own position."""
        angle = position * self._inv_freq
        cos, sin = np.cos(angle), np.sin(angle)
        half = x.shape[-1] // 2
        x1, x2 = x[:, :half], x[:, half:]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)

    def _attention(
        self, seq: _Sequence, index: int, layer: LayerWeights, h: np.ndarray
    ) -> np.ndarray:
        cfg = self.cfg
        heads = (cfg.n_heads, cfg.head_dim)
        q = self._rope((dequantize(layer.wq) @ h).reshape(heads), seq.length)
        k = self._rope((dequantize(layer.wk) @ h).reshape(heads), seq.length)
        v = (dequantize(layer.wv) @ h).reshape(heads)
        seq.append(index, k, v)
        keys = seq.keys[index][: seq.length + 1]
        values = seq.values[index][: seq.length + 1]
        scores = np.einsum("hd,thd->ht", q, keys) / np.sqrt(cfg.head_dim)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.einsum("ht,thd->hd", probs, values).reshape(-1)
        return dequantize(layer.wo) @ out

    def _moe(self, layer: LayerWeights, h: np.ndarray) -> np.ndarray:
        cfg = self.cfg
        router = dequantize(layer.router) @ h
        chosen = np.argsort(-router, kind="stable")[: cfg.top_k]  # ties: the lowest expert id
        gates = np.exp(router[chosen] - router[chosen].max())
        gates /= gates.sum()
        out = self._swiglu(layer.shared_gate, layer.shared_up, layer.shared_down, h)
        for gate, expert in zip(gates, chosen, strict=True):
            e = int(expert)
            out = out + gate * self._swiglu(
                _row(layer.w_gate, e), _row(layer.w_up, e), _row(layer.w_down, e), h
            )
        return out

    @staticmethod
    def _swiglu(w_gate: QTensor, w_up: QTensor, w_down: QTensor, h: np.ndarray) -> np.ndarray:
        return dequantize(w_down) @ (_silu(dequantize(w_gate) @ h) * (dequantize(w_up) @ h))
