"""A small U-Net: an encoder-decoder whose long skip connections make a DAG far from a chain.

The encoder halves the resolution ``depth`` times, the decoder doubles it back with transposed
convolutions, and at each level the decoder concatenates the encoder's output from the same
level (``torch.cat``). Those skip tensors stay alive from early in the graph to late in it: a
contiguous split must carry them across every boundary in between, and they are the largest
activations in the model.
After Ronneberger et al., "U-Net: Convolutional Networks for Biomedical Image Segmentation"
(2015).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sample_models._common import make_config, require_positive, seeded

__all__ = ["UNetConfig", "DoubleConv", "UNet", "build"]


@dataclass
class UNetConfig:
    depth: int = 2  # downsampling steps (and upsampling steps); image_size must divide by 2**depth
    base_channels: int = 16  # channels at full resolution; doubled at each level down
    in_channels: int = 3  # channels of the input image
    out_channels: int = 2  # channels of the output map (e.g. segmentation classes)
    image_size: int = 32  # height and width of the input image
    batch_size: int = 1  # images in the example input
    seed: int = 0  # seeds the weights and the example input

    def __post_init__(self) -> None:
        require_positive(
            self,
            "depth",
            "base_channels",
            "in_channels",
            "out_channels",
            "image_size",
            "batch_size",
        )
        if self.image_size % 2**self.depth:
            raise ValueError(
                f"image_size must be a multiple of 2**depth (got image_size={self.image_size}, "
                f"depth={self.depth}); use an image_size such as {2**self.depth * 8}"
            )


class DoubleConv(nn.Module):
    """(conv3x3 + ReLU) twice, keeping the resolution."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, c_in, H, W)
        x = F.relu(self.conv1(x))  # (B, c_out, H, W)
        return F.relu(self.conv2(x))  # (B, c_out, H, W)


class UNet(nn.Module):
    def __init__(self, config: UNetConfig) -> None:
        super().__init__()
        widths = [config.base_channels * 2**level for level in range(config.depth + 1)]
        self.down = nn.ModuleList()  # one DoubleConv per level above the bottom
        c_in = config.in_channels
        for c in widths[:-1]:
            self.down.append(DoubleConv(c_in, c))
            c_in = c
        self.pool = nn.MaxPool2d(2)
        self.bottom = DoubleConv(widths[-2], widths[-1])
        self.up = nn.ModuleList()  # transposed convs, deepest level first
        self.up_conv = nn.ModuleList()  # DoubleConv after each concat, deepest level first
        for c_low, c_high in zip(reversed(widths[1:]), reversed(widths[:-1])):
            self.up.append(nn.ConvTranspose2d(c_low, c_high, 2, stride=2))
            self.up_conv.append(DoubleConv(2 * c_high, c_high))
        self.head = nn.Conv2d(widths[0], config.out_channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, in_channels, S, S); level l has width C * 2**l and resolution S / 2**l
        skips: list[Tensor] = []
        for down in self.down:
            x = down(x)  # (B, C * 2**l, S / 2**l, S / 2**l)
            skips.append(x)  # kept for the decoder: the long skip connection
            x = self.pool(x)  # (B, C * 2**l, S / 2**(l+1), S / 2**(l+1))
        x = self.bottom(x)  # (B, C * 2**depth, S / 2**depth, S / 2**depth)
        for up, up_conv, skip in zip(self.up, self.up_conv, reversed(skips)):
            x = up(x)  # (B, C * 2**l, S / 2**l, S / 2**l): back up one level
            x = torch.cat([skip, x], dim=1)  # (B, 2 * C * 2**l, S / 2**l, S / 2**l)
            x = up_conv(x)  # (B, C * 2**l, S / 2**l, S / 2**l)
        return self.head(x)  # (B, out_channels, S, S)


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """The U-Net in eval mode and ``(images,)``; overrides are UNetConfig fields."""
    config = make_config(UNetConfig, overrides, model="unet")
    with seeded(config.seed):
        model = UNet(config).eval()
        x = torch.randn(config.batch_size, config.in_channels, config.image_size, config.image_size)
    return model, (x,)
