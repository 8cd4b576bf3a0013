"""A small ResNet: convolutions with BatchNorm and residual connections.

Each residual block forks its input (fan-out) into a convolution branch and a shortcut and
joins them with an add (fan-in), so the graph is a chain of diamonds: a partition boundary
inside a block has to carry two tensors across, a boundary between blocks only one. Memory is
dominated by activations, not parameters, the opposite of the transformer and DLRM.
After He et al., "Deep Residual Learning for Image Recognition" (2015), CIFAR variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sample_models._common import make_config, require_positive, seeded

__all__ = ["CNNConfig", "BasicBlock", "ResNet", "build"]


@dataclass
class CNNConfig:
    n_stage: int = 2  # stages; each after the first halves the resolution and doubles the width
    blocks_per_stage: int = 2  # residual blocks in each stage
    base_channels: int = 32  # channels of the stem and the first stage
    in_channels: int = 3  # channels of the input image
    image_size: int = 32  # height and width of the input image
    n_classes: int = 10  # outputs of the classifier
    batch_size: int = 4  # images in the example input
    seed: int = 0  # seeds the weights and the example input

    def __post_init__(self) -> None:
        require_positive(
            self,
            "n_stage",
            "blocks_per_stage",
            "base_channels",
            "in_channels",
            "image_size",
            "n_classes",
            "batch_size",
        )


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus a shortcut (1x1 conv + BN when the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, c_in, H, W)
        y = F.relu(self.bn1(self.conv1(x)))  # (B, c_out, H/stride, W/stride)
        y = self.bn2(self.conv2(y))  # (B, c_out, H/stride, W/stride)
        return F.relu(y + self.shortcut(x))  # fan-in: (B, c_out, H/stride, W/stride)


class ResNet(nn.Module):
    def __init__(self, config: CNNConfig) -> None:
        super().__init__()
        c = config.base_channels
        self.stem = nn.Conv2d(config.in_channels, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        blocks: list[nn.Module] = []
        c_in = c
        for stage in range(config.n_stage):
            c_out = c * 2**stage
            for i in range(config.blocks_per_stage):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(c_in, c_out, stride))
                c_in = c_out
        self.blocks = nn.ModuleList(blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, config.n_classes)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, in_channels, S, S) with S = image_size
        x = F.relu(self.bn(self.stem(x)))  # (B, C, S, S)
        for block in self.blocks:
            x = block(x)  # (B, C * 2**stage, S / 2**stage, S / 2**stage)
        x = torch.flatten(self.pool(x), 1)  # (B, C * 2**(n_stage - 1))
        return self.fc(x)  # (B, n_classes)


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """The ResNet in eval mode (BatchNorm uses its running statistics) and ``(images,)``."""
    config = make_config(CNNConfig, overrides, model="cnn")
    with seeded(config.seed):
        model = ResNet(config).eval()
        x = torch.randn(config.batch_size, config.in_channels, config.image_size, config.image_size)
    return model, (x,)
