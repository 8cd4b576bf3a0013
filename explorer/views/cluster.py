"""Plan a cluster: which accelerator, how many, laid out how (pipeline x tensor x data parallel,
ZeRO, recomputation), how fast and at what cost, for the sidebar's model
(:mod:`partitioner.cluster`); each answer exports as torchtitan, Megatron-LM or DeepSpeed config."""

from __future__ import annotations

import json

import streamlit as st

from explorer import state
from explorer.builders import cluster_figures
from explorer.builders.text import md
from partitioner import Graph, cluster, format_bytes, format_seconds
from partitioner.interop.engines import ENGINES, toml_text

GiB = 2**30


@st.cache_data(max_entries=16, show_spinner="Searching the layouts...")
def _search(_graph: Graph, fingerprint: str, name: str, work: cluster.Workload, accelerator: str,
            per_node: int, max_nodes: int, intra: str, inter: str, headroom_gib: float,
            price: float) -> cluster.ClusterPlan:
    del fingerprint  # the cache key: the graph itself is not hashed
    target = cluster.cluster(accelerator, per_node, intra, inter, int(headroom_gib * GiB), price)
    return cluster.search(cluster.profile(_graph, name), work, target, cluster.device_counts(per_node, max_nodes))


def _inputs() -> tuple[cluster.Workload, dict]:
    cols = st.columns(4)
    kind = cols[0].selectbox("Work", ["training", "inference"], key="cl_kind")
    batch = int(cols[1].number_input("Global batch (sequences)", 1, 1 << 20, 512, key="cl_batch"))
    seq = int(cols[2].number_input("Sequence length (tokens)" if kind == "training" else "Prompt length (tokens)",
                                   1, 1 << 20, 4096, key="cl_seq"))
    precision = cols[3].selectbox("Precision", ["bf16 (mixed)", "fp32"], key="cl_precision")
    cols = st.columns(4)
    optimizer = cols[0].selectbox("Optimizer", ["adam", "sgd", "none"], key="cl_optimizer")
    train_tokens = float(cols[1].number_input("Tokens to train (for time and cost)", 1e6, 1e15, 1e12,
                                              format="%.3g", key="cl_tokens"))
    generate = int(cols[2].number_input("Tokens generated (inference)", 0, 1 << 16, 256, key="cl_generate"))
    accelerator = cols[3].selectbox("Accelerator", list(cluster.ACCELERATORS), index=2, key="cl_accelerator")
    preset = cluster.ACCELERATORS[accelerator]
    cols = st.columns(5)
    per_node = int(cols[0].number_input("Devices per node", 1, 64, 8, key="cl_per_node"))
    max_nodes = int(cols[1].number_input("Up to nodes", 1, 512, 64, key="cl_max_nodes"))
    links = list(cluster.LINKS)
    intra = cols[2].selectbox("Link inside a node", links, index=links.index("nvlink4"), key="cl_intra")
    inter = cols[3].selectbox("Link between nodes", links, index=links.index("infiniband-ndr"), key="cl_inter")
    price = float(cols[4].number_input("$ per device-hour", 0.0, 1000.0, float(preset.price_per_hour),
                                       key=f"cl_price_{accelerator}"))
    headroom = float(st.number_input("Memory headroom per device (GiB: CUDA context, fragmentation)",
                                     0.0, 64.0, 4.0, key="cl_headroom"))
    work = cluster.Workload(kind, batch, seq, 2 if precision.startswith("bf16") else 4, optimizer, train_tokens,
                            generate)
    return work, dict(accelerator=accelerator, per_node=per_node, max_nodes=max_nodes, intra=intra, inter=inter,
                      headroom_gib=headroom, price=price)


