"""Plan a cluster: which accelerator, how many, laid out how (pipeline x tensor x data parallel,
ZeRO, recomputation), how fast and at what cost, from the traced graph of any model.

    from partitioner import cluster
    prof = cluster.profile(graph)
    found = cluster.search(prof, cluster.Workload(global_batch=512, seq_len=4096),
                           cluster.cluster("h100-80gb"), cluster.device_counts(8, max_nodes=64))
    found.fewest_devices.layout.label()

Built from the other packages' own numbers: the roofline of :mod:`partitioner.cost`, the
optimizer table of :mod:`partitioner.cost.training`, the schedules' simulator of
:mod:`partitioner.pipeline`. Torch-free.
"""

from __future__ import annotations

from partitioner.cluster.hardware import (
    ACCELERATORS,
    LINKS,
    Accelerator,
    Cluster,
    Link,
    cluster,
    from_profile,
    local_cluster,
)
from partitioner.cluster.knee import price_speed_front, serving_knee
from partitioner.cluster.layout_search import ClusterPlan, SearchProgress, device_counts, pareto, search
from partitioner.cluster.layouts import (
    Collective,
    Layout,
    LayoutResult,
    Workload,
    collectives,
    evaluate,
    ring_allreduce_s,
)
from partitioner.cluster.model_profile import ModelProfile, with_min_cut
from partitioner.cluster.saved import PlannerProfile, SavedActivations, profile, saved_activations

__all__ = [
    "ACCELERATORS",
    "LINKS",
    "Accelerator",
    "Link",
    "Cluster",
    "cluster",
    "from_profile",
    "local_cluster",
    "Workload",
    "Layout",
    "LayoutResult",
    "Collective",
    "collectives",
    "evaluate",
    "ring_allreduce_s",
    "ModelProfile",
    "PlannerProfile",
    "SavedActivations",
    "saved_activations",
    "profile",
    "ClusterPlan",
    "SearchProgress",
    "device_counts",
    "pareto",
    "search",
    "with_min_cut",
    "serving_knee",
    "price_speed_front",
]
