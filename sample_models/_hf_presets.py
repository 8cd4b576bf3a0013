"""The configs of well-known Hugging Face checkpoints (``hf:llama-3-8b``), as written in their
config.json files, and the dtype each is published in."""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "PUBLISHED_IN_BF16", "published_dtype"]

# The configs of the published checkpoints (their config.json), as (model type, fields).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-3-8b": (
        "llama",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
        ),
    ),
    "llama-3-70b": (
        "llama",
        dict(
            hidden_size=8192,
            intermediate_size=28672,
            num_hidden_layers=80,
            num_attention_heads=64,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
        ),
    ),
    # Llama 3.1 405B's config.json (Meta): 126 layers, rope scaled for 128k positions
    "llama-3.1-405b": (
        "llama",
        dict(
            hidden_size=16384,
            intermediate_size=53248,
            num_hidden_layers=126,
            num_attention_heads=128,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=131072,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=8192,
            ),
            rms_norm_eps=1e-5,
        ),
    ),
    "mistral-7b": (
        "mistral",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=32000,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
        ),
    ),
    "mixtral-8x7b": (
        "mixtral",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=32000,
            num_local_experts=8,
            num_experts_per_tok=2,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
        ),
    ),
    "gpt2-xl": ("gpt2", dict(n_embd=1600, n_layer=48, n_head=25, vocab_size=50257, n_positions=1024)),
    "bert-large": (
        "bert",
        dict(
            hidden_size=1024,
            num_hidden_layers=24,
            num_attention_heads=16,
            intermediate_size=4096,
            vocab_size=30522,
            max_position_embeddings=512,
        ),
    ),
    "t5-base": (
        "t5",
        dict(d_model=768, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12, d_kv=64, vocab_size=32128),
    ),
    "vit-l-16": (
        "vit",
        dict(
            hidden_size=1024,
            num_hidden_layers=24,
            num_attention_heads=16,
            intermediate_size=4096,
            image_size=224,
            patch_size=16,
        ),
    ),
}

# The presets whose checkpoints are published in bf16 (their config.json's torch_dtype); the others'
# are fp32. A preset is built in its published dtype unless dtype= says otherwise, so Llama-3-70B
# weighs its 141 GB on every page rather than twice that in fp32. An architecture by model type
# (hf:llama) keeps transformers' fp32.
PUBLISHED_IN_BF16 = frozenset({"llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b"})


def published_dtype(name: str) -> str:
    """The dtype ``hf:name`` is built in when none is given: its checkpoint's (:data:`PUBLISHED_IN_BF16`),
    fp32 for the other presets and for an architecture by model type."""
    return "bf16" if name.strip().removeprefix("hf:") in PUBLISHED_IN_BF16 else "fp32"
