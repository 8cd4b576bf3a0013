"""Hugging Face architectures by name (``hf:llama``, ``hf:llama-3-8b``), built from their configs:
nothing is downloaded, and large models get their weights on the meta device, so they cost no
memory. Needs ``transformers`` (``pip install partition-explorer[hf]``).

``hf:<model_type>`` is any ``transformers`` model type, with its config's defaults and the
overrides given (``num_hidden_layers=2``); ``hf:<preset>`` is the config of a well-known
checkpoint, its numbers written below. Returns ``(module, example_inputs, example_kwargs)``.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from typing import Any, Mapping

import torch
from torch import nn

from partitioner import optional
from sample_models._common import HF_OPS_PER_LAYER, MAX_GRAPH_OPS, seeded
from sample_models._user import LoaderError, ModelSpecError

__all__ = ["load_hf", "PRESETS", "REAL_WEIGHTS_MAX_PARAMS", "is_meta", "weight_scale", "DTYPES", "layer_fields"]

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

# Model types read as encoders (hidden states out), as encoder-decoders, or as vision models;
# every other type is built as a causal language model.
ENCODERS = {"bert", "distilbert", "roberta", "albert", "electra", "deberta", "tapas"}
SEQ2SEQ = {"t5", "bart", "mt5", "pegasus", "marian"}
VISION = {"vit", "deit", "beit", "convnext", "resnet", "swin"}
SEQUENCE = 32  # tokens in the example input by default (8 for an encoder-decoder's decoder)
# The example's shape: a what-if default of 1 x 32 traces a real-size model in seconds on meta
# weights; batch_size and seq_len (overrides beside the config's fields) trace the real one.
TOKEN_SETTINGS = {"batch_size": 1, "seq_len": SEQUENCE}
MAX_TOKENS = 1 << 20  # batch x sequence traced on fake tensors: beyond, tracing takes minutes
MAX_PIXELS = 1 << 26  # values of a vision model's example image (256 MiB in fp32), made before tracing
REAL_WEIGHTS_MAX_PARAMS = 50_000_000  # larger models get meta weights
# NOTE: [Config ranges] transformers checks a config field's type (its strict dataclasses) but
# not its range: n_head=0 or vocab_size=0 build a model that divides by zero or cannot take a
# token. A field named as a size, a count of heads, layers, experts or positions, given as a
# whole number, must be at least 1 (checked on the fields a person sets, under their canonical
# names through the config's attribute_map). Counts of layers and experts are modules to build
# one by one: at most MAX_REPEATS (Llama-3-405B has 126 layers; n_layer=1e12 would never finish).
MAX_REPEATS = 1024
_REPEATED = re.compile(r"(^n_layer$|.*_layers$|.*experts$)")
_DIMENSION = re.compile(
    r"(^(n|num|d)_.*|.*_(size|dim|heads|layers|embeddings|positions|channels|experts|"
    r"embd|head|layer|inner|tok|model|ff|kv)$)"
)


def _transformers() -> Any:
    """transformers, imported once under the optional libraries' lock with the names read here
    (NOTE: [Optional imports and threads] in partitioner/optional.py)."""
    try:
        transformers = optional.load("transformers", optional.TRANSFORMERS_NAMES)
    except ImportError:
        raise LoaderError(
            "hf: models need the transformers package, which is not installed; "
            "pip install 'partition-explorer[hf]' (or pip install transformers)"
        ) from None
    transformers.logging.set_verbosity_error()
    return transformers


def is_meta(module: nn.Module) -> bool:
    """Whether the module's weights are on the meta device (shapes only, no memory)."""
    return any(p.is_meta for p in module.parameters())


DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp8": torch.bfloat16,
    "int8": torch.bfloat16,
    "int4": torch.bfloat16,
}
# Quantized weights: the model runs in bf16 and its parameters are counted at this share of
# their bf16 bytes (trace, then Graph.with_weight_bytes; see weight_scale).
WEIGHT_SCALE = {"fp8": 0.5, "int8": 0.5, "int4": 0.25}


