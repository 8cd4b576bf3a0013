"""A DLRM-style recommendation model: large embedding tables beside small dense MLPs.

Dense features go through a bottom MLP; each sparse feature is a bag of ids looked up and
summed in its own ``nn.EmbeddingBag`` table; the pairwise dot products of all these vectors
(one ``bmm``) and the bottom MLP's output feed a top MLP that predicts a click probability.
The tables hold almost all the memory and almost none of the compute, which is the case the
``sparse_nn`` mode exists for: spread the tables over the devices and replicate the dense part.
After Naumov et al., "Deep Learning Recommendation Model for Personalization and
Recommendation Systems" (2019), and facebookresearch/dlrm.

Inputs (``build`` makes an example of each):
    dense_x: (B, n_dense) float features.
    indices: (n_tables, B * bag_size) int64 ids; row i holds table i's bags back to back.
    offsets: (n_tables, B) int64; offsets[i, b] is where sample b's bag starts in indices[i]
        (the ``nn.EmbeddingBag`` offsets layout, one row per table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from sample_models._common import make_config, require_positive, seeded

__all__ = ["DLRMConfig", "DLRM", "build"]


@dataclass
class DLRMConfig:
    n_tables: int = 4  # sparse features, one EmbeddingBag table each
    rows_per_table: int = 10000  # ids per table (the tables' height)
    embedding_dim: int = 32  # width of every embedding vector and of the bottom MLP's output
    bag_size: int = 4  # ids per sample per table (summed within the bag)
    n_dense: int = 13  # dense input features (13 in the Criteo data set)
    bottom_hidden: int = 64  # hidden width of the bottom MLP
    top_hidden: int = 128  # hidden width of the top MLP
    n_mlp_layer: int = 3  # Linear layers in each of the bottom and top MLPs
    batch_size: int = 32  # samples in the example input
    seed: int = 0  # seeds the weights and the example input

    def __post_init__(self) -> None:
        require_positive(
            self,
            "n_tables",
            "rows_per_table",
            "embedding_dim",
            "bag_size",
            "n_dense",
            "bottom_hidden",
            "top_hidden",
            "n_mlp_layer",
            "batch_size",
        )


def _mlp(widths: list[int], final_relu: bool) -> nn.Sequential:
    """Linear layers between consecutive widths, ReLU after each (after the last if asked)."""
    layers: list[nn.Module] = []
    for i, (w_in, w_out) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(w_in, w_out))
        if final_relu or i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    pair_rows: Tensor  # (n_pairs,) int64 buffer
    pair_cols: Tensor  # (n_pairs,) int64 buffer

    def __init__(self, config: DLRMConfig) -> None:
        super().__init__()
        d = config.embedding_dim
        hidden = config.n_mlp_layer - 1
        self.bottom_mlp = _mlp([config.n_dense] + [config.bottom_hidden] * hidden + [d], True)
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(config.rows_per_table, d, mode="sum") for _ in range(config.n_tables)
        )
        n_vectors = config.n_tables + 1  # the bottom MLP's output and one vector per table
        n_pairs = n_vectors * (n_vectors - 1) // 2
        self.top_mlp = _mlp([d + n_pairs] + [config.top_hidden] * hidden + [1], False)
        # Row and column of each pair (i, j) with i > j: the strict lower triangle of the
        # (n_vectors, n_vectors) matrix of dot products.
        rows, cols = torch.tril_indices(n_vectors, n_vectors, offset=-1)
        self.register_buffer("pair_rows", rows, persistent=False)
        self.register_buffer("pair_cols", cols, persistent=False)

    def forward(self, dense_x: Tensor, indices: Tensor, offsets: Tensor) -> Tensor:
        # dense_x: (B, n_dense); indices: (n_tables, B * bag_size); offsets: (n_tables, B)
        x = self.bottom_mlp(dense_x)  # (B, D)
        # Pick every table's rows first, so the lookups sit next to each other in the graph.
        ids = [indices[i] for i in range(len(self.tables))]  # n_tables x (B * bag_size)
        starts = [offsets[i] for i in range(len(self.tables))]  # n_tables x (B,)
        pooled = [table(i, o) for table, i, o in zip(self.tables, ids, starts)]  # n_tables x (B, D)
        vectors = torch.stack([x] + pooled, dim=1)  # (B, F, D) with F = n_tables + 1
        dots = torch.bmm(vectors, vectors.transpose(1, 2))  # (B, F, F)
        pairs = dots[:, self.pair_rows, self.pair_cols]  # (B, F * (F - 1) / 2)
        z = torch.cat([x, pairs], dim=1)  # (B, D + F * (F - 1) / 2)
        return torch.sigmoid(self.top_mlp(z))  # (B, 1) click probability


def build(**overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """The DLRM in eval mode and ``(dense_x, indices, offsets)``; overrides are DLRMConfig
    fields."""
    config = make_config(DLRMConfig, overrides, model="dlrm")
    with seeded(config.seed):
        model = DLRM(config).eval()
        b, n = config.batch_size, config.bag_size
        dense_x = torch.randn(b, config.n_dense)
        indices = torch.randint(0, config.rows_per_table, (config.n_tables, b * n))
        offsets = torch.arange(0, b * n, n).repeat(config.n_tables, 1)
    return model, (dense_x, indices, offsets)