def _answer(title: str, r: cluster.LayoutResult | None, work: cluster.Workload, column: st.delta_generator.DeltaGenerator) -> None:
    if r is None:
        return
    step = "time to first token" if work.kind == "inference" else "step"
    column.metric(title, f"{r.devices} device{'s' if r.devices != 1 else ''}")
    column.caption(md(f"{format_seconds(r.step_s)} a {step}; {r.layout.label()}; "
                      f"${r.cost_per_million_tokens:.3g} per million tokens; "
                      f"MFU {r.mfu:.1%}; limited by {r.limit}"))
    if work.kind == "training" and r.tokens_per_s:
        days = work.train_tokens / r.tokens_per_s / 86400
        column.caption(f"{work.train_tokens:.3g} tokens: {days:,.1f} days, "
                       f"${r.cost_per_million_tokens * work.train_tokens / 1e6:,.0f}")


def main() -> None:
    loaded = state.page_inputs()
    if loaded is None:
        return
    config, graph = loaded
    st.markdown(f"#### Plan a cluster for {md(config.model.label)}")
    work, hw = _inputs()
    try:
        found = _search(graph, graph.fingerprint(), config.model.label, work, **hw)
    except Exception as exc:  # a setting the planner refuses: its message names it
        st.error(f"Cannot plan this cluster: {md(exc)}")
        return
    prof = cluster.profile(graph, config.model.label)
    count = prof.param_count
    size = f"{count / 1e9:.3g} B" if count >= 1e8 else f"{count / 1e6:.3g} M" if count >= 1e5 else f"{count}"
    st.caption(f"{size} parameters ({format_bytes(prof.weight_bytes)} as traced), "
               f"{prof.layers} layers; searched {found.evaluated:,} layouts in {found.search_s:.2f} s, "
               f"{len(found.fitting):,} fit.")
    if not found.fitting:
        st.warning("No layout fits: allow more nodes, a larger accelerator, a smaller batch, or less headroom.")
        return
    cols = st.columns(3)
    for col, (title, r) in zip(cols, (("Fewest devices", found.fewest_devices), ("Fastest", found.fastest),
                                      ("Cheapest", found.cheapest))):
        _answer(title, r, work, col)
    step_label = "time to first token" if work.kind == "inference" else "step time"
    st.plotly_chart(cluster_figures.pareto_figure(found, step_label), key="cl_pareto")
    best = found.best(20)
    table = cluster_figures.layouts_table(best, work.train_tokens if work.kind == "training" else None)
    st.dataframe(table, hide_index=True, column_config={
        "step_s": st.column_config.NumberColumn("step (s)", format="%.3g"),
        "mfu": st.column_config.NumberColumn("MFU", format="percent"),
        "memory_gib": st.column_config.NumberColumn("memory/device (GiB)", format="%.1f"),
        "usd_per_million_tokens": st.column_config.NumberColumn("$ / M tokens", format="%.3g")})
    labels = [f"{r.devices} devices: {r.layout.label()}" for r in best]
    chosen = best[labels.index(st.selectbox("Open a layout", labels, key="cl_open"))]
    left, right = st.columns(2)
    left.plotly_chart(cluster_figures.memory_figure(chosen, cluster.ACCELERATORS[hw["accelerator"]].memory_bytes),
                      key="cl_memory")
    right.plotly_chart(cluster_figures.time_figure(chosen), key="cl_time")
    cols = st.columns(3)
    for col, engine in zip(cols, ENGINES):
        config_data = ENGINES[engine](chosen.layout, work)
        text = toml_text(config_data) if engine == "torchtitan" else json.dumps(config_data, indent=2)
        col.download_button(f"{engine} config", text, file_name=f"{engine}.{'toml' if engine == 'torchtitan' else 'json'}",
                            key=f"cl_dl_{engine}")
    st.caption("How the figures are made: model states by the ZeRO paper's formulas, activations from the traced "
               "graph divided by tensor parallelism and times the microbatches in flight (the Pipeline page's "
               "simulator), time from the graph's roofline, ring collectives on each link and the simulated "
               "schedule. Left out: the optimizer step, kernel launch overheads, context and expert parallelism.")


main()
