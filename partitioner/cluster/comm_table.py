"""The collectives table of a layout: one row a kind of communication, as
:func:`partitioner.cluster.layouts.evaluate` (training) and :func:`partitioner.cluster.serving.serve`
(inference) price it (NOTE: [All-reduce algorithms] in :mod:`partitioner.cluster.layouts`).
Torch-free."""

from __future__ import annotations

import dataclasses

from partitioner.cluster.comms import (
    Collective,
    _context_row,
    _data_parallel_rows,
    _expert_row,
    _link_spanning,
    _Microbatches,
    _pipeline_row,
    _serving_tp_allreduce,
    _tensor_parallel_row,
)
from partitioner.cluster.hardware import Cluster, serving_chunk_tokens
from partitioner.cluster.layout_types import Layout, Workload
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.rules import check_layout
from partitioner.cluster.serving import ACTIVATION_BYTES, prefill_chunks

__all__ = ["collectives"]


def collectives(p: ModelProfile, w: Workload, c: Cluster, lay: Layout) -> list[Collective]:
    """The communication :func:`evaluate` prices, one row a kind (NOTE: [Layout costs]): per step
    for training, in the tensor-parallel, pipeline, context, expert and data-parallel groups; for
    inference the prompt's prefill and each generated token. Rows sum to ``evaluate``'s parts (a
    test holds them equal); the counts are Megatron-LM's (Shoeybi et al. 2019, sec. 3: two
    all-reduces per layer in the forward and two in the backward), GShard's and the ZeRO paper's
    (sec. 7: ZeRO-3 moves 1.5 times data parallelism's bytes); each all-reduce names the algorithm
    that prices it (NOTE: [All-reduce algorithms])."""
    check_layout(p, lay)
    scale = w.element_bytes / p.element_bytes  # the profile's bytes at the workload's precision
    if w.kind == "inference":
        return _inference_rows(p, w, c, lay, scale)
    scale = max(2, w.element_bytes) / p.element_bytes  # activations stay bf16 under FP8 training
    mb = _Microbatches.of(p, w, lay, scale)
    rows = [
        _tensor_parallel_row(p, c, lay, mb),
        _pipeline_row(c, lay, mb),
        _context_row(p, c, lay, mb, scale),
        _expert_row(p, c, lay, mb),
    ]
    data = _data_parallel_rows(p, w, c, lay)
    if lay.zero == 3 and lay.dp * lay.cp > 1:  # FSDP gathers and reduces every microbatch
        data = [
            dataclasses.replace(
                r, count=r.count * mb.count, phase="each microbatch", overlap="its forward and backward"
            )
            for r in data
        ]
    return [row for row in rows if row is not None] + data


def _inference_rows(p: ModelProfile, w: Workload, c: Cluster, lay: Layout, scale: float) -> list[Collective]:
    """Inference's rows, as :func:`partitioner.cluster.serving.serve` prices them: the prompt's
    prefill moves every prompt token's hidden state in chunked passes (NOTE: [Chunked prefill] in
    :mod:`partitioner.cluster.serving`), each generated token one a sequence; tensor parallelism
    all-reduces it twice a layer at the serving all-reduce's price (NOTE: [Serving all-reduce]) and
    each pipeline stage but the last sends it on. The hidden state stays bf16 in FP8 serving."""
    hidden_scale = max(w.element_bytes, ACTIVATION_BYTES) / p.element_bytes
    batch = w.global_batch / lay.dp
    pipe_link = _link_spanning(c, lay.tp * lay.pp)
    passes = prefill_chunks(batch * w.seq_len, serving_chunk_tokens(c.accelerator))
    rows: list[Collective] = []
    for phase, tokens, count in (*(("prefill", t, n) for t, n in passes), ("each token", batch, 1)):
        hidden = p.hidden_bytes_per_token * hidden_scale * tokens
        if lay.tp > 1:
            seconds, algorithm = _serving_tp_allreduce(c, hidden, lay.tp)
            rows.append(
                Collective(
                    name=f"all-reduce of the hidden state ({algorithm})",
                    group="tp",
                    ranks=lay.tp,
                    link=c.intra.name,
                    count=2 * p.layers * count,
                    bytes_each=hidden,
                    seconds_each=seconds,
                    phase=phase,
                )
            )
        if lay.pp > 1:
            rows.append(
                Collective(
                    name="send of the hidden state to the next stage",
                    group="pp",
                    ranks=2,
                    link=pipe_link.name,
                    count=(lay.pp - 1) * count,
                    bytes_each=hidden,
                    seconds_each=hidden / pipe_link.bandwidth_bytes_per_s + pipe_link.latency_s,
                    phase=phase,
                )
            )
    return rows
