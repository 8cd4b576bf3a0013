"""The techniques side by side for one model and one set of devices: torch.fx's accelerator
partitioner (a mode's plan), pipeline stages (torch.distributed.pipelining's schedules), tensor
parallelism (Megatron-LM's column and row splits) and the cluster planner's best layout, each
answered by the library's own module for the same forward pass of the model's example batch.

Pure: no Streamlit. Each row's figures are the ones that technique's page shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from partitioner import Device, Graph, Plan, cluster, format_bytes, format_seconds, pipeline
from partitioner.cluster.bands import seconds_band
from partitioner.cluster.run.compose import parse_layout
from partitioner.devices import DEFAULT_SPEEDS

ROOFLINE = "roofline"  # the partitioner's cost model: max(bytes / bandwidth, FLOPs / peak) per node
PLANNER = "cluster planner"  # partitioner.cluster on a roofline of the devices' figures, with its collectives
KERNELS = "measured kernels"  # a GPU type's kernel curves and launches, op by op: the same for every technique

__all__ = [
    "ROOFLINE",
    "PLANNER",
    "KERNELS",
    "pricing",
    "Technique",
    "fx_row",
    "pipeline_row",
    "cluster_rows",
    "table",
    "cluster_target",
    "assumptions",
]


@dataclass(frozen=True)
class Technique:
    """One technique's answer: how many of the devices it uses, the time of one forward pass of
    the example batch, the fullest device's memory against its capacity, or why it has none."""

    name: str
    page: str  # the page that opens it in full (a views/*.py path)
    devices_used: int | None = None
    time_s: float | None = None
    peak_memory_bytes: float | None = None
    capacity_bytes: int | None = None
    how: str = ""  # the shape of its answer in a few words (modes, stages, the layout)
    error: str | None = None
    priced_by: str = ""  # whose cost model the time is (the roofline, the cluster planner's)
    band_s: tuple[float, float] | None = None  # the cluster planner's low and high of time_s
    assumes: tuple[str, ...] = ()  # what the cluster planner's time assumes

    @property
    def fits(self) -> bool | None:
        if self.peak_memory_bytes is None or self.capacity_bytes is None:
            return None
        return self.peak_memory_bytes <= self.capacity_bytes


def assumptions(rows: Sequence[Technique]) -> str:
    """What the rows' times assume (the cluster planner's words), each once, in row order."""
    return "; ".join(dict.fromkeys(a for r in rows for a in r.assumes))


def pricing(devices: Sequence[Device]) -> str:
    """What prices the partitioner's times on ``devices``: a GPU type's kernel curves, else the
    roofline (a measured host's profile is a roofline of its own curves)."""
    profile = devices[0].profile if devices else None
    return KERNELS if profile is not None and profile.gpu is not None else ROOFLINE


def _capacity(devices: Sequence[Device]) -> int:
    return min(d.memory_bytes for d in devices)


def fx_row(plan: Plan | None, error: str | None, devices: Sequence[Device]) -> Technique:
    """The sidebar mode's plan (torch.fx's accelerator partitioner): its critical path."""
    name = "Partitions (torch.fx accelerator partitioner)"
    if plan is None:
        return Technique(name, "views/explore.py", error=error or "no plan")
    held: dict[int, int] = {}
    for p in plan.partitions:
        for d in p.device_ids:
            held[d] = held.get(d, 0) + p.memory_bytes
    return Technique(
        name,
        "views/explore.py",
        len(held),
        plan.latency_s,
        max(held.values(), default=0),
        _capacity(devices),
        f"{plan.mode}: {len(plan.partitions)} partition"
        f"{'s' if len(plan.partitions) != 1 else ''}, critical path {len(plan.critical_path)} long",
        priced_by=pricing(devices),
    )


def pipeline_row(pp: "pipeline.PipelinePlan | None", error: str | None, devices: Sequence[Device]) -> Technique:
    """Contiguous stages, one a device, the batch cut into microbatches (the Pipeline page's plan)."""
    name = "Pipeline stages (torch.distributed.pipelining)"
    if pp is None:
        return Technique(name, "views/pipeline.py", error=error or "no plan")
    return Technique(
        name,
        "views/pipeline.py",
        len(set(pp.device_ids)),
        pp.step_time_s,
        max(pp.stage_memory_bytes, default=0),
        _capacity(devices),
        f"{len(pp.stages)} stages, {pp.microbatches} microbatches, {pp.schedule}, bubble {pp.bubble_fraction:.0%}",
        priced_by=pricing(devices),
    )