def weight_scale(overrides: Mapping[str, Any]) -> float:
    """The share of bf16 bytes the weights take under ``overrides``' dtype (1 when unquantized)."""
    return WEIGHT_SCALE.get(str(overrides.get("dtype", "fp32")), 1.0)


@functools.lru_cache(maxsize=64)
def layer_fields(name: str) -> tuple[str, ...]:
    """The config fields that count the layers of architecture or preset ``name`` under their own
    names (``n_layer`` for gpt2, ``num_hidden_layers`` for llama, ``num_layers`` and
    ``num_decoder_layers`` for t5); () when the name is unknown or transformers is missing."""
    model_type = PRESETS[name][0] if name in PRESETS else name
    try:
        with optional.LOCK:  # for_model imports the architecture's config module on first use
            config = _transformers().AutoConfig.for_model(model_type)
    except (ValueError, KeyError, LoaderError, ImportError):
        return ()
    fields = config.to_dict()
    return tuple(
        sorted(
            k
            for k, v in fields.items()
            if _REPEATED.match(k) and k.endswith(("layer", "layers")) and isinstance(v, int) and not isinstance(v, bool)
        )
    )


def layer_count(config: Any) -> int:
    """The layers a ``transformers`` config builds: its hidden layers, plus an encoder-decoder's
    decoder layers, plus a vision model's stage depths."""
    count = 0
    for field in ("num_hidden_layers", "num_decoder_layers"):
        value = getattr(config, field, 0)
        count += value if isinstance(value, int) and not isinstance(value, bool) else 0
    depths = getattr(config, "depths", None)
    if isinstance(depths, (list, tuple)):
        count += sum(d for d in depths if isinstance(d, int))
    return count


def _check_layers(name: str, config: Any) -> None:
    """Refuse a config with more layers than a graph may trace (NOTE: [Graph size caps]), before
    anything is built."""
    most = MAX_GRAPH_OPS // HF_OPS_PER_LAYER
    layers = layer_count(config)
    if layers > most:
        raise ModelSpecError(
            f"hf:{name} with {layers:,} layers in all would trace about {layers * HF_OPS_PER_LAYER:,} operations; a "
            f"graph is built and traced only up to {MAX_GRAPH_OPS:,} operations, so at most {most} layers "
            f"(up to {HF_OPS_PER_LAYER} operations each; Llama 3.1 405B has 126): set fewer layers "
            "(e.g. num_hidden_layers, n_layer), or load your own model as package.module:factory"
        )


def load_hf(name: str, overrides: Mapping[str, Any]) -> tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]:
    """``name`` is a preset (:data:`PRESETS`) or a ``transformers`` model type; ``overrides`` are
    config fields, and ``dtype`` (fp32, bf16, fp16) the weights' and activations' type; fp8,
    int8 and int4 build bf16 weights whose bytes :func:`weight_scale` scales after tracing.
    One build at a time in a process: configs and models import their architecture's modules
    lazily on first use (NOTE: [Optional imports and threads] in partitioner/optional.py)."""
    with optional.LOCK:
        return _load_hf(name, overrides)


