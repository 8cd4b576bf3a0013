"""Small, readable PyTorch models that exercise every partition mode, and a registry by name.

Each model is one file with a config dataclass (a comment per field), shape comments in its
forward and a ``build(**overrides)`` that returns ``(module, example_inputs)``. Every model
traces with ``torch.fx.symbolic_trace`` and every node of the traced graph outputs one tensor.

    >>> import sample_models
    >>> sample_models.names()
    ['mlp', 'cnn', 'transformer', 'dlrm', 'unet', 'moe', 'gpt2_small']
    >>> model, inputs = sample_models.build("mlp", n_layer=4)
    >>> module, inputs, kwargs = sample_models.load("transformer", {"n_layer": 2})

:func:`load` is the one front door the app and the command line share: sample models by name,
a person's own ``package.module:factory``, and Hugging Face architectures built from their configs
(``hf:<model_type>`` or a preset such as ``hf:llama-3-8b``; :mod:`sample_models._hf`, needs
``transformers``).
"""

from __future__ import annotations

from typing import Any

from sample_models._hf_presets import PRESETS as HF_PRESETS  # hf:<preset> -> (model type, config fields)
from sample_models._loading import (
    ModelSpecError,
    is_factory,
    is_hf,
    label,
    load,
    parse_overrides,
    trace_loaded,
    weight_scale,
)
from sample_models._registry import (
    SPECS,
    ModelSpec,
    build,
    config_class,
    default_devices,
    describe,
    names,
    spec,
)
from sample_models._user import LoaderError

__all__ = [
    "load",
    "label",
    "parse_overrides",
    "LoaderError",
    "ModelSpecError",
    "HF_PRESETS",
    "is_factory",
    "is_hf",
    "weight_scale",
    "trace_loaded",
    "SPECS",
    "ModelSpec",
    "build",
    "config_class",
    "default_devices",
    "describe",
    "names",
    "spec",
    "layer_fields",
    "TOKEN_SETTINGS",
]

_HF_LAZY = ("layer_fields", "TOKEN_SETTINGS")  # read from sample_models._hf, which imports torch, on first use


def __getattr__(name: str) -> Any:
    """``layer_fields`` and ``TOKEN_SETTINGS`` of the Hugging Face loader, imported when first read
    (PEP 562), so ``import sample_models`` stays light."""
    if name in _HF_LAZY:
        from sample_models import _hf

        return getattr(_hf, name)
    raise AttributeError(f"module 'sample_models' has no attribute {name!r}")
