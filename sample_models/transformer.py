"""A GPT-style decoder, written out so every matmul and softmax is a node of its own.

Token and position embeddings, pre-LayerNorm blocks of causal self-attention and an MLP with
residual connections, a final LayerNorm and an LM head that shares the token embedding, as in
GPT-2. At n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024 it has GPT-2
small's 124M parameters; n_layer=48 gives a deep stack. Memory is dominated by parameters, and
the two ends (the embedding and the LM head, each vocab_size x n_embd) are the largest nodes.
After Radford et al., "Language Models are Unsupervised Multitask Learners" (2019), and
Karpathy's nanoGPT ``model.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sample_models._common import make_config, require_positive, seeded

__all__ = ["TransformerConfig", "CausalSelfAttention", "MLP", "Block", "GPT", "build"]


# NOTE: [Every node outputs one tensor]
# Size-based partitioners (torch's reference one included) read the tensor metadata of every
# node, so the forward avoids nodes whose output is not a single tensor: no ``x.size()``
# (an int), no ``split`` (a tuple), no ``x.device``. Positions come from a cumulative sum of
# ones shaped like the input, and the causal mask is a registered (block_size, block_size)
# buffer from which the first T rows and columns are picked with ``index_select`` on those
# positions. Heads are split and merged with ``unflatten``/``flatten``, which need no sizes.


@dataclass
class TransformerConfig:
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block; must divide n_embd
    n_embd: int = 128  # width of the residual stream
    vocab_size: int = 1000  # tokens in the vocabulary (rows of the embedding and the LM head)
    block_size: int = 64  # longest sequence the model accepts (position embeddings, mask size)
    mlp_ratio: int = 4  # hidden width of each block's MLP, as a multiple of n_embd
    bias: bool = True  # biases in the Linear and LayerNorm layers, as in GPT-2
    tie_weights: bool = True  # the LM head shares the token embedding's weight, as in GPT-2
    batch_size: int = 2  # sequences in the example input
    seq_len: int = 32  # tokens per sequence in the example input; at most block_size
    seed: int = 0  # seeds the weights and the example input

    def __post_init__(self) -> None:
        require_positive(
            self,
            "n_layer",
            "n_head",
            "n_embd",
            "vocab_size",
            "block_size",
            "mlp_ratio",
            "batch_size",
            "seq_len",
        )
        if self.n_embd % self.n_head:
            raise ValueError(
                f"n_embd must be a multiple of n_head (got n_embd={self.n_embd}, "
                f"n_head={self.n_head}); change one of them"
            )
        if self.seq_len > self.block_size:
            raise ValueError(
                f"seq_len must be at most block_size (got seq_len={self.seq_len}, "
                f"block_size={self.block_size}); raise block_size or lower seq_len"
            )


class CausalSelfAttention(nn.Module):
    """Multi-head attention where each position attends to itself and earlier positions."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = config.n_embd
        self.n_head = config.n_head
        self.head_dim = c // config.n_head
        # Three projections rather than GPT-2's fused one: same parameters, and the DAG shows
        # q, k and v as three parallel branches.
        self.q_proj = nn.Linear(c, c, bias=config.bias)
        self.k_proj = nn.Linear(c, c, bias=config.bias)
        self.v_proj = nn.Linear(c, c, bias=config.bias)
        self.c_proj = nn.Linear(c, c, bias=config.bias)

    def forward(self, x: Tensor, future: Tensor) -> Tensor:
        # x: (B, T, C); future: (T, T) bool, True where the key comes after the query
        heads = (self.n_head, self.head_dim)
        q = self.q_proj(x).unflatten(-1, heads).transpose(1, 2)  # (B, nh, T, hd)
        k = self.k_proj(x).unflatten(-1, heads).transpose(1, 2)  # (B, nh, T, hd)
        v = self.v_proj(x).unflatten(-1, heads).transpose(1, 2)  # (B, nh, T, hd)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, nh, T, T)
        att = att.masked_fill(future, float("-inf"))  # (B, nh, T, T)
        att = F.softmax(att, dim=-1)  # (B, nh, T, T)
        y = att @ v  # (B, nh, T, hd)
        y = y.transpose(1, 2).flatten(-2)  # (B, T, C): heads side by side again
        return self.c_proj(y)  # (B, T, C)


class MLP(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        hidden = config.mlp_ratio * config.n_embd
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, T, C)
        return self.c_proj(self.gelu(self.c_fc(x)))  # (B, T, 4C) inside, (B, T, C) out


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, future: Tensor) -> Tensor:
        # x: (B, T, C)
        x = x + self.attn(self.ln_1(x), future)  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


class GPT(nn.Module):
    future: Tensor  # (block_size, block_size) bool buffer, True above the diagonal

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        # True above the diagonal: keys in the future of the query. See NOTE: [Every node
        # outputs one tensor] for why it is indexed by positions rather than sliced.
        future = torch.ones(config.block_size, config.block_size, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)

    def forward(self, idx: Tensor) -> Tensor:
        # idx: (B, T) token ids, T <= block_size
        pos = torch.ones_like(idx).cumsum(dim=1) - 1  # (B, T): 0, 1, ..., T-1 in every row
        t = pos[0]  # (T,)
        future = self.future.index_select(0, t).index_select(1, t)  # (T, T)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x, future)  # (B, T, C)
        x = self.ln_f(x)  # (B, T, C)
        return self.lm_head(x)  # (B, T, vocab_size) logits

    def num_parameters(self) -> int:
        """Distinct parameters (the tied embedding counts once)."""
        return sum(p.numel() for p in self.parameters())


def build_from_config(config: TransformerConfig) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """The GPT for ``config`` in eval mode and ``(token_ids,)`` of shape (batch_size, seq_len)."""
    with seeded(config.seed):
        model = GPT(config).eval()
        idx = torch.randint(0, config.vocab_size, (config.batch_size, config.seq_len))
    return model, (idx,)


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """A small GPT (4 layers, 128 wide) and ``(token_ids,)``; overrides are TransformerConfig
    fields (``n_layer=12, n_head=12, n_embd=768, vocab_size=50257, block_size=1024`` is GPT-2
    small; see also ``gpt2_small``)."""
    return build_from_config(make_config(TransformerConfig, overrides, model="transformer"))
