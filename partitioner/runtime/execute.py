"""Run a plan for real: one process per device that holds a partition, each executing its
partitions of the split module.

Every rank walks the split module's graph in the same topological order (the NOTE below); the
owner of a partition computes it; its outputs go to the ranks that read them with non-blocking
sends (``isend``; gloo's blocking ``send`` waits for the receiver, so two ranks sending to each
other first would deadlock); a replicated partition runs on every device holding it and its first
device sends. Rank 0 gathers the model's outputs. Timings per partition (compute, waiting for
inputs, bytes received) and end to end come back beside the plan's predictions.
(NOTE: [One walk, every rank] in :mod:`partitioner.runtime.walk`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from partitioner.devices import Device
from partitioner.errors import InvalidPlanError, RunError
from partitioner.graph import Graph
from partitioner.plan.records import Plan
from partitioner.plan.validate import ViolationKind
from partitioner.processes.launch import default_backend, launch
from partitioner.processes.portable import picklable  # re-exported: its old home
from partitioner.runtime.splitting import split
from partitioner.runtime.walk import RankResult, rank_entry

__all__ = ["run", "RunResult", "PartitionRun", "prepare", "run_rank", "Prepared", "ranked_devices", "predicted_walk_s"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionRun:
    """One partition as it ran (on its first device; replicas ran the same work)."""

    id: int
    ranks: tuple[int, ...]
    compute_s: float  # time inside the partition's submodule
    wait_s: float  # time its rank spent receiving the partition's inputs
    received_bytes: int  # bytes its inputs brought from other ranks
    predicted_s: float  # the plan's latency for it

    @property
    def ratio(self) -> float:
        """Measured compute over predicted latency (the cost model's error for this partition)."""
        return self.compute_s / self.predicted_s if self.predicted_s > 0 else float("inf")


@dataclass(frozen=True)
class RunResult:
    outputs: Any  # the model's outputs, gathered on rank 0
    outputs_equal: bool  # equal to the single-process model's (torch.testing.assert_close)
    measured_latency_s: float  # end to end, on rank 0, the median of the timed walks (NOTE: [One statistic])
    predicted_latency_s: float  # the plan's, the outputs' way back to rank 0 and the closing barrier
    partitions: tuple[PartitionRun, ...]
    world_size: int
    backend: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "outputs_equal": self.outputs_equal,
            "measured_latency_s": self.measured_latency_s,
            "predicted_latency_s": self.predicted_latency_s,
            "world_size": self.world_size,
            "backend": self.backend,
            "partitions": [
                {
                    "id": p.id,
                    "ranks": list(p.ranks),
                    "compute_s": p.compute_s,
                    "wait_s": p.wait_s,
                    "received_bytes": p.received_bytes,
                    "predicted_s": p.predicted_s,
                }
                for p in self.partitions
            ],
        }


_RUN_IGNORES = frozenset({ViolationKind.MEMORY, ViolationKind.MEMORY_BUDGET, ViolationKind.LATENCY_BUDGET})


@dataclass(frozen=True)
class Prepared:
    """What every rank needs: the split module, who owns each node, the shapes that cross, and
    the single-process reference outputs."""

    module: fx.GraphModule
    owners: dict[str, tuple[int, ...]]
    shapes: dict[str, Any]
    inputs: tuple[Any, ...]
    reference: Any
    partitions: dict[str, Any]  # submodule name -> Partition


def ranked_devices(plan: Plan) -> list[Device]:
    """The devices a run starts a process for, rank i on the i-th: those holding a partition, in
    the plan's order (an idle device has nothing to run, so it gets no process). O(devices +
    partitions)."""
    used = {d for p in plan.partitions for d in p.device_ids}
    return [d for d in plan.devices if d.logical_id in used]


