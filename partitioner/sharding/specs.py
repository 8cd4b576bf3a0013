"""Parameter sharding along one axis: autodist's partition lists, with DTensor's chunking.

Reference: autodist's ``VariablePartitioner`` and its ``PartitionerConfig`` (a partition list
such as ``[1, 4]``, serialised ``"1,4"``: 4 shards along axis 1, at most one axis above 1). In
PyTorch the same split is DTensor's ``Shard(dim)`` placement, which chunks like ``torch.chunk``:
each shard has ``ceil(size / n)`` rows and the trailing shards take what is left, possibly none
(10 rows over 4 devices: 3, 3, 3, 1; 5 over 4: 2, 2, 1, 0).

:func:`device_memory` gives each device's bytes when the devices run the model together (tensor
parallel: every parameter replicated unless the spec shards it, plus activations), or, with a
plan, within each partition's devices.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import ShardingError
from partitioner.graph import Graph

__all__ = [
    "parse_partition_str",
    "format_partition_list",
    "validate_partition_list",
    "shard_shapes",
    "shard_axis",
    "parameter_shapes",
    "device_memory",
]


def parse_partition_str(text: str) -> list[int]:
    """``"1,4"`` -> ``[1, 4]`` (autodist's serialised form)."""
    try:
        values = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise ShardingError(
            f"a partition list is comma-separated shard counts per axis, e.g. '1,4' (got {text!r})"
        ) from None
    if any(v < 1 for v in values):
        raise ShardingError(
            f"shard counts must be >= 1 on every axis (got {text!r}); write 1 for an axis that is not split"
        )
    return values


def _whole_numbers(values: Sequence[int]) -> list[int]:
    """``values`` as ints, or a :class:`ShardingError` naming the list (a nested list, a float,
    a bool or text in a spec file is no shard count)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ShardingError(f"a partition list is shard counts per axis, e.g. [1, 4] or '1,4' (got {values!r})")
    counts = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise ShardingError(
                f"a partition list holds whole numbers, one per axis, e.g. [1, 4] or '1,4' "
                f"(got {list(values)!r}: {v!r} is no shard count)"
            )
        counts.append(int(v))
    return counts


def format_partition_list(values: Sequence[int]) -> str:
    """``[1, 4]`` -> ``"1,4"``. Raises :class:`ShardingError` for entries that are not whole numbers."""
    return ",".join(str(v) for v in _whole_numbers(values))


def validate_partition_list(values: Sequence[int] | str, shape: Sequence[int], name: str = "parameter") -> list[int]:
    """Check ``values`` against a tensor of ``shape`` as autodist does: one count per axis, each
    >= 1, at most one axis above 1, and no more shards than that axis has rows. Returns the list."""
    counts = parse_partition_str(values) if isinstance(values, str) else _whole_numbers(values)
    shape = tuple(int(s) for s in shape)
    where = f"{name} of shape {list(shape)}"
    if len(counts) != len(shape):
        raise ShardingError(
            f"{where}: the partition list {format_partition_list(counts)!r} has "
            f"{len(counts)} entries but the tensor has {len(shape)} axes; give one per axis, "
            f"e.g. {format_partition_list([1] * (len(shape) - 1) + [2]) if shape else ''!r}"
        )
    if any(c < 1 for c in counts):
        raise ShardingError(f"{where}: shard counts must be >= 1 (got {format_partition_list(counts)!r})")
    split = [i for i, c in enumerate(counts) if c > 1]
    if len(split) > 1:
        raise ShardingError(
            f"{where}: at most one axis may be split (got {format_partition_list(counts)!r}, "
            f"splitting axes {split}); keep one count above 1"
        )
    for i in split:
        if counts[i] > shape[i]:
            raise ShardingError(
                f"{where}: {counts[i]} shards along axis {i} exceed its {shape[i]} rows; use at most {shape[i]}"
            )
    return counts


def shard_axis(counts: Sequence[int]) -> int | None:
    """The split axis of a valid partition list, or None when nothing is split."""
    return next((i for i, c in enumerate(counts) if c > 1), None)


def shard_shapes(shape: Sequence[int], counts: Sequence[int] | str) -> list[tuple[int, ...]]:
    """The local shape on each of the shards, chunked as DTensor's ``Shard(dim)`` does. O(n)."""
    counts = validate_partition_list(counts, shape)
    axis = shard_axis(counts)
    shape = tuple(int(s) for s in shape)
    if axis is None:
        return [shape]
    n, size = counts[axis], shape[axis]
    chunk = math.ceil(size / n)
    out = []
    for k in range(n):
        rows = max(0, min(chunk, size - k * chunk))
        out.append(shape[:axis] + (rows,) + shape[axis + 1 :])
    return out


def parameter_shapes(graph: Graph) -> dict[str, tuple[tuple[int, ...], int, str]]:
    """``{name: (shape, bytes per element, node name)}`` for the traced module's parameters, named
    as ``named_parameters()`` names them, with the graph node that uses them."""
    records = graph.named_parameters  # recorded by the trace: no module traced again (a 405B's 14 s)
    if records is None:
        gm = graph.graph_module
        if gm is None:
            raise ShardingError(f"graph {graph.name!r} has no traced module; use partitioner.trace")
        records = tuple((n, tuple(int(s) for s in p.shape), int(p.element_size())) for n, p in gm.named_parameters())
    owner: dict[str, str] = {}
    for nd in graph.nodes:
        if nd.op in ("call_module", "get_attr"):
            owner.setdefault(nd.target, nd.name)
    return {
        name: (tuple(shape), size, owner.get(name.rpartition(".")[0]) or owner.get(name) or "")
        for name, shape, size in records
    }


def device_memory(
    graph: Graph, devices: Sequence[Device], spec: Mapping[str, str | Sequence[int]], plan: object | None = None
) -> dict[int, int]:
    """Bytes on each device: parameters (their shard where ``spec`` shards them, else whole) plus
    activations. Without ``plan`` all ``devices`` run the whole model together (tensor parallel);
    with one, each partition's parameters are sharded over that partition's devices and each
    device holds the activations of the partitions it runs. O(N + P)."""
    params = parameter_shapes(graph)
    unknown = sorted(set(spec) - set(params))
    if unknown:
        shown = ", ".join(list(params)[:5])
        raise ShardingError(
            f"the spec names parameter(s) {unknown} the model does not have; names are "
            f"as named_parameters() gives them, e.g. {shown}"
        )
    counts = {name: validate_partition_list(spec[name], params[name][0], name) for name in spec}
    groups: list[tuple[list[int], set[str]]] = []  # (device ids, node names they run)
    if plan is None:
        groups.append(([d.logical_id for d in devices], {nd.name for nd in graph.nodes}))
    else:
        for part in getattr(plan, "partitions"):
            groups.append((list(part.device_ids), set(part.node_names)))
    used = {d.logical_id: 0 for d in devices}
    by_name = {nd.name: nd for nd in graph.nodes}
    for ids, nodes in groups:
        # Weights are counted below, parameter by parameter: a get_attr node's output is one of
        # them (lifted by torch.export), not an activation.
        activations = sum(by_name[n].output_bytes for n in nodes if n in by_name and by_name[n].op != "get_attr")
        for position, did in enumerate(ids):
            total = activations
            for name, (shape, itemsize, node) in params.items():
                if plan is not None and node not in nodes:
                    continue
                if name in counts:
                    shards = shard_shapes(shape, counts[name])
                    if len(shards) > 1 and len(shards) != len(ids):
                        raise ShardingError(
                            f"{name}: {len(shards)} shards but the devices running it are {len(ids)}; "
                            f"shard it {len(ids)} ways (e.g. {format_partition_list([1] * (len(shape) - 1) + [len(ids)])!r})"
                        )
                    local = shards[position] if len(shards) > 1 else shape
                else:
                    local = shape
                total += math.prod(local) * itemsize
            used[did] = used.get(did, 0) + total
    return used
