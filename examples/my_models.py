"""An example of your own model for the explorer: a factory returning (module, example_inputs).

    .venv/bin/partition-explorer plan examples.my_models:build --devices 2x16GiB,1x8GiB

Any importable ``package.module:function`` taking no arguments works the same way.
"""

import torch


def build():
    """A small residual MLP: 4 blocks of Linear -> GELU -> Linear with a skip connection."""

    class Block(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.up = torch.nn.Linear(width, 4 * width)
            self.down = torch.nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    model = torch.nn.Sequential(*[Block(256) for _ in range(4)]).eval()
    return model, (torch.randn(8, 256),)
