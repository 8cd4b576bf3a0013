"""What each partition mode does, and why a given plan looks the way it does, in words.

Plain text (Markdown) for the Learn page and the notes under the Explore page's DAG; the
explanations follow the library's modes (``partitioner/modes/``) and the reference partitioner
they adapt (``torch.fx.experimental.accelerator_partitioner``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from explorer.builders.text import md
from partitioner import Device, Graph, Plan, format_bytes
from partitioner.devices import fewest_devices
from partitioner.units import format_seconds

__all__ = [
    "ModeText",
    "MODE_TEXT",
    "COST_MODEL",
    "explain_plan",
]


@dataclass(frozen=True)
class ModeText:
    title: str
    idea: str  # what the algorithm does
    shape: str  # what its plans look like, and why
    use: str  # when to pick it


MODE_TEXT: dict[str, ModeText] = {
    "size_based": ModeText(
        "Size-based: torch's fill, devices in list order",
        "Torch's own size_based, node for node: walk the nodes in topological order and put each "
        "into the current partition while its device has room; when the next node does not fit, "
        "open a new partition on the first unused device (in list order) that holds it. Once "
        "every device has a partition, each remaining node becomes a partition of its own, placed "
        "on the device with the least room that still holds it. It looks only at memory, never "
        "at latency. O(N + E).",
        "Few partitions, each as full as its device allows, in a chain: partition k feeds "
        "partition k + 1. When devices run out, a tail of one-node partitions shares the devices "
        "(torch's device-mapping test: devices of 120 B and 160 B give three partitions on "
        "devices 0, 1, 0).",
        "To see the plan torch's partitioner makes, and how many devices the model needs at all.",
    ),
    "largest_first": ModeText(
        "Largest first: fill the largest device first",
        "The same walk as size-based, but each new partition opens on the largest unused device, "
        "and once devices run out the remaining nodes join the device where they cost the least "
        "room. When fragmentation leaves a node nowhere to go it tries a best-fit packing, a "
        "packing by size and, on small graphs, an exhaustive search. O(N + E).",
        "Fewer partitions than size-based when devices differ in size (two where torch's fill "
        "makes three on its own device-mapping test); the last partition is often small.",
        "When size-based runs out of devices, and as the start the latency-aware modes improve on.",
    ),
    "sparse_nn": ModeText(
        "Sparse NN: spread embedding tables, replicate the dense part",
        "For recommendation models (DLRM): embedding tables are large but each lookup is cheap, "
        "while the dense MLPs are small but run on every device. The embedding nodes are packed "
        "largest first onto the device with the most room left; every stretch of dense nodes "
        "becomes a partition replicated on every device large enough to hold it.",
        "One embedding partition per device side by side at one BFS level, fed by and feeding "
        "dense partitions drawn with a colour bar (one cell per device they are replicated on). A model "
        "without embedding tables fails with a message saying so.",
        "Models whose memory is mostly embedding tables (try the dlrm sample).",
    ),
    "cost_aware": ModeText(
        "Cost-aware: merge partitions while latency does not grow",
        "Start from coarse plans: the largest-first fill, a best-fit packing, the best cut of "
        "the nodes in time order (along the critical path) into one run per device, and, where "
        "the budget allows, fills of the nodes in time order. Move boundary nodes between "
        "partitions and devices where that shortens the critical path. On graphs small enough "
        "for the budget, also start fine-grained (one node per partition), move nodes, then "
        "merge neighbouring partitions on the same devices whenever the critical-path latency "
        "does not grow (chains merge for free). The lowest latency wins, and among latencies "
        "within 1 % the plan with fewer partitions.",
        "As few partitions as the latency allows. Extra small partitions remain only where "
        "joining them would lengthen the critical path, for example where parallel branches "
        "(attention heads, experts) run on different devices at once, or where a partition must "
        "wait for data from another device while its neighbour need not.",
        "When latency matters and the graph has parallel branches (moe, unet, dlrm).",
    ),
    "kl_based": ModeText(
        "Kernighan-Lin: move and swap nodes between partitions",
        "Kernighan and Lin's graph bisection heuristic, scored with the exact cost model: a "
        "descent moves or swaps boundary nodes (and re-places whole partitions on other devices) "
        "whenever that lowers the critical-path latency and the devices still have room; then a "
        "pass takes the best move even when it costs latency, locks the node, repeats a few "
        "times and rolls back to the best plan seen, which lets it leave a plateau. It refines "
        "the cost-aware plan and keeps it where it finds nothing better.",
        "Usually few partitions with their borders shifted so less data crosses between devices "
        "or the slowest partition gets lighter; never slower than the cost-aware plan (beyond "
        "the 1 % within which fewer partitions win).",
        "To improve a plan by local changes, and to see how far local search gets.",
    ),
    "optimal": ModeText(
        "Optimal: an exact solver with a time limit",
        "The heuristics run first; the best of them warm-starts CP-SAT (OR-Tools), which "
        "searches plans of a few partitions per device (every plan on tiny graphs) for the "
        "lowest latency under the chosen cost model, in a worker process with a time limit. A "
        "second model drops partitions altogether (each node on any devices, a transfer on "
        "every input from elsewhere, memory exact) and proves a lower bound no plan can beat. "
        "Graphs of more than 200 ops are coarsened first: chains contracted, then runs of "
        "consecutive nodes grouped. On graphs of up to 14 ops (physical cost model) a branch "
        "and bound runs first: it builds plans a partition at a time, in the order they run, "
        "drops every branch the bound shows cannot win, and so proves the optimum.",
        "The fastest plan the solver found in its time, never slower than the heuristics; "
        '"optimal" when its latency meets the proven bound (within 0.01 %).',
        "To know how good a heuristic's plan is, and for final plans of models up to a few "
        "hundred ops where seconds of solving are worth it.",
    ),
    "aot_based": ModeText(
        "Ahead of time: a mapping you give",
        "Use a node-to-partition and partition-to-devices mapping given ahead of time, for "
        "example a plan saved earlier and edited by hand; the library only scores it.",
        "Exactly the mapping given. The Review & edit page uses it: upload a plan or move a "
        "node, and the plan is re-scored and checked at once.",
        "Reviewing or hand-tuning a plan before deployment.",
    ),
}

COST_MODEL = (
    "**The cost model** (physical, the default): a node costs the larger of its memory "
    "time (bytes moved / memory bandwidth) and its compute time (FLOPs / peak FLOP/s); a "
    "partition costs the longest path through its nodes; a device runs one partition at a "
    "time, so the plan's latency is when the last partition finishes, each starting once its "
    "inputs have arrived (an edge adds bytes crossing / transfer rate unless every device of "
    "its destination already holds its source) and its device is free. Memory of a partition "
    "is every node's output and parameters plus the outputs of outside nodes it reads; a device "
    "holds the union of its partitions, so a tensor two of them read is stored there once. "
    "When the whole model fits on one device the plan is a single partition, unless *force "
    "partitioning* is on; *saturate host* then copies the plan onto idle devices. Every plan "
    "is measured against a **lower bound**, the heaviest path of nodes, which no plan can beat: "
    '"within 5 % of the best possible" means at most 5 % slower than any plan could be. The '
    "*optimal* mode proves a stronger bound (memory forces nodes apart, and data that crosses "
    "devices takes time); Compare measures every mode by the strongest bound any of them proved. "
    "A gap is an upper limit on what a better plan could gain: 12 % means no plan, found by "
    "anyone, can be more than 12 % faster; 0 % means the plan is optimal."
)

TWO_COST_MODELS = (
    "**Two cost models.** torch's partitioner (`partitioner_utils`) counts differently; switch "
    "the sidebar to *numbers as torch's partitioner computes them* to see its figures.\n\n"
    "- **A tensor read twice.** `y = x @ W` on one device, then `a = relu(y)` and `b = tanh(y)` "
    "in a partition on another: torch adds `y`'s bytes once for `a` and once for `b` (each node "
    "counts its outside inputs), so the partition needs two copies by its count; the physical "
    "model stores `y` once. Plans that fit physically can be refused by torch's count.\n"
    "- **Two partitions on one device.** P1 and P2 both on GPU 0, each 1 ms, neither reading "
    "the other: torch's critical path lets them overlap (1 ms); a device runs one at a time, "
    "so the physical latency is 2 ms. torch's model rewards many tiny partitions this way.\n"
    "- Also: torch charges, on an edge, inputs both partitions read from the model (as if the "
    "parent sent them), and frees a transfer only between identical device lists."
)


def devices_needed(graph: Graph, devices: Sequence[Device]) -> tuple[str, str]:
    """(a headline, its explanation): how many of ``devices`` the model needs at least, by memory
    alone (:func:`partitioner.devices.fewest_devices` of its size)."""
    need = graph.total_size_bytes
    fewest = fewest_devices(need, devices)
    if fewest is None:
        return (
            "needs more than these",
            f"The model needs {format_bytes(need)}; all {len(devices)} devices together "
            f"hold {format_bytes(sum(d.memory_bytes for d in devices))}.",
        )
    return (
        f"needs at least {fewest}",
        f"A lower bound by memory alone: the model needs {format_bytes(need)} (weights and activations, "
        f"each stored once), and the {'largest device holds' if fewest == 1 else f'{fewest} largest devices hold'} "
        "that much. A plan may need more: a partition also holds the inputs it reads from other partitions.",
    )


def explain_plan(plan: Plan) -> list[str]:
    """Sentences (Markdown) on why ``plan`` looks the way it does."""
    notes: list[str] = []
    count = len(plan.partitions)
    if plan.provenance.single_partition:
        device = (
            plan.device(plan.partitions[0].device_ids[0]) if plan.partitions and plan.partitions[0].device_ids else None
        )
        where = f" ({md(device.name)}, {format_bytes(device.memory_bytes)})" if device else ""
        notes.append(
            "**One partition:** the whole model fits on the largest device"
            f"{where}, so no mode runs: splitting would only add transfers. Turn on *force "
            "partitioning* to see the mode's algorithm anyway, or make the devices smaller."
        )
    elif plan.mode in MODE_TEXT:
        notes.append(f"**{MODE_TEXT[plan.mode].title}.** {MODE_TEXT[plan.mode].shape}")
    cap = plan.provenance.forced_cap_bytes
    if cap is not None:
        notes.append(
            f"**Forced partitioning:** the whole model fits one device, so to show the mode at "
            f"work it ran with every device limited to {format_bytes(cap)} (about half the model "
            f"or more), which makes it spread the model over {len(plan.device_usage)} devices. "
            "Without the limit it would keep one partition: transfers only add latency."
        )
    if plan.provenance.solver:
        notes.append(f"**The solver:** {md(plan.provenance.solver)}. So the plan is {plan.bound_summary()}.")
    if plan.provenance.edited:
        notes.append("**Edited by hand:** this plan was scored as given (no algorithm ran).")
    replicated = [p.id for p in plan.partitions if len(p.device_ids) > 1]
    if replicated:
        why = (
            "saturate host copied the plan onto idle devices"
            if plan.options.saturate_host
            else ("the dense part is replicated on every device" if plan.mode == "sparse_nn" else "they were placed so")
        )
        notes.append(
            f"**Replicated:** partition(s) {_ids(replicated)} run on several devices ({why}); "
            "they are drawn with a colour bar, one cell per device."
        )
    used = plan.device_memory_bytes()
    idle = [md(d.name) for d in plan.devices if not used.get(d.logical_id)]
    if idle and count:
        notes.append(
            f"**Idle device{'s' if len(idle) != 1 else ''}:** {', '.join(idle)} "
            f"{'hold' if len(idle) != 1 else 'holds'} nothing. Saturate host copies the plan "
            "onto idle devices when there is a free one for every device in use."
        )
    over = set(plan.over_capacity())
    if over:
        names = [md(d.name) for d in plan.devices if d.logical_id in over]
        notes.append(f"**Over capacity:** {', '.join(names)} hold more than their memory (orange outline).")
    if plan.transfer_rate_bytes_per_s is None and count > 1:
        notes.append(
            "**Transfers are free:** no transfer rate was given and the devices give no link "
            "bandwidth, so cutting the graph costs nothing. Set a transfer rate to see "
            "communication in the latency."
        )
    if plan.critical_path and count > 1:
        notes.append(
            f"**Critical path:** partitions {' -> '.join(map(str, plan.critical_path))} "
            f"(bold red in the DAG) take {format_seconds(plan.latency_s)} end to end; "
            "shortening any other partition does not lower the latency."
        )
    return notes


def _ids(ids: list[int]) -> str:
    shown = ", ".join(map(str, ids[:12]))
    return shown + (f" and {len(ids) - 12} more" if len(ids) > 12 else "")
