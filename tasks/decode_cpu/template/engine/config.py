"""Model dimensions and the weight seed (frozen zone: any change here is rejected by the judge)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """A small MoE decoder: embedding, n_layers x [attention, MoE], final norm, output head."""

    vocab: int = 4096
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    n_experts: int = 8
    top_k: int = 2
    d_ff: int = 256  # per routed expert (SwiGLU)
    d_ff_shared: int = 256  # the always-on shared expert (SwiGLU)
    group: int = 32  # 4-bit quantisation group along each matrix's input dimension
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads


CONFIG = ModelConfig()
WEIGHT_SEED = 20_240_917
