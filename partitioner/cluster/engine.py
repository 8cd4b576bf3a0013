"""What a training step costs in the engine that runs it, beyond its kernels, and the band every
time carries: the efficiency lost at scale, zero-bubble's weight-gradient stash, and the spreads
this project measured (host cost per op, kernels, collectives). Torch-free.

# NOTE: [Engine costs]
The kernels of a step are priced op by op from measured curves (:mod:`partitioner.kernels`); a
real job loses more, and an optimiser over a model picks where the model errs in its favour:
- **Scale.** Thousands of GPUs step together: the slowest rank sets every step (stragglers, clock
  and thermal spread, jitter in the data loader and the collectives' tails), and collectives over
  thousands of ranks run below their small-scale rates. Published strong scaling at a fixed batch
  puts the loss at about 2 % of the step for each doubling of the nodes: Megatron-LM's README
  (GPT-3 175B on H100s from 96 to 4,608 GPUs at 1,152 sequences a step: MFU from 47 % to 42 %,
  1.12x over 5.6 doublings), and Llama 3's Table 4 (405B from 8,192 to 16,384 H100s: 43 % to 41 %,
  part of it the smaller batch a rank). The step is multiplied by 1 + 0.02 log2(nodes), nodes
  past the first (:func:`scale_factor`); the band's fast end leaves it out.
- **Zero-bubble's split backward.** torch's zero-bubble classes run each backward as an input-
  gradient step (I) and a weight-gradient step (W) later; between them the weight products'
  inputs stay held (NOTE: [Weight-gradient stash]).
- **Interleaving's transfers.** A microbatch crosses every chunk boundary: v sends a rank a
  microbatch each way instead of one (priced in :func:`partitioner.cluster.layouts.evaluate`).
- **Overlap as the engines overlap.** Tensor-parallel collectives are exposed (eager PyTorch and
  Megatron-LM without its TP-communication overlap run them between the products); pipeline
  sends are exposed; the data-parallel reduction hides under the last microbatch's backward
  (DDP's and Megatron's buckets), only what exceeds it is added. FSDP (ZeRO-3) gathers each layer's
  weights in every microbatch's forward and backward and reduce-scatters its gradients (FSDP2 as
  torchtitan runs it): its collectives repeat each microbatch, hidden under that microbatch's
  compute where they fit, and each of the 3 a layer pays the ring's n - 1 steps of latency (10 ms
  at 2,048 ranks over InfiniBand: collectives across thousands of GPUs).

# NOTE: [Weight-gradient stash]
The weight gradient of a product needs the product's input: under a split backward a
microbatch's weight products' inputs outlive its input-gradient step until its W runs. The
simulator counts the first rank's microbatches between I and W at their peak
(:meth:`partitioner.pipeline.steps.StepSimulator.pending_weight`: half a microbatch of its share in
torch's interleaved zero-bubble order); each holds the weight-input share of a layer's saved
activations (:meth:`partitioner.cluster.saved.SavedActivations.weight_input_share`, 0.32 of a
Llama-3-8B layer: 2 (3h + f) of 2 (6h + 2k + 4f) bytes a token).

# NOTE: [Bands]
A time is a band, low to high, from the spreads this project measured, carried through the sums:
- the host's cost per op differs between machines of one GPU kind (6-17 us measured): eager
  PyTorch runs a stage as fast as the slower of its host (ops x the cost per op) and its GPU, so
  the slow end takes the host's 17 us where it is the bound (small models, small microbatches);
- GPU-bound kernels stay within a few per cent of their curves: -3 % to +5 %;
- collectives from their evidence: NCCL's measured bus bandwidth against its model, -10 % to +30 %
  (small messages and congested fabrics run slower, never much faster);
- the loss at scale (NOTE: [Engine costs]): none at the fast end, the published slope at the
  point, 1.5x it at the slow end.
Two answers whose bands overlap are not surely apart: the search and the pages say so.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from partitioner.cluster.hardware import Accelerator, Cluster
from partitioner.cluster.layout_types import Layout
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import stage_share
from partitioner.pipeline.schedules import get_schedule

__all__ = [
    "SCALE_LOSS_PER_DOUBLING",
    "HOST_PER_OP_RANGE_S",
    "KERNEL_SPREAD",
    "COLLECTIVE_SPREAD",
    "scale_factor",
    "host_per_op_range_s",
    "step_band",
    "training_assumes",
]

SCALE_LOSS_PER_DOUBLING = 0.02  # Megatron-LM's H100 strong scaling, 47 % -> 42 % over 5.6 doublings
HOST_PER_OP_RANGE_S = (6e-6, 17e-6)  # a bare op's host cost, measured across machines of one GPU kind
KERNEL_SPREAD = (0.97, 1.05)  # GPU-bound kernels against their curves
COLLECTIVE_SPREAD = (0.90, 1.30)  # collectives against NCCL's model


def host_per_op_range_s(gpu: Any) -> tuple[float, float]:
    """(fast, slow) seconds eager PyTorch's host spends on one op of a model on machines of ``gpu``'s
    kind: the bare op's measured spread (:data:`HOST_PER_OP_RANGE_S`) under the GPU's own launch
    spacing, plus the model's Python around it (:data:`partitioner.kernels.PYTHON_GLUE_S`). O(1)."""
    from partitioner.kernels import PYTHON_GLUE_S

    return tuple(max(gpu.launch_s, bare) + PYTHON_GLUE_S for bare in HOST_PER_OP_RANGE_S)  # type: ignore[return-value]


