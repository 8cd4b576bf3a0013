"""GPT-2 small (124M parameters): the transformer at the dimensions of a real model.

The same code as ``transformer.py``; only the defaults differ. The example input is one
sequence of 128 tokens so tracing and shape propagation stay fast; raise ``seq_len`` (up to
``block_size``) to see activations grow against the fixed 0.5 GB of weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from sample_models._common import make_config
from sample_models.transformer import TransformerConfig, build_from_config

__all__ = ["GPT2SmallConfig", "build"]


@dataclass
class GPT2SmallConfig(TransformerConfig):
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block; must divide n_embd
    n_embd: int = 768  # width of the residual stream
    vocab_size: int = 50257  # GPT-2's BPE vocabulary
    block_size: int = 1024  # GPT-2's context length
    batch_size: int = 1  # sequences in the example input
    seq_len: int = 128  # tokens per sequence in the example input; at most block_size


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """GPT-2 small in eval mode and ``(token_ids,)`` of shape (1, 128) by default."""
    return build_from_config(make_config(GPT2SmallConfig, overrides, model="gpt2_small"))
