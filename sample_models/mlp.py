"""A chain of Linear + ReLU layers: the simplest graph to partition.

Every node reads only the node before it, so a contiguous split into k stages is the only
sensible kind of plan, and its exact optimum is easy to find by hand (or by a short dynamic
programme): the MLP is the worked example for the size-based and latency-aware modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sample_models._common import make_config, require_positive, seeded

__all__ = ["MLPConfig", "MLP", "build"]


@dataclass
class MLPConfig:
    n_layer: int = 8  # Linear layers in the chain (ReLU after every one but the last)
    in_features: int = 256  # width of the input vector
    hidden: int = 256  # width of every hidden layer
    out_features: int = 256  # width of the output vector
    bias: bool = True  # give every Linear layer a bias
    batch_size: int = 64  # rows in the example input
    seed: int = 0  # seeds the weights and the example input

    def __post_init__(self) -> None:
        require_positive(self, "n_layer", "in_features", "hidden", "out_features", "batch_size")


class MLP(nn.Module):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        widths = [config.in_features] + [config.hidden] * (config.n_layer - 1)
        widths.append(config.out_features)
        self.layers = nn.ModuleList(nn.Linear(w_in, w_out, bias=config.bias) for w_in, w_out in zip(widths, widths[1:]))

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, in_features)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)  # (B, hidden), or (B, out_features) after the last layer
            if i < last:
                x = F.relu(x)
        return x


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """The MLP in eval mode and one example input ``(x,)``; overrides are MLPConfig fields."""
    config = make_config(MLPConfig, overrides, model="mlp")
    with seeded(config.seed):
        model = MLP(config).eval()
        x = torch.randn(config.batch_size, config.in_features)
    return model, (x,)
