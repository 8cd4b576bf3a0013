"""Export a plan to what torch's own tools read: the reference partitioner's aot mappings, and a
``torch.distributed.pipelining`` split spec.

* ``fx-aot``: the node-to-partition and partition-to-logical-device mappings of
  ``torch.fx.experimental.partitioner_utils.PartitionerConfig`` (``aot_based`` mode of
  ``torch.fx.experimental.accelerator_partitioner.Partitioner``), keyed by node name in JSON;
  :func:`to_reference_config` builds the real config with ``fx.Node`` keys.
* ``pipeline-split-spec``: for a plan whose partitions run one after another (a chain), the
  ``split_spec`` of ``torch.distributed.pipelining.pipeline``: ``{module path: "beginning"}``,
  one split where each later partition's first node starts a submodule.
  # NOTE: [Split spec boundaries]
  ``pipeline()`` inserts ``pipe_split()`` before the forward of each named submodule, so a stage
  boundary can only fall where a submodule starts. The boundary of stage k is its first op node
  in execution (graph) order; we name the innermost module that node runs in
  (``Node.module_path``), which is always a module whose forward really runs (a call_module
  target or an entry of ``nn_module_stack``), unlike container prefixes such as ``ModuleList``.
  The boundary is valid when that node is the module's first op node and the module's op nodes
  are contiguous (the module runs once).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from partitioner.devices import Device
from partitioner.errors import PartitionError
from partitioner.graph import OP_KINDS, Graph
from partitioner.plan.records import Plan

if TYPE_CHECKING:  # pragma: no cover
    import torch.fx as fx
    from torch.distributed.pipelining import SplitPoint
    from torch.fx.experimental.partitioner_utils import PartitionerConfig

__all__ = [
    "ExportError",
    "EXPORT_KINDS",
    "export_plan",
    "to_fx_aot",
    "read_aot_mapping",
    "to_reference_config",
    "to_pipeline_split_spec",
    "pipeline_split_points",
]

logger = logging.getLogger(__name__)


class ExportError(PartitionError):
    """A plan cannot be written in the requested export format (the message says why and the fix)."""


# --------------------------------------------------------------------------------------------
# fx-aot: the reference partitioner's mappings


def to_fx_aot(plan: Plan) -> dict[str, Any]:
    """``{"node_to_partition": {name: pid}, "partition_to_logical_device_mapping": {pid: [ids]},
    "devices": [...]}``; partition ids are strings in the JSON object keys, as JSON requires.
    ``devices`` lists the reference ``Device`` fields (name, available_mem_bytes, logical_id). O(N)."""
    return {
        "node_to_partition": {name: p.id for p in plan.partitions for name in p.node_names},
        "partition_to_logical_device_mapping": {str(p.id): list(p.device_ids) for p in plan.partitions},
        "devices": [
            {"name": d.name, "available_mem_bytes": d.memory_bytes, "logical_id": d.logical_id} for d in plan.devices
        ],
        "model": plan.model,
        "graph_fingerprint": plan.graph_fingerprint,
    }


def read_aot_mapping(data: Any) -> tuple[dict[str, int], dict[int, list[int]]]:
    """Mappings for ``aot_based`` from parsed JSON: a saved plan, an ``fx-aot`` export, or
    ``{"node_to_partition": {...}, "partition_to_devices": {...}}``. Raises :class:`ExportError`
    naming the field that is missing or malformed."""
    if isinstance(data, Mapping) and "partitions" in data and "schema_version" in data:
        plan = Plan.from_dict(data)
        return plan.node_to_partition(), plan.partition_to_devices()
    if not isinstance(data, Mapping):
        raise ExportError(
            f"an aot mapping must be a JSON object, got {type(data).__name__}; give a plan file or "
            '{"node_to_partition": {...}, "partition_to_devices": {...}}'
        )
    nodes = data.get("node_to_partition")
    devices = data.get("partition_to_devices", data.get("partition_to_logical_device_mapping"))
    if not isinstance(nodes, Mapping) or not isinstance(devices, Mapping):
        raise ExportError(
            "an aot mapping needs the objects 'node_to_partition' ({node name: partition id}) and "
            "'partition_to_devices' ({partition id: [logical device ids]}); "
            f"this one has the keys {sorted(map(str, data))}"
        )
    try:
        node_to_partition = {str(k): int(v) for k, v in nodes.items()}
    except (TypeError, ValueError):
        raise ExportError("node_to_partition values must be integer partition ids") from None
    try:
        partition_to_devices = {
            int(k): [int(d) for d in (v if isinstance(v, (list, tuple)) else [v])] for k, v in devices.items()
        }
    except (TypeError, ValueError):
        raise ExportError(
            "partition_to_devices must map integer partition ids to lists of integer logical "
            'device ids, e.g. {"0": [0], "1": [1]}'
        ) from None
    return node_to_partition, partition_to_devices


def to_reference_config(
    plan: Plan, graph_module: fx.GraphModule, devices: Sequence[Device] | None = None
) -> "PartitionerConfig":
    """The reference ``PartitionerConfig`` (mode ``aot_based``) reproducing ``plan`` on
    ``graph_module``: node names are mapped to its ``fx.Node`` objects (graph order).
    ``devices`` default to the plan's. The reference's ``partition_graph`` also needs each node's
    size: run ``torch.fx.passes.graph_manipulation.get_size_of_all_nodes(gm, example_inputs)``
    first. Raises :class:`ExportError` when the plan and the module disagree on the nodes. O(N).
    """
    from torch.fx.experimental.partitioner_utils import Device as RefDevice
    from torch.fx.experimental.partitioner_utils import PartitionerConfig, PartitionMode

    mapping = plan.node_to_partition()
    by_name = {n.name: n for n in graph_module.graph.nodes}
    unknown = [n for n in mapping if n not in by_name]
    missing = [n.name for n in graph_module.graph.nodes if n.op in OP_KINDS and n.name not in mapping]
    problems = []
    if unknown:
        problems.append(f"the plan names node(s) the module lacks: {unknown[:10]}")
    if missing:
        problems.append(f"the module's op node(s) {missing[:10]} are in no partition")
    devs = list(plan.devices if devices is None else devices)
    known = {d.logical_id for d in devs}
    bad = sorted({i for p in plan.partitions for i in p.device_ids if i not in known})
    if bad:
        problems.append(f"partitions use logical device id(s) {bad} not among the devices {sorted(known)}")
    if problems:
        raise ExportError(
            "cannot build a reference PartitionerConfig: "
            + "; ".join(problems)
            + ". Re-plan for this model (or check the plan with `partition-explorer check`)."
        )
    rate = plan.transfer_rate_bytes_per_s
    return PartitionerConfig(
        devices=[RefDevice(d.name, d.memory_bytes, d.logical_id) for d in devs],
        mode=PartitionMode.aot_based,
        transfer_rate_bytes_per_sec=rate if rate else math.inf,
        node_to_partition_mapping={n: mapping[n.name] for n in graph_module.graph.nodes if n.name in mapping},
        partition_to_logical_device_mapping={p.id: list(p.device_ids) for p in plan.partitions},
    )


# --------------------------------------------------------------------------------------------
# pipeline-split-spec


def _stage_runs(plan: Plan, graph: Graph) -> list[tuple[int, int]]:
    """(partition id, first op position) per stage; raises unless partitions are contiguous runs
    of op nodes in graph order (then they form a chain)."""
    mapping = plan.node_to_partition()
    ops = graph.op_names
    unknown = [n for n in mapping if n not in graph.index or not graph.node(n).is_op]
    missing = [n for n in ops if n not in mapping]
    if unknown or missing:
        detail = []
        if unknown:
            detail.append(f"it names node(s) the model lacks: {unknown[:10]}")
        if missing:
            detail.append(f"it leaves out the model's op node(s) {missing[:10]}")
        raise ExportError(
            f"the plan does not match model {graph.name!r}: "
            + "; ".join(detail)
            + ". Re-plan for this model, or check it with `partition-explorer check`."
        )
    runs: list[tuple[int, int]] = []
    seen: dict[int, int] = {}
    for i, name in enumerate(ops):
        pid = mapping[name]
        if runs and runs[-1][0] == pid:
            continue
        if pid in seen:
            before = ops[i - 1]
            raise ExportError(
                f"the plan's partitions do not form a chain: partition {pid} runs again at node "
                f"{name!r} after node {before!r} of partition {mapping[before]} (its first run "
                f"started at node {ops[seen[pid]]!r}); a pipeline stage must be one contiguous run "
                "of nodes in execution order. Use a plan whose partitions follow the model's order "
                "(e.g. mode size_based without saturate_host) or move the nodes by hand."
            )
        seen[pid] = i
        runs.append((pid, i))
    return runs


def _module_span(graph: Graph, path: str) -> list[int]:
    """Positions (in op order) of op nodes that run inside module ``path``."""
    prefix = path + "."
    return [
        i
        for i, v in enumerate(graph.op_indices)
        if graph.nodes[v].module_path == path or graph.nodes[v].module_path.startswith(prefix)
    ]


def _valid_boundary(graph: Graph, position: int) -> str | None:
    """The module path a split before op ``position`` may name, or None (see NOTE above)."""
    path = graph.nodes[graph.op_indices[position]].module_path
    if not path:
        return None
    span = _module_span(graph, path)
    if span and span[0] == position and span[-1] - span[0] + 1 == len(span):
        return path
    return None


def _nearest_valid(graph: Graph, position: int) -> str:
    ops = graph.op_names
    found = []
    for step in range(1, len(ops)):
        for pos in (position - step, position + step):
            if 0 < pos < len(ops) and _valid_boundary(graph, pos):
                found.append(f"{ops[pos]!r} (module {_valid_boundary(graph, pos)!r})")
        if found:
            break
    return (" The nearest nodes where a stage may start: " + ", ".join(found) + ".") if found else ""


def to_pipeline_split_spec(plan: Plan, graph: Graph) -> dict[str, Any]:
    """The ``torch.distributed.pipelining`` split spec of a chain plan, as JSON-ready data:
    ``{"split_spec": {module path: "beginning"}, "num_stages": k, "stages": [...], ...}``.

    Stage k is the k-th partition in execution order. Raises :class:`ExportError` when the
    partitions are not contiguous runs in execution order, or when a stage would start at a node
    outside any submodule or in the middle of one (see NOTE: [Split spec boundaries]). O(N * S)
    for S stages.
    """
    runs = _stage_runs(plan, graph)
    ops = graph.op_names
    parts = {p.id: p for p in plan.partitions}
    spec: dict[str, str] = {}
    stages = []
    for k, (pid, pos) in enumerate(runs):
        node = graph.nodes[graph.op_indices[pos]]
        path: str | None = None
        if k > 0:
            path = _valid_boundary(graph, pos)
            if path is None:
                if not node.module_path:
                    where = "runs in the model's top-level forward, not inside a submodule"
                else:
                    span = _module_span(graph, node.module_path)
                    first = ops[span[0]]
                    where = (
                        f"is in the middle of module {node.module_path!r} (whose first node is "
                        f"{first!r}, in partition {plan.node_to_partition()[first]})"
                        if span[0] != pos
                        else f"starts module {node.module_path!r}, which runs more than once"
                    )
                raise ExportError(
                    f"cannot write a pipeline split spec: stage {k} (partition {pid}) starts at "
                    f"node {node.name!r}, which {where}; pipelining can only split where a "
                    "submodule's forward starts. Move nodes so each partition starts at a "
                    "submodule's first node." + _nearest_valid(graph, pos)
                )
            spec[path] = "beginning"
        stages.append(
            {
                "stage": k,
                "partition": pid,
                "devices": list(parts[pid].device_ids),
                "first_node": node.name,
                "split_at": path,
            }
        )
    return {
        "split_spec": spec,
        "num_stages": len(runs),
        "stages": stages,
        "model": plan.model,
        "graph_fingerprint": plan.graph_fingerprint,
        "usage": (
            "from torch.distributed.pipelining import pipeline, SplitPoint; "
            "pipe = pipeline(module, mb_args, split_spec={k: SplitPoint.BEGINNING for k in spec['split_spec']})"
        ),
    }


def pipeline_split_points(plan: Plan, graph: Graph) -> dict[str, "SplitPoint"]:
    """:func:`to_pipeline_split_spec` as the ``split_spec`` argument of
    ``torch.distributed.pipelining.pipeline`` (``SplitPoint`` values)."""
    from torch.distributed.pipelining import SplitPoint

    spec = to_pipeline_split_spec(plan, graph)["split_spec"]
    return {path: SplitPoint.BEGINNING for path in spec}


# --------------------------------------------------------------------------------------------
# Front door


def _fx_aot(plan: Plan, graph: Graph | None) -> dict[str, Any]:
    return to_fx_aot(plan)


def _needs_graph(kind: str, graph: Graph | None) -> Graph:
    if graph is None:
        raise ExportError(
            f"the {kind} export needs the model (module paths come from the traced graph); pass the "
            f"graph, e.g. `partition-explorer export plan.json MODEL --kind {kind}`"
        )
    return graph


def _pipeline(plan: Plan, graph: Graph | None) -> dict[str, Any]:
    return to_pipeline_split_spec(plan, _needs_graph("pipeline-split-spec", graph))


def _device_map(plan: Plan, graph: Graph | None) -> dict[str, Any]:
    from partitioner.interop.device_map import to_device_map

    exported = to_device_map(plan, _needs_graph("accelerate-device-map", graph))
    return {
        "device_map": exported.device_map,
        "split_modules": list(exported.split_modules),
        "not_following_module_boundaries": list(exported.reasons),
        "moved": [
            {
                "kinds": list(g.kinds),
                "modules": list(g.modules),
                "device": g.device,
                "from_devices": list(g.from_devices),
                "moved_bytes": g.moved_bytes,
            }
            for g in exported.moved
        ],
        "moved_bytes": exported.moved_bytes,
        "notes": list(exported.notes),
    }


EXPORT_KINDS: dict[str, Callable[[Plan, Graph | None], dict[str, Any]]] = {
    "fx-aot": _fx_aot,
    "pipeline-split-spec": _pipeline,
    "accelerate-device-map": _device_map,
}


def export_plan(plan: Plan, kind: str, graph: Graph | None = None) -> dict[str, Any]:
    """Export ``plan`` as ``kind`` (one of :data:`EXPORT_KINDS`), JSON-ready."""
    try:
        fn = EXPORT_KINDS[kind]
    except KeyError:
        raise ExportError(f"unknown export kind {kind!r}; valid kinds are {', '.join(EXPORT_KINDS)}") from None
    return fn(plan, graph)
