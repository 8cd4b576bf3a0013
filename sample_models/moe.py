"""A mixture-of-experts stack: a router and many parallel expert MLPs per layer.

Each layer's router scores every expert for every token; the top_k scores are kept and
renormalised (the rest get weight 0) and the layer outputs the weighted sum of the experts'
outputs. To stay traceable with torch.fx the gating is dense: every expert runs on every token
and the mask is made with tensor ops, not Python branches on data. The graph fans out into
n_experts independent branches and joins them again: wide parallelism that latency-aware modes
can spread over devices (expert parallelism), which a size-based greedy fill ignores.
After Shazeer et al., "Outrageously Large Neural Networks: The Sparsely-Gated
Mixture-of-Experts Layer" (2017).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sample_models._common import make_config, require_positive, seeded

__all__ = ["MoEConfig", "Expert", "MoELayer", "MoE", "build"]


@dataclass
class MoEConfig:
    n_layer: int = 2  # MoE layers, each a router plus n_experts experts with a residual add
    n_experts: int = 8  # experts per layer (parallel branches of the graph)
    top_k: int = 2  # experts whose weight is kept per token; top_k = n_experts keeps all
    n_embd: int = 128  # width of the token vectors
    expert_hidden: int = 256  # hidden width of each expert's MLP
    batch_size: int = 2  # sequences in the example input
    seq_len: int = 16  # tokens per sequence in the example input
    seed: int = 0  # seeds the weights and the example input

    def __post_init__(self) -> None:
        require_positive(
            self,
            "n_layer",
            "n_experts",
            "top_k",
            "n_embd",
            "expert_hidden",
            "batch_size",
            "seq_len",
        )
        if self.top_k > self.n_experts:
            raise ValueError(
                f"top_k must be at most n_experts (got top_k={self.top_k}, "
                f"n_experts={self.n_experts}); lower top_k or add experts"
            )


class Expert(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.expert_hidden)
        self.proj = nn.Linear(config.expert_hidden, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, T, C)
        return self.proj(F.gelu(self.fc(x)))  # (B, T, H) inside, (B, T, C) out


class MoELayer(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.top_k = config.top_k
        self.ln = nn.LayerNorm(config.n_embd)
        self.router = nn.Linear(config.n_embd, config.n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(config) for _ in range(config.n_experts))

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, T, C)
        h = self.ln(x)  # (B, T, C)
        probs = F.softmax(self.router(h), dim=-1)  # (B, T, E)
        # Rank of each expert per token (0 = highest score): argsort of the descending argsort.
        rank = probs.argsort(dim=-1, descending=True).argsort(dim=-1)  # (B, T, E)
        gates = probs * (rank < self.top_k)  # (B, T, E): zero outside the top_k
        gates = gates / gates.sum(dim=-1, keepdim=True)  # (B, T, E): kept weights sum to 1
        outs = torch.stack([expert(h) for expert in self.experts], dim=-2)  # (B, T, E, C)
        y = (gates.unsqueeze(-1) * outs).sum(dim=-2)  # (B, T, C)
        return x + y  # (B, T, C)


class MoE(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MoELayer(config) for _ in range(config.n_layer))

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, T, C) token vectors
        for layer in self.layers:
            x = layer(x)  # (B, T, C)
        return x


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """The MoE stack in eval mode and ``(tokens,)`` of shape (batch_size, seq_len, n_embd)."""
    config = make_config(MoEConfig, overrides, model="moe")
    with seeded(config.seed):
        model = MoE(config).eval()
        x = torch.randn(config.batch_size, config.seq_len, config.n_embd)
    return model, (x,)