def _load_hf(name: str, overrides: Mapping[str, Any]) -> tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]:
    transformers = _transformers()
    overrides = dict(overrides)
    dtype_name = str(overrides.pop("dtype", "fp32"))
    shape = {}
    for key, default in TOKEN_SETTINGS.items():
        value = overrides.pop(key, default)
        try:
            shape[key] = int(value)
        except (TypeError, ValueError):
            raise ModelSpecError(f"hf:{name}: {key} must be a whole number (got {value!r})") from None
        if shape[key] < 1:
            raise ModelSpecError(f"hf:{name}: {key} must be at least 1 (got {shape[key]})")
    if shape["batch_size"] * shape["seq_len"] > MAX_TOKENS:
        raise ModelSpecError(
            f"hf:{name}: batch_size x seq_len must be at most {MAX_TOKENS} tokens to trace "
            f"(got {shape['batch_size']} x {shape['seq_len']}); the cluster planner scales a "
            "short trace to any batch and length"
        )
    if dtype_name not in DTYPES:
        raise LoaderError(f"hf:{name}: dtype {dtype_name!r} is not one of {', '.join(DTYPES)}")
    model_type, fields = PRESETS.get(name, (name, {}))
    try:
        base = transformers.AutoConfig.for_model(model_type)
        known = {**base.to_dict(), **dict.fromkeys(getattr(base, "attribute_map", {}) or {})}  # aliases too
    except (ValueError, KeyError) as exc:
        raise LoaderError(
            f"hf:{name} is neither a preset ({', '.join(PRESETS)}) nor a transformers model type "
            f"({str(exc).splitlines()[0][:120]}); e.g. hf:llama, hf:gpt2, hf:t5, hf:vit"
        ) from None
    overrides = {k: _from_text(v) for k, v in overrides.items()}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=3)
        raise LoaderError(
            f"hf:{name} ({model_type}) has no config field {unknown[0]!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + " (set fields of its transformers config, e.g. num_hidden_layers=2, or dtype=bf16)"
        )
    from huggingface_hub.errors import StrictDataclassError

    _check_ranges(name, getattr(base, "attribute_map", {}) or {}, overrides)
    try:
        config = transformers.AutoConfig.for_model(model_type, **{**fields, **overrides})
    except (ValueError, TypeError, KeyError, ArithmeticError, StrictDataclassError) as exc:
        said = " ".join(str(exc).split())[:300]
        raise ModelSpecError(
            f"hf:{name}: transformers' {model_type} config refused a field ({said}); give each "
            "field a value of its type, e.g. num_hidden_layers=2, attn_pdrop=0.1"
        ) from None
    _check_rope(name, config, transformers)
    _check_activations(name, overrides, transformers)
    config.use_cache = False
    _check_layers(name, config)
    image = _check_image(name, config, shape["batch_size"]) if model_type in VISION else None
    auto = (
        transformers.AutoModelForSeq2SeqLM
        if model_type in SEQ2SEQ
        else transformers.AutoModel
        if model_type in ENCODERS | VISION
        else transformers.AutoModelForCausalLM
    )
    try:
        with torch.device("meta"):
            model = auto.from_config(config)
        if sum(p.numel() for p in model.parameters()) <= REAL_WEIGHTS_MAX_PARAMS:
            with seeded(0):
                model = auto.from_config(config)  # small: real weights, so a split can be checked
    except (ValueError, TypeError, KeyError, RuntimeError, ArithmeticError) as exc:
        raise LoaderError(f"hf:{name}: transformers could not build it ({str(exc).splitlines()[0][:200]})") from None
    model = model.to(DTYPES[dtype_name]).eval()
    generator = torch.Generator().manual_seed(0)
    if image is not None:  # a conv needs one device: a meta model's image is made on meta (no memory)
        if is_meta(model):
            return model, (torch.empty(image, dtype=DTYPES[dtype_name], device="meta"),), {}
        return model, (torch.randn(image, generator=generator).to(DTYPES[dtype_name]),), {}
    vocab = int(getattr(config, "vocab_size", 1000))
    limit = int(getattr(config, "max_position_embeddings", 0) or getattr(config, "n_positions", 0) or shape["seq_len"])
    if shape["seq_len"] > limit and shape["seq_len"] != SEQUENCE:
        raise ModelSpecError(
            f"hf:{name}: seq_len must be at most the model's {limit} positions (got {shape['seq_len']})"
        )
    ids = torch.randint(0, vocab, (shape["batch_size"], min(shape["seq_len"], limit)), generator=generator)
    if model_type in SEQ2SEQ:
        return model, (ids,), {"decoder_input_ids": ids[:, :8]}
    return model, (ids,), {}


