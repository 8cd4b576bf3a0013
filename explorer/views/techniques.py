"""Techniques side by side: the sidebar's model on the sidebar's devices, partitioned by torch.fx's
accelerator partitioner, split into pipeline stages, split tensor-parallel, and laid out by the
cluster planner; one table, each row opening the page that shows it in full."""

from __future__ import annotations

import streamlit as st

from explorer import compute, loading
from explorer.builders import pipeline_tables, techniques
from explorer.builders.text import md


@st.cache_data(max_entries=16, show_spinner=False)
def _cluster_rows(_graph, _devices: list, fingerprint: str, devices_key: tuple, rate: float | None, name: str) -> list:
    del fingerprint, devices_key  # the cache key: the graph and devices themselves are not hashed
    return techniques.cluster_rows(_graph, _devices, rate, name)


def _why_count(devices: int, sequences: int | None) -> str:
    """Why the pipeline row's microbatch count is what it is, in a few words."""
    if sequences is not None and sequences < devices:
        noun = "sequence" if sequences == 1 else "sequences"
        return f"as many as devices, but no more than the example batch's {sequences:,} {noun}"
    return "as many as devices"


def main() -> None:
    inputs = loading.page_inputs()
    if inputs is None:
        return
    config, graph = inputs
    devices = config.device_list()
    st.markdown(
        f"#### Techniques side by side: {md(config.model.label)} on {len(devices)} "
        f"{md(devices[0].kind or 'custom')} device{'s' if len(devices) != 1 else ''}"
    )
    st.caption(
        "The same model, the same devices (the sidebar's, after its headroom), the same forward pass of "
        "the model's example batch, answered four ways. Each row's figures are the ones its page shows."
    )
    with st.spinner("Planning each technique..."):
        result = compute.plan(config)
        n = len(devices)
        # no more microbatches than the example batch has sequences: a quarter of a one-sequence batch
        # is a cut no schedule makes, and priced as one it made pipelining look 4.8x slower (issue 56)
        sequences = pipeline_tables.example_sequences(graph)
        microbatches = max(1, min(n, sequences or n))
        pp = compute.pipeline_plan(config, n, n, microbatches, "gpipe", None)
        rows = [
            techniques.fx_row(result.plan, result.error, devices),
            techniques.pipeline_row(pp.plan, pp.error, devices),
            *_cluster_rows(
                graph,
                devices,
                graph.fingerprint(),
                tuple(map(str, devices)),
                config.transfer_rate_bytes_per_s,
                config.model.label,
            ),
        ]
    # A static table: its texts wrap, so every column reads whole at 1,280 px (a data frame cut
    # them and scrolled the last two out of view; issue 56).
    st.table(techniques.table(rows, n), hide_index=True)
    st.caption(
        "Forward pass: one forward pass of the example batch. Priced by: whose cost model the time is; "
        "compare times within one (measured kernels: a GPU type's curves and launches for every row; the "
        "roofline is a lower bound). Fullest device: its memory of its capacity."
    )
    assumed = techniques.assumptions(rows)
    if assumed:
        st.caption(md(f"The cluster planner's times are bands (low-high) and assume: {assumed}."))
    cols = st.columns(len(rows))
    for col, row in zip(cols, rows):
        col.page_link(row.page, label=f"Open: {row.name.split(' (')[0]}")
    st.caption(
        md(
            f"Partitions: the sidebar's mode, {config.mode} (its plan's critical path). Pipeline: {n} contiguous stages, "
            f"one a device, GPipe over {microbatches} microbatch{'' if microbatches == 1 else 'es'} "
            f"({_why_count(n, sequences)}). Tensor parallel and the best layout: the cluster "
            "planner's inference prefill (a language model's time to the first token) on these devices as one node, "
            "at the sidebar's transfer rate; its layouts add data parallelism and pipelines to tensor parallelism. "
            "On a GPU type every row is priced by the same measured kernels (the card's curves and launches, op by "
            "op, under the sidebar's engine) and the times compare; on devices of one's own the first two are priced "
            "by the roofline of their figures and the last two by the cluster planner: compare times within one, as "
            "the fastest mark does. "
            "The Plan a cluster page asks the buyer's question: how many of which accelerator."
        )
    )


main()
