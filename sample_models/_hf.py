"""Hugging Face architectures by name (``hf:llama``, ``hf:llama-3-8b``), built from their configs:
nothing is downloaded, and large models get their weights on the meta device, so they cost no
memory. Needs ``transformers`` (``pip install partition-explorer[hf]``).

``hf:<model_type>`` is any ``transformers`` model type, with its config's defaults and the
overrides given (``num_hidden_layers=2``); ``hf:<preset>`` is the config of a well-known
checkpoint, its numbers written below. Returns ``(module, example_inputs, example_kwargs)``.
"""

from __future__ import annotations

import copy
import difflib
import functools
from typing import Any, Mapping

import torch
from torch import nn

from partitioner import optional
from partitioner.units import DTYPES, find_dtype
from sample_models._common import HF_OPS_PER_LAYER, MAX_GRAPH_OPS, seeded
from sample_models._hf_fields import (
    _REPEATED,
    LEGACY_ROPE,
    check_activations,
    check_legacy_rope,
    check_ranges,
    check_rope,
    from_text,
)
from sample_models._hf_presets import PRESETS, PUBLISHED_IN_BF16, published_dtype
from sample_models._user import LoaderError, ModelSpecError

__all__ = [
    "load_hf",
    "PRESETS",
    "PUBLISHED_IN_BF16",
    "published_dtype",
    "REAL_WEIGHTS_MAX_PARAMS",
    "is_meta",
    "weight_scale",
    "layer_fields",
]

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


def weight_scale(overrides: Mapping[str, Any]) -> float:
    """The share of bf16 bytes the weights take under ``overrides``' dtype: quantized weights (fp8,
    int8, int4) run in bf16 and their parameters are counted at this share after tracing
    (Graph.with_weight_bytes); 1 when unquantized (:attr:`partitioner.units.DType.weight_scale`)."""
    kind = find_dtype(str(overrides.get("dtype", "fp32")))
    return kind.weight_scale if kind is not None else 1.0


def _torch_dtype(name: str, dtype_name: str) -> torch.dtype:
    """The torch dtype the loader builds for ``dtype_name`` (any name of :data:`partitioner.units.DTYPES`)."""
    kind = find_dtype(dtype_name)
    if kind is None:
        raise LoaderError(f"hf:{name}: dtype {dtype_name!r} is not one of {', '.join(d.short for d in DTYPES)}")
    return getattr(torch, kind.torch_name)


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
    config fields, and ``dtype`` (fp32, bf16, fp16) the weights' and activations' type (by default
    the preset's published one, :func:`published_dtype`); fp8,
    int8 and int4 build bf16 weights whose bytes :func:`weight_scale` scales after tracing.
    One build at a time in a process: configs and models import their architecture's modules
    lazily on first use (NOTE: [Optional imports and threads] in partitioner/optional.py)."""
    with optional.LOCK:
        return _load_hf(name, overrides)


def _load_hf(name: str, overrides: Mapping[str, Any]) -> tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]:
    transformers = _transformers()
    overrides = dict(overrides)
    dtype_name = str(overrides.pop("dtype", published_dtype(name)))
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
    dtype = _torch_dtype(name, dtype_name)
    model_type, fields = PRESETS.get(name, (name, {}))
    try:
        base = transformers.AutoConfig.for_model(model_type)
        known = {**base.to_dict(), **dict.fromkeys(getattr(base, "attribute_map", {}) or {})}  # aliases too
        if isinstance(getattr(base, "rope_parameters", None), Mapping):
            known.update(dict.fromkeys(LEGACY_ROPE))  # NOTE: [Rope fields in transformers 5]
    except (ValueError, KeyError) as exc:
        raise LoaderError(
            f"hf:{name} is neither a preset ({', '.join(PRESETS)}) nor a transformers model type "
            f"({str(exc).splitlines()[0][:120]}); e.g. hf:llama, hf:gpt2, hf:t5, hf:vit"
        ) from None
    overrides = {k: from_text(v) for k, v in overrides.items()}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=3)
        raise LoaderError(
            f"hf:{name} ({model_type}) has no config field {unknown[0]!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + " (set fields of its transformers config, e.g. num_hidden_layers=2, or dtype=bf16)"
        )
    from huggingface_hub.errors import StrictDataclassError

    check_ranges(name, getattr(base, "attribute_map", {}) or {}, overrides)
    try:
        # copies: transformers writes into the dicts it is given (rope_scaling gains the theta),
        # which would change the preset for every later load
        config = transformers.AutoConfig.for_model(model_type, **copy.deepcopy({**fields, **overrides}))
    except (ValueError, TypeError, KeyError, ArithmeticError, StrictDataclassError) as exc:
        said = " ".join(str(exc).split())[:300]
        raise ModelSpecError(
            f"hf:{name}: transformers' {model_type} config refused a field ({said}); give each "
            "field a value of its type, e.g. num_hidden_layers=2, attn_pdrop=0.1"
        ) from None
    check_rope(name, config, transformers)
    check_legacy_rope(name, config, overrides)
    check_activations(name, overrides, transformers)
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
    model = model.to(dtype).eval()
    generator = torch.Generator().manual_seed(0)
    if image is not None:  # a conv needs one device: a meta model's image is made on meta (no memory)
        if is_meta(model):
            return model, (torch.empty(image, dtype=dtype, device="meta"),), {}
        return model, (torch.randn(image, generator=generator).to(dtype),), {}
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