def _check_image(name: str, config: Any, batch: int) -> tuple[int, int, int, int]:
    """The example image's shape (batch, channels, size, size), refused before anything is built
    when it would hold more than :data:`MAX_PIXELS` values or cut into more than
    :data:`MAX_TOKENS` patches (``image_size=100000`` once asked for 120 GB)."""
    size, channels, patch = (
        getattr(config, key, default) for key, default in (("image_size", 224), ("num_channels", 3), ("patch_size", 1))
    )
    for key, value in (("image_size", size), ("num_channels", channels)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelSpecError(
                f"hf:{name}: {key} must be a whole number of at least 1 (got {value!r}); "
                f"e.g. {key}={224 if key == 'image_size' else 3}"
            )
    values = batch * channels * size * size
    if values > MAX_PIXELS:
        raise ModelSpecError(
            f"hf:{name}: the example image (batch_size x num_channels x image_size^2 = {batch} x "
            f"{channels} x {size}^2 = {values:,} values) must hold at most {MAX_PIXELS:,} values (a model "
            "with real weights runs on it in memory); lower image_size (ViT-L/16 takes 224) or "
            "batch_size"
        )
    if (
        isinstance(patch, int)
        and not isinstance(patch, bool)
        and patch >= 1
        and batch * (size // patch) ** 2 > MAX_TOKENS
    ):
        raise ModelSpecError(
            f"hf:{name}: batch_size x (image_size / patch_size)^2 must be at most {MAX_TOKENS:,} "
            f"patches to trace (got {batch} x ({size} / {patch})^2); raise patch_size or lower "
            "image_size"
        )
    return batch, channels, size, size


def _from_text(value: Any) -> Any:
    """A dict or list field given as JSON text (how overrides stay hashable: the app's cache key
    and a plan's model label) read back; any other value unchanged."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _check_ranges(name: str, aliases: Mapping[str, str], overrides: Mapping[str, Any]) -> None:
    """Refuse dimension fields below 1 (NOTE: [Config ranges]) before the config is made: some
    configs divide by them as they are made (Llama's head_dim)."""
    for key in sorted(overrides):
        canonical, value = aliases.get(key, key), overrides[key]
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value < 1
            and (_DIMENSION.match(key) or _DIMENSION.match(canonical))
        ):
            shown = key if key == canonical else f"{key} ({canonical})"
            raise ModelSpecError(
                f"hf:{name}: {shown} must be at least 1 (got {value}): it is a size or a count "
                f"of heads, layers or positions; e.g. {key}=2"
            )
        if isinstance(value, int) and value > MAX_REPEATS and (_REPEATED.match(key) or _REPEATED.match(canonical)):
            raise ModelSpecError(
                f"hf:{name}: {key} must be at most {MAX_REPEATS} (got {value}): each is a module "
                "built and traced one by one; real models have at most a few hundred"
            )


def _check_rope(name: str, config: Any, transformers: Any) -> None:
    """transformers' own rope validation only warns about an unknown ``rope_type``; building the
    model then fails with a KeyError. Refuse it here with the types transformers knows."""
    rope = getattr(config, "rope_parameters", None)
    if not isinstance(rope, Mapping):
        return
    known = {"default", *transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS}
    for params in rope.values() if all(isinstance(v, Mapping) for v in rope.values()) and rope else [rope]:
        kind = params.get("rope_type", params.get("type", "default")) if isinstance(params, Mapping) else None
        if kind not in known:
            raise ModelSpecError(
                f"hf:{name}: rope_parameters' rope_type must be one of {', '.join(sorted(known))} "
                f'(got {kind!r}); e.g. rope_parameters={{"rope_type": "linear", "factor": 2.0}}'
            )


def _check_activations(name: str, overrides: Mapping[str, Any], transformers: Any) -> None:
    """An activation named in a config field must be one of transformers' ``ACT2FN`` (building
    the model looks it up and raises a KeyError)."""
    known = transformers.activations.ACT2FN
    for key in sorted(overrides):
        value = overrides[key]
        if ("activation" in key or key.endswith("_act")) and isinstance(value, str) and value not in known:
            close = difflib.get_close_matches(value, list(known), n=3)
            raise ModelSpecError(
                f"hf:{name}: {key} must name an activation transformers has (got {value!r})"
                + (f"; did you mean {', '.join(close)}?" if close else "")
                + f"; e.g. {key}=gelu_new or {key}=silu"
            )
