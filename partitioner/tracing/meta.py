"""Models with their weights on the meta device (large hf: models: shapes, no memory) are traced
on meta copies of their example inputs (NOTE: [Meta weights, meta inputs]).

NOTE: [Meta weights, meta inputs]
torch 2.13's export takes a model with meta weights and CPU example inputs; torch 2.11's refuses
it ("Unhandled FakeTensor Device Propagation for aten.embedding.default, found two different
devices meta, cpu"), and 2.13 too where a vision model concatenates a weight with its input.
With the inputs on meta as well, every hf: preset traces on both. So :func:`partitioner.trace`
exports and annotates such a model on :func:`to_meta` copies of its inputs; the graph keeps the
inputs it was given.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["on_meta", "to_meta"]


def on_meta(model: Any) -> bool:
    """Whether ``model``'s weights (or buffers) are on the meta device. O(parameters)."""
    return isinstance(model, torch.nn.Module) and any(t.is_meta for t in (*model.parameters(), *model.buffers()))


def to_meta(values: Any) -> Any:
    """``values`` (a tuple, a dict, nested) with every tensor moved to the meta device."""
    return torch.utils._pytree.tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, values)
