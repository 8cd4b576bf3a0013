"""A cluster profile written by hand, shared by the cluster tests."""

from __future__ import annotations

from partitioner import cluster


def hand_profile(params: int = 1_000_000, layers: int = 2) -> cluster.ModelProfile:
    """A 2-layer MLP's figures written by hand: every op reads 1 MB of weights and does 1 MFLOP
    per token, moving 100 bytes of activations per token."""
    per_layer = params * 2 // layers
    return cluster.ModelProfile(
        name="hand",
        tokens0=1,
        seq0=1,
        weight_bytes=params * 2,
        param_count=params,
        element_bytes=2,
        layers=layers,
        hidden_bytes_per_token=64.0,
        kv_bytes_per_token=0.0,
        act_bytes_per_token=100.0 * layers,
        flops_per_token=2.0 * params,
        attention_flops_per_token=0.0,
        node_weight_bytes=(per_layer,) * layers,
        node_act_bytes=(100.0,) * layers,
        node_flops=(2.0 * params / layers,) * layers,
        node_attention=(False,) * layers,
    )
