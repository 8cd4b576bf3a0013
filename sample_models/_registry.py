"""The registry of sample models: name -> config class, builder, teaching line, default devices.

``names()`` lists the models, ``build(name, **overrides)`` makes one, ``describe(name)`` says in
one line what it teaches, ``config_class(name)`` gives the dataclass whose fields are its size
knobs, and ``default_devices(name)`` the devices the explorer starts with for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from sample_models import cnn, dlrm, gpt2_small, mlp, moe, transformer, unet

__all__ = [
    "ModelSpec",
    "SPECS",
    "names",
    "spec",
    "build",
    "describe",
    "config_class",
    "default_devices",
]

MiB = 2**20

Builder = Callable[..., tuple[nn.Module, tuple[Tensor, ...]]]


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry."""

    name: str
    description: str  # one line: what partitioning lesson the model teaches
    config_class: type  # dataclass of the model's size knobs (bool, int and float fields)
    builder: Builder  # build(**overrides) -> (module, example_inputs)
    device_count: int = 4  # default number of devices for this model
    device_memory_bytes: int = 0  # default memory of each device; see NOTE: [Default devices]


# NOTE: [Default devices]
# Each model's default devices are 4 of equal memory, chosen so the default model does not fit
# on one: its total size (every fx node's output bytes plus the parameter bytes of each
# call_module node, the reference partitioner's memory model) is about twice one device's
# memory, while the largest single node (its output, parameters and inputs) takes under half a
# device. The exception is ``dlrm``: one device holds the whole dense part plus one embedding
# table but not two tables (so a table takes just over half a device), and ``sparse_nn`` puts
# one table on each device and replicates the rest.
# The numbers were measured on the default configs; tests/test_sample_models.py checks them.

SPECS: tuple[ModelSpec, ...] = (
    ModelSpec(
        "mlp",
        "A chain of Linear+ReLU layers: the simplest graph, where the best contiguous split is known exactly.",
        mlp.MLPConfig,
        mlp.build,
        device_memory_bytes=3 * MiB // 2,
    ),
    ModelSpec(
        "cnn",
        "A small ResNet with BatchNorm: residual fan-out and fan-in, and memory taken by "
        "activations rather than weights.",
        cnn.CNNConfig,
        cnn.build,
        device_memory_bytes=15 * MiB // 2,
    ),
    ModelSpec(
        "transformer",
        "A GPT-style decoder: large embedding and LM head at the two ends, identical blocks between them.",
        transformer.TransformerConfig,
        transformer.build,
        device_memory_bytes=4 * MiB,
    ),
    ModelSpec(
        "dlrm",
        "A DLRM-style recommender: big embedding tables beside small MLPs, the case sparse_nn exists for.",
        dlrm.DLRMConfig,
        dlrm.build,
        device_memory_bytes=9 * MiB // 4,
    ),
    ModelSpec(
        "unet",
        "A U-Net encoder-decoder: long skip connections make a DAG far from a chain.",
        unet.UNetConfig,
        unet.build,
        device_memory_bytes=3 * MiB // 4,
    ),
    ModelSpec(
        "moe",
        "A mixture of experts: a router and many parallel expert branches, parallelism that "
        "latency-aware modes can exploit.",
        moe.MoEConfig,
        moe.build,
        device_memory_bytes=3 * MiB,
    ),
    ModelSpec(
        "gpt2_small",
        "GPT-2 small (124M parameters): the transformer at real scale, weights far larger than activations.",
        gpt2_small.GPT2SmallConfig,
        gpt2_small.build,
        device_memory_bytes=400 * MiB,
    ),
)

_BY_NAME: dict[str, ModelSpec] = {s.name: s for s in SPECS}


def names() -> list[str]:
    """Names of the sample models, in registry order (simplest first)."""
    return [s.name for s in SPECS]


def spec(name: str) -> ModelSpec:
    """The registry entry for ``name``; an unknown name raises ``ValueError`` listing the valid
    ones."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown sample model {name!r}; choose one of: {', '.join(names())}") from None


# NOTE: [Sample model sizes]
# Sample models are built with real weights (a split is checked against them), so their size
# knobs are bounded by what this kind of machine can hold many times over: a model is first
# built on the meta device (no memory), and refused when its weights or its example inputs would
# exceed these.
MAX_PARAMETER_BYTES = 512 * 2**20
MAX_INPUT_BYTES = 256 * 2**20


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def build(name: str, **overrides: Any) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """Build model ``name`` in eval mode with deterministic weights, and its example inputs.

    ``overrides`` are fields of ``config_class(name)``; an unknown field or a value of the wrong
    type raises ``ValueError`` naming the valid fields, and sizes past NOTE: [Sample model sizes]
    raise ``ValueError`` naming the limit.
    """
    entry = spec(name)
    try:
        with torch.device("meta"):
            probe, probe_inputs = entry.builder(**overrides)
    except (ValueError, TypeError):
        raise
    except Exception as exc:  # a size the model cannot be built at (e.g. a negative width)
        raise ValueError(f"model {name!r} cannot be built with {overrides}: {exc}") from None
    weights, inputs = _bytes(probe.parameters()), _bytes(t for t in probe_inputs if isinstance(t, Tensor))
    if weights > MAX_PARAMETER_BYTES or inputs > MAX_INPUT_BYTES:
        raise ValueError(
            f"model {name!r} with {overrides} would need {weights / 2**30:.3g} GiB of weights and "
            f"{inputs / 2**20:.3g} MiB of inputs; sample models are built for real, up to "
            f"{MAX_PARAMETER_BYTES / 2**30:g} GiB of weights and {MAX_INPUT_BYTES / 2**20:g} MiB of "
            "inputs: lower the size settings, or load your own model as package.module:factory"
        )
    return entry.builder(**overrides)


def describe(name: str) -> str:
    """One line on what model ``name`` teaches about partitioning."""
    return spec(name).description


def config_class(name: str) -> type:
    """The config dataclass of model ``name``: its fields are the size knobs, with defaults."""
    return spec(name).config_class


def default_devices(name: str) -> tuple[int, int]:
    """``(count, memory_bytes)`` of the equal devices the explorer starts with for ``name``.

    The default model does not fit on one of them; see NOTE: [Default devices].
    """
    s = spec(name)
    return s.device_count, s.device_memory_bytes