def scale_factor(devices: int, devices_per_node: int, slope: float = SCALE_LOSS_PER_DOUBLING) -> float:
    """The step's multiplier for the efficiency lost at scale (NOTE: [Engine costs]):
    1 + slope x log2(nodes), 1 within a node. O(1)."""
    nodes = devices / max(1, devices_per_node)
    return 1.0 + slope * math.log2(nodes) if nodes > 1 else 1.0


def _host_ops(p: ModelProfile) -> float:
    """Ops eager PyTorch launches for one forward of the whole traced model (each kernel op's
    launches; views launch none). Cached on the profile."""
    key = ("host ops",)
    if key not in p._cache:
        p._cache[key] = float(sum(op.launches for op in p.node_ops if op.kind != "view"))
    return p._cache[key]


def step_band(
    p: ModelProfile,
    c: Cluster,
    lay: Layout,
    slots: float,
    compute: tuple[float, float, float],
    comm: tuple[float, float],
    step: float,
) -> tuple[float, float]:
    """(low, high) of ``step`` (NOTE: [Bands]). Eager PyTorch runs a stage as fast as the slower of
    its host (ops x the host's cost per op) and its GPU: at the host's fast end (6 us an op) the
    compute is the GPU's, -3 %; at its slow end (17 us) the larger of the GPU's +5 % and the host's.
    The collectives by their evidence, the loss at scale from none to 1.5x its slope. O(1)."""
    fwd, bwd, redo = compute
    per_slot_comm, exposed = comm
    gpu = getattr(c.accelerator, "kernels", None)
    eager = gpu is not None and getattr(c.accelerator, "engine", "eager") == "eager"
    # a forward, the backward's two passes (about twice the ops), the recomputed share again
    ops = _host_ops(p) * stage_share(p, lay) * (3 + redo) if eager else 0.0
    work = fwd + bwd
    low_work = work * KERNEL_SPREAD[0]
    high_work = max(work * KERNEL_SPREAD[1], ops * host_per_op_range_s(gpu)[1]) if eager else work * KERNEL_SPREAD[1]
    ends = []
    for w_s, collective, slope in (
        (low_work, COLLECTIVE_SPREAD[0], 0.0),
        (high_work, COLLECTIVE_SPREAD[1], 1.5 * SCALE_LOSS_PER_DOUBLING),
    ):
        ends.append(
            (slots * (w_s + per_slot_comm * collective) + max(0.0, exposed) * collective)
            * scale_factor(lay.devices, c.devices_per_node, slope)
        )
    return min(ends[0], step), max(ends[1], step)


def training_assumes(acc: Accelerator, lay: Layout) -> tuple[str, ...]:
    """What a training step's time assumes, in words (NOTE: [Engine costs])."""
    split = lay.pp > 1 and get_schedule(lay.schedule).step_form.name == "BOUND"
    return _assumes(acc.assumes, split)


@functools.lru_cache(maxsize=64)
def _assumes(engine: str, split_backward: bool) -> tuple[str, ...]:
    out = [
        engine,
        "tensor-parallel collectives and pipeline sends exposed; the gradient reduction hidden under "
        "the last microbatch's backward",
        f"{SCALE_LOSS_PER_DOUBLING:.0%} of the step lost a doubling of the nodes (stragglers, collectives at "
        "scale: Megatron-LM's H100 strong scaling)",
        "MFU: the model's FLOPs (the traced forward's, 3x for a training step; attention's whole s x s "
        "products, as torchtitan counts them; mfu_causal halves a causal model's attention, as the "
        "kernel's work) over the devices' dense BF16 peak; recomputation not counted",
    ]
    if split_backward:
        out.append("zero-bubble: torch's split backward, the weight products' inputs held until their W step")
    return tuple(out)
