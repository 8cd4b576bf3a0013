"""Helpers the sample models share: validated configs from keyword overrides, seeded building."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import typing
from typing import Any, Iterator, TypeVar

import torch

__all__ = ["make_config", "seeded", "require_positive", "MAX_GRAPH_OPS", "HF_OPS_PER_LAYER"]

# NOTE: [Graph size caps]
# Building and tracing a model take time and memory in proportion to its operations (about 1-5 ms
# an operation here: 5,600 operations of Llama-3-70B traced in 25 s), and nothing else bounds a
# layer count: a link with n_layer=100000000 built layers for minutes before any other check. So
# a graph's size is estimated from its config before anything is built, and refused above this
# cap: a sample model's operations are counted from its config (sample_models._loading.GRAPH_OPS,
# checked against real traces in the tests); an hf: model's layers are read from its config,
# at up to HF_OPS_PER_LAYER operations each (measured: 39 BERT and ViT, 53 GPT-2, 63 Llama,
# 67 Gemma, 106 Mixtral, 114 Qwen2-MoE), so at most 160 layers (Llama 3.1 405B has 126).
MAX_GRAPH_OPS = 20_000
HF_OPS_PER_LAYER = 125

C = TypeVar("C")


def make_config(config_cls: type[C], overrides: dict[str, Any], *, model: str = "") -> C:
    """Build ``config_cls(**overrides)``, checking names and types first.

    An unknown field or a value of the wrong type raises a ``ValueError`` that names the model,
    the field and the valid choices. Ints are accepted for float fields (and converted); bools
    are not accepted for int fields.
    """
    what = f"model {model!r}" if model else config_cls.__name__
    hints = typing.get_type_hints(config_cls)
    fields = [f.name for f in dataclasses.fields(config_cls)]  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(
            f"{what} has no config field {', '.join(map(repr, unknown))}; valid fields: {', '.join(fields)}"
        )
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        kind = hints[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise ValueError(
                f"{what}: field {name!r} must be {kind.__name__} (got {value!r} of type {type(value).__name__})"
            )
        values[name] = value
    try:
        return config_cls(**values)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from e


def require_positive(config: object, *names: str) -> None:
    """Raise ``ValueError`` naming the first of ``names`` whose value on ``config`` is not > 0."""
    for name in names:
        value = getattr(config, name)
        if not value > 0:
            raise ValueError(f"{type(config).__name__}.{name} must be > 0 (got {value!r}); pass a positive value")


# torch's CPU generator is one per process: two threads building models at once (the app's
# sessions) would draw from each other's seeded stream and build other weights than a serial build.
_SEED_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's CPU generator inside the block and restore the caller's state afterwards;
    one seeded block at a time in a process, so a build gives the same weights from any thread."""
    with _SEED_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
