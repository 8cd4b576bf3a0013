"""Tiny Hugging Face configs for the tests (nothing downloaded): two layers 64 wide, four heads, a
vocabulary of 1000; each test file adds what its own case needs (experts, a batch, a smaller t5)."""

from __future__ import annotations

# Llama's fields, which qwen2 and mistral read too.
DECODER = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}
GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000}
# One each of decoder-only, MoE, encoder-only, vision and encoder-decoder; the embedding-heavy one
# is gpt2 (tied).
SMALL = {
    "hf:gpt2": {**GPT2, "n_positions": 64},
    "hf:llama": DECODER,
    "hf:mixtral": {**DECODER, "num_local_experts": 4},
    "hf:bert": {k: v for k, v in DECODER.items() if k != "num_key_value_heads"},
    "hf:vit": {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "image_size": 32,
        "patch_size": 8,
    },
    "hf:t5": {
        "num_layers": 2,
        "num_decoder_layers": 2,
        "d_model": 64,
        "d_ff": 128,
        "num_heads": 4,
        "d_kv": 16,
        "vocab_size": 500,
    },
}
