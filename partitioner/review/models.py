"""The model a job config names, as a model spec this project builds: torchtitan's model name
and flavour, a Hugging Face repository id (``meta-llama/Llama-3.1-70B-Instruct``) or Megatron-LM's
model sizes. Torch-free: the sizes of the presets are restated here for the match, and a test
holds them equal to :mod:`sample_models`' configs."""

from __future__ import annotations

import re
from typing import Mapping

__all__ = ["TITAN_FLAVOURS", "PRESET_SIZES", "from_titan", "from_repo_id", "from_sizes"]

# torchtitan's (model name, flavour) -> preset (torchtitan/models/llama3/__init__.py's flavours)
TITAN_FLAVOURS: dict[tuple[str, str], str] = {
    ("llama3", "8B"): "llama-3-8b",
    ("llama3", "70B"): "llama-3-70b",
    ("llama3", "405B"): "llama-3.1-405b",
}

# Each preset's shape as Megatron-LM names it: (layers, hidden, ffn hidden, heads, query groups, vocab).
PRESET_SIZES: dict[str, tuple[int, int, int, int, int, int]] = {
    "llama-3-8b": (32, 4096, 14336, 32, 8, 128256),
    "llama-3-70b": (80, 8192, 28672, 64, 8, 128256),
    "llama-3.1-405b": (126, 16384, 53248, 128, 8, 128256),
    "mistral-7b": (32, 4096, 14336, 32, 8, 32000),
}

# Hugging Face repository ids (lower case, organisation dropped) -> preset; the version and the
# instruction tuning change no shape.
_REPO_PATTERNS = (
    (r"^(meta-)?llama-3(\.[0-9])?-8b", "llama-3-8b"),
    (r"^(meta-)?llama-3(\.[0-9])?-70b", "llama-3-70b"),
    (r"^(meta-)?llama-3(\.[0-9])?-405b", "llama-3.1-405b"),
    (r"^mistral-7b", "mistral-7b"),
    (r"^mixtral-8x7b", "mixtral-8x7b"),
    (r"^gpt2-xl$", "gpt2-xl"),
    (r"^bert-large", "bert-large"),
    (r"^t5-base$", "t5-base"),
)


def from_titan(name: str, flavour: str) -> str | None:
    """``hf:<preset>`` of torchtitan's ``[model] name`` and ``flavor``, or None."""
    preset = TITAN_FLAVOURS.get((name.strip().lower(), flavour.strip()))
    return f"hf:{preset}" if preset else None


def from_repo_id(repo: str) -> str | None:
    """``hf:<preset>`` of a Hugging Face repository id or local path ending in one, or None."""
    tail = repo.rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, preset in _REPO_PATTERNS:
        if re.search(pattern, tail):
            return f"hf:{preset}"
    return None


def from_sizes(sizes: Mapping[str, int], swiglu: bool) -> tuple[str, tuple[str, ...]] | None:
    """A model spec and its overrides from Megatron-LM's sizes (``num_layers``, ``hidden_size``,
    ``ffn_hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``vocab_size``,
    ``seq_length``): a preset when the shape is one's, else a Llama (SwiGLU) or GPT-2 (GeLU)
    architecture at those sizes; None without layers and hidden size."""
    layers, hidden = sizes.get("num_layers"), sizes.get("hidden_size")
    heads = sizes.get("num_attention_heads")
    if not layers or not hidden or not heads:
        return None
    groups = sizes.get("num_query_groups") or heads
    ffn = sizes.get("ffn_hidden_size") or 4 * hidden
    vocab = sizes.get("vocab_size")
    for preset, shape in PRESET_SIZES.items():
        if shape[:5] == (layers, hidden, ffn, heads, groups) and vocab in (None, shape[5]):
            return f"hf:{preset}", ()
    positions = max(sizes.get("max_position_embeddings") or 0, sizes.get("seq_length") or 0) or 2048
    if swiglu:
        sets = (
            f"num_hidden_layers={layers}",
            f"hidden_size={hidden}",
            f"intermediate_size={ffn}",
            f"num_attention_heads={heads}",
            f"num_key_value_heads={groups}",
            f"vocab_size={vocab or 128256}",
            f"max_position_embeddings={positions}",
        )
        return "hf:llama", sets
    gpt2 = [f"n_layer={layers}", f"n_embd={hidden}", f"n_head={heads}", f"n_positions={positions}"]
    if ffn != 4 * hidden:
        gpt2.append(f"n_inner={ffn}")
    return "hf:gpt2", (*gpt2, f"vocab_size={vocab or 50257}")