def cluster_target(devices: Sequence[Device], transfer_rate_bytes_per_s: float | None) -> cluster.Cluster:
    """The sidebar's devices as the cluster planner's accelerator: their preset when the planner
    knows it, else an accelerator with the first device's memory and speeds (the roofline's
    defaults where it gives none, as the partitioner takes them); one node holding them
    all, linked at the sidebar's transfer rate when one is given. No headroom: the devices' memory
    is already what the sidebar's headroom leaves."""
    first = devices[0]
    kind = first.kind if first.kind in cluster.ACCELERATORS else "h100-80gb"
    overrides: dict[str, Any] = {"memory_bytes": first.memory_bytes}
    if first.kind not in cluster.ACCELERATORS:  # the speeds the partitioner's roofline takes for it
        overrides.update(
            name=first.kind or "custom",
            peak_flops=first.peak_flops or DEFAULT_SPEEDS["peak_flops"],
            memory_bandwidth_bytes_per_s=first.memory_bandwidth_bytes_per_s
            or DEFAULT_SPEEDS["memory_bandwidth_bytes_per_s"],
        )
    engine = first.profile.engine if first.profile is not None and first.profile.gpu is not None else "eager"
    target = cluster.cluster(kind, len(devices), headroom_bytes=0, overrides=overrides, engine=engine)
    if transfer_rate_bytes_per_s:
        link = cluster.Link("sidebar transfer rate", float(transfer_rate_bytes_per_s), target.intra.latency_s)
        target = cluster.Cluster(target.accelerator, target.devices_per_node, link, target.inter, target.headroom_bytes)
    return target


def cluster_rows(
    graph: Graph, devices: Sequence[Device], transfer_rate_bytes_per_s: float | None, name: str = ""
) -> list[Technique]:
    """Tensor parallelism over every device, then the cluster planner's fastest layout on exactly
    these devices (pipeline x tensor x data parallel), for the example batch's forward pass
    (the planner's inference prefill: the time to the first token of a language model)."""
    n = len(devices)
    tp_name = "Tensor parallel (Megatron-LM splits)"
    best_name = "Best cluster layout (the cluster planner)"
    try:
        prof = cluster.profile(graph, name)
        work = cluster.Workload(
            "inference", max(1, prof.tokens0 // max(1, prof.seq0)), prof.seq0, prof.element_bytes, "none", 1e12, 0
        )
        target = cluster_target(devices, transfer_rate_bytes_per_s)
    except ValueError as exc:  # the planner refuses the graph or the devices (PartitionError): its words
        return [
            Technique(tp_name, "views/sharding.py", error=str(exc)),
            Technique(best_name, "views/cluster.py", error=str(exc)),
        ]
    capacity = target.accelerator.memory_bytes
    priced = KERNELS if target.accelerator.kernels is not None else PLANNER
    rows = []
    try:
        tp = cluster.evaluate(prof, work, target, parse_layout(f"tp{n}"), None)
        rows.append(
            Technique(
                tp_name,
                "views/sharding.py",
                n,
                tp.step_s,
                tp.memory_bytes,
                capacity,
                f"{tp.layout.label()}; limited by {tp.limit}",
                priced_by=priced,
                band_s=(tp.step_low_s, tp.step_high_s),
                assumes=tp.assumes,
            )
        )
    except ValueError as exc:
        rows.append(Technique(tp_name, "views/sharding.py", error=str(exc)))
    try:
        best = cluster.search(prof, work, target, [n]).by_devices.get(n)
    except ValueError as exc:
        rows.append(Technique(best_name, "views/cluster.py", error=str(exc)))
        return rows
    if best is None:
        rows.append(
            Technique(best_name, "views/cluster.py", error=f"no layout of {n} device{'s' if n != 1 else ''} fits")
        )
    else:
        rows.append(
            Technique(
                best_name,
                "views/cluster.py",
                best.devices,
                best.step_s,
                best.memory_bytes,
                capacity,
                f"{best.layout.label()}; limited by {best.limit}",
                priced_by=priced,
                band_s=(best.step_low_s, best.step_high_s),
                assumes=best.assumes,
            )
        )
    return rows


def table(rows: Sequence[Technique], device_count: int) -> pd.DataFrame:
    """The rows as a table in the units people read (the cluster planner's times as their band,
    low-high); the fastest that fits marked among the rows of one cost model (times of two cost
    models are not compared)."""
    fitting = [r for r in rows if r.fits and r.time_s is not None]
    fastest = {
        min((r for r in fitting if r.priced_by == by), key=lambda r: r.time_s or 0.0).name
        for by in {r.priced_by for r in fitting}
    }
    out = []
    for r in rows:
        if r.error:
            out.append(
                {
                    "technique": r.name,
                    "devices used": "-",
                    "forward pass": "-",
                    "priced by": "-",
                    "fullest device": "-",
                    "fits": "no answer",
                    "how": r.error,
                }
            )
            continue
        out.append(
            {
                "technique": r.name + ("  (fastest that fits)" if r.name in fastest else ""),
                "devices used": f"{r.devices_used} of {device_count}",
                "forward pass": format_seconds(r.time_s or 0.0) if r.band_s is None else seconds_band(*r.band_s),
                "priced by": r.priced_by,
                "fullest device": f"{format_bytes(r.peak_memory_bytes or 0)} of {format_bytes(r.capacity_bytes or 0)}",
                "fits": "yes" if r.fits else "no",
                "how": r.how,
            }
        )
    return pd.DataFrame(
        out, columns=["technique", "devices used", "forward pass", "priced by", "fullest device", "fits", "how"]
    )