def prepare(plan: Plan, graph: Graph, example_inputs: Sequence[Any] | torch.Tensor) -> Prepared:
    """Split ``plan`` and run it once here: the reference outputs and every crossing shape."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    inputs = tuple(example_inputs)
    gm = picklable(split(plan, graph))
    rank_of = {d.logical_id: i for i, d in enumerate(ranked_devices(plan))}
    owners: dict[str, tuple[int, ...]] = {}
    part_of_submod = {}
    for n in gm.graph.nodes:
        if n.op == "call_module":
            pid = int(str(n.target).rsplit("_", 1)[1])
            part = next(p for p in plan.partitions if p.id == pid)
            owners[n.name] = tuple(rank_of[d] for d in part.device_ids)
            part_of_submod[n.name] = part
    for n in gm.graph.nodes:  # getitem and other glue follow the node they read
        if n.op == "call_function":
            src = n.all_input_nodes[0].name if n.all_input_nodes else None
            owners[n.name] = owners.get(src, (0,)) if src else (0,)
    # One run here gives the reference outputs and the shape of every value that crosses.
    shapes: dict[str, Any] = {}

    class _Record(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            out = super().run_node(n)
            leaves, spec = tree_flatten(out)
            if all(isinstance(t, torch.Tensor) for t in leaves):
                shapes[n.name] = ([(tuple(t.shape), t.dtype) for t in leaves], spec)
            return out

    try:
        with torch.no_grad():
            reference = _Record(gm).run(*inputs)
    except Exception as exc:
        raise RunError(
            f"the split model does not run on the example inputs in one process ("
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); check "
            "that the inputs match the model's forward() before running it on processes"
        ) from None
    return Prepared(gm, owners, shapes, inputs, reference, part_of_submod)


def run_rank(prepared: Prepared, repeats: int = 3) -> RankResult:
    """This process's share of a run already set up by ``torchrun`` (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``/``PORT`` in the environment): the same walk the local launcher starts, so a
    plan runs across hosts with a real rendezvous."""
    if not dist.is_initialized():
        dist.init_process_group(default_backend())
    try:
        return rank_entry(
            dist.get_rank(),
            dist.get_world_size(),
            prepared.module,
            prepared.owners,
            prepared.inputs,
            prepared.shapes,
            repeats,
        )
    finally:
        dist.destroy_process_group()


def run(
    plan: Plan,
    graph: Graph,
    example_inputs: Sequence[Any] | torch.Tensor,
    backend: str | None = None,
    timeout_s: float = 120.0,
    repeats: int = 3,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``plan`` on one process per device that holds a partition (rank = its position in
    :func:`ranked_devices`), over torch.distributed; returns the outputs gathered on rank 0 and the
    measured figures beside the predicted ones. Raises :class:`RunError` naming the rank, the
    partition and the cause when a rank fails or the run passes ``timeout_s``; raises
    :class:`InvalidPlanError` before any process starts when the plan breaks a rule that a run
    needs (every node placed once, on known devices, partitions acyclic; memory is not checked:
    the plan's devices are what-ifs)."""
    problems = [v for v in plan.violations(graph, check_fingerprint=False) if v.kind not in _RUN_IGNORES]
    if problems:
        raise InvalidPlanError(problems)
    prepared = prepare(plan, graph, example_inputs)
    world = len(ranked_devices(plan))
    backend = backend or default_backend()
    results = _launch_ranks(plan, prepared, backend, timeout_s, repeats, progress)
    first = results[0]
    try:
        torch.testing.assert_close(first.outputs, prepared.reference)
        equal = True
    except AssertionError:
        equal = False
    runs = _partition_runs(prepared, results)
    return RunResult(
        first.outputs, equal, float(first.latency_s), predicted_walk_s(plan, graph, world), runs, world, backend
    )


def _launch_ranks(
    plan: Plan,
    prepared: Prepared,
    backend: str,
    timeout_s: float,
    repeats: int,
    progress: Callable[[str], None] | None,
) -> list[RankResult]:
    """Every rank's walk, on one process each; a failure names what the failing rank runs."""
    ranked = ranked_devices(plan)
    rank_of = {d.logical_id: i for i, d in enumerate(ranked)}
    try:
        return launch(
            rank_entry,
            len(ranked),
            (prepared.module, prepared.owners, prepared.inputs, prepared.shapes, repeats),
            timeout_s=timeout_s,
            backend=backend,
            progress=progress,
        )
    except RunError as exc:
        where = ""
        if exc.rank is not None:
            held = [p.id for p in plan.partitions if any(rank_of[d] == exc.rank for d in p.device_ids)]
            where = f" (rank {exc.rank} runs partition(s) {held} on {ranked[exc.rank].name})"
        raise RunError(f"{exc}{where}", rank=exc.rank) from None


def _partition_runs(prepared: Prepared, results: Sequence[RankResult]) -> tuple[PartitionRun, ...]:
    """Each partition's figures, by id, from its first device's rank."""
    by_name = {n.name: n for n in prepared.module.graph.nodes}

    def source(name: str) -> str:  # glue (getitem) stands for the partition output it reads
        n = by_name[name]
        while n.op == "call_function" and n.all_input_nodes:
            n = n.all_input_nodes[0]
        return n.name

    runs = []
    for name, part in sorted(prepared.partitions.items(), key=lambda kv: kv[1].id):
        r = prepared.owners[name][0]
        timing = results[r].timings
        inputs_of = sorted({source(a.name) for a in by_name[name].all_input_nodes})
        runs.append(
            PartitionRun(
                id=part.id,
                ranks=prepared.owners[name],
                compute_s=float(timing.compute_s.get(name, 0.0)),
                wait_s=float(sum(timing.wait_s.get(a, 0.0) for a in inputs_of)),
                received_bytes=int(sum(timing.received_bytes.get(a, 0) for a in inputs_of)),
                predicted_s=part.latency_s,
            )
        )
    return tuple(runs)


def predicted_walk_s(plan: Plan, graph: Graph, world: int) -> float:
    """What a timed walk of ``plan`` on ``world`` ranks should take: the plan's latency, the
    outputs' way back to rank 0 and the barrier that closes the walk (the devices' profile's
    ``barrier_for(world)``, measured after compute; 0 without a profile)."""
    from partitioner.cost.model import device_profile

    profile = device_profile(plan.devices)
    barrier = profile.barrier_for(world) if profile is not None else 0.0
    return plan.latency_s + _gather_s(plan, graph) + barrier


def _gather_s(plan: Plan, graph: Graph) -> float:
    """What the run adds to the plan's latency: rank 0 gathers the model's outputs, so an output
    made on another device crosses once more after its partition finishes (at the plan's rate,
    with the measured latency of the devices' profile). 0 when every output is made on rank 0."""
    from partitioner.cost.model import transfer_latency_s

    rate = plan.transfer_rate_bytes_per_s
    if not rate or not plan.devices:
        return 0.0
    home = plan.devices[0].logical_id
    where = plan.node_to_partition()
    parts = {p.id: p for p in plan.partitions}
    late = 0.0
    for v in {u for node in graph.nodes if node.op == "output" for u in node.inputs}:
        node = graph.nodes[v]
        part = parts.get(where.get(node.name, -1))
        if part is None or home in part.device_ids:
            continue
        arrives = part.finish_s + transfer_latency_s(plan.devices) + node.output_bytes / rate
        late = max(late, arrives - plan.latency_s)
    return late
