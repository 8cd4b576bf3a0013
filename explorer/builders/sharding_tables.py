"""What the Sharding page shows besides its figures: the parameter table a person edits and the
spec read back from it, the collectives a spec adds, the memory headline and a real run's verdict.
Pure: no Streamlit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from partitioner import Device, Graph, format_bytes, sharding
from partitioner.units import format_seconds

__all__ = [
    "parameter_table",
    "spec_from_rows",
    "collectives_table",
    "MemoryHeadline",
    "memory_headline",
    "run_verdict",
    "TRAINING_OPTIMIZER",
    "training_copies",
    "with_training_state",
    "devices_for_training",
]

# NOTE: [Training memory on Sharding]
# The page's toggle trains with Adam: every device holds its shard of the weights, of their
# gradients and of Adam's two states (the ZeRO paper's 2 + 2 + 12 bytes a parameter in mixed
# precision, 4 copies of the weights in fp32: partitioner.cost.training.training_copies), beside the
# activations, which do not shard here. :func:`sharding.device_memory` counts the weights and the
# activations; the weights' part is scaled by the copies. Issue 56: the toggle counted the
# backward's collectives only, and "Every device fits" read as "TP4 on 4 x H100 trains the 70B".
TRAINING_OPTIMIZER = "adam"


def parameter_table(graph: Graph, spec: Mapping[str, str]) -> pd.DataFrame:
    """One row per parameter (shape, bytes, its partition list), the sharded ones first (each
    group in ``named_parameters()`` order)."""
    params = sharding.parameter_shapes(graph)
    names = sorted(params, key=lambda n: n not in spec)
    return pd.DataFrame(
        [
            {
                "parameter": name,
                "shape": str(list(params[name][0])),
                "bytes": format_bytes(math.prod(params[name][0]) * params[name][1]),
                "spec": spec.get(name, ""),
            }
            for name in names
        ],
        columns=["parameter", "shape", "bytes", "spec"],
    )


def spec_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The spec of the edited table's rows: parameter -> partition list, blank cells (replicated) left out."""
    out = {}
    for row in rows:
        text = "" if row.get("spec") is None or row["spec"] != row["spec"] else str(row["spec"]).strip()  # NaN: blank
        if text:
            out[str(row["parameter"])] = text
    return out


def collectives_table(plan: Any) -> pd.DataFrame:
    """One row per collective the spec adds, in units people read (the reasons are sentences)."""
    return pd.DataFrame(
        [
            {
                "Collective": c.kind,
                "Tensor": c.node,
                "Module": c.module,
                "Pass": "backward" if c.backward else "forward",
                "Bytes": format_bytes(c.nbytes),
                "Time": format_seconds(c.time_s),
                "Why": c.reason,
            }
            for c in plan.collectives
        ],
        columns=["Collective", "Tensor", "Module", "Pass", "Bytes", "Time", "Why"],
    )


@dataclass(frozen=True)
class MemoryHeadline:
    """The largest device's memory with the spec, what sharding saved on it, the devices over capacity."""

    largest_bytes: int
    saved_bytes: int
    over: tuple[str, ...]


def memory_headline(devices: Sequence[Device], before: Mapping[int, int], after: Mapping[int, int]) -> MemoryHeadline:
    """``before``/``after``: each device's bytes (logical id -> bytes) unsharded and with the spec."""
    return MemoryHeadline(
        largest_bytes=max(after.values()),
        saved_bytes=max(before.values()) - max(after.values()),
        over=tuple(d.name for d in devices if after[d.logical_id] > d.memory_bytes),
    )


def training_copies(graph: Graph) -> float:
    """Bytes held in training per byte of weights as traced (NOTE: [Training memory on Sharding])."""
    from partitioner.cost.training import traced_element_bytes
    from partitioner.cost.training import training_copies as copies

    return copies(TRAINING_OPTIMIZER, traced_element_bytes(graph))


def _activations(graph: Graph, unsharded: Mapping[int, int]) -> int:
    """The activations every device holds: its unsharded bytes less the whole model's weights."""
    weights = sum(math.prod(shape) * itemsize for shape, itemsize, _ in sharding.parameter_shapes(graph).values())
    return max(0, min(unsharded.values()) - weights)


def with_training_state(
    graph: Graph, unsharded: Mapping[int, int], used: Mapping[int, int], copies: float
) -> dict[int, int]:
    """``used`` (each device's bytes from :func:`sharding.device_memory`) with its weights held
    ``copies`` times: weights, gradients and optimizer state (NOTE: [Training memory on Sharding])."""
    act = _activations(graph, unsharded)
    return {d: int(act + (v - act) * copies) for d, v in used.items()}


def devices_for_training(graph: Graph, devices: Sequence[Device], unsharded: Mapping[int, int], copies: float) -> list:
    """``devices`` with the memory that makes a spec fit them in inference exactly when it fits
    the real ones in training: act + w x copies <= cap iff act + w <= act + (cap - act) / copies.
    What the suggestion is asked with, so that it suggests a spec that trains."""
    import dataclasses

    act = _activations(graph, unsharded)
    return [
        dataclasses.replace(d, memory_bytes=int(act + max(0, d.memory_bytes - act) / copies)) if copies > 1 else d
        for d in devices
    ]


def run_verdict(result: Any) -> tuple[bool, str]:
    """(outputs equal and collectives as predicted, the sentence saying so; Markdown, the counts
    escaped by the caller) of a ``run_sharded`` result."""
    good = bool(result.outputs_equal and result.counts_match)
    return good, (
        f"Outputs {'equal' if result.outputs_equal else 'differ from'} the model's (max difference "
        f"{result.max_abs_diff:.2g}); collectives counted: {{counted}} "
        f"({'as predicted' if result.counts_match else 'not as predicted'})."
    )
