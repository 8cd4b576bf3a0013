"""The Plan a cluster page's input panels: the workload (training or serving, batch, precision,
optimizer), the hardware (accelerator, nodes, links, price, headroom, engine) and the min-cut
budgets measured for the model. The precisions and optimizers are the library's own tables. Every
field is held in the URL by Streamlit's binding (NOTE: [Bound keys] in ``explorer.builders.links``):
its default is the widget's own (``value=``, ``index=``), which the binding keeps out of the URL."""

from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from explorer import panels
from explorer.builders.text import md, number
from explorer.fields import BOUND, bounded_number, range_notes
from partitioner import Graph, cluster, format_bytes, units
from partitioner.cluster.hardware import HOST_MEMORY_BYTES
from partitioner.cost.training import OPTIMIZERS
from partitioner.units import GiB

__all__ = [
    "show_page_notes",
    "tokens_in_words",
    "workload_ui",
    "hardware_cluster",
    "precision_for",
    "hardware_ui",
    "min_cut_ui",
    "MIN_CUT",
    "MIN_CUT_BUDGETS",
    "PRECISIONS",
]

_PAGE_NOTES = "cl_range_notes"  # this run's notes of the page's own fields (show_page_notes)
_PRECISION_MODEL = "cl_precision_model"  # the model the precision field was last drawn for
MIN_CUT = "cl_min_cut"  # session state: graph fingerprint -> measured min-cut shares
MIN_CUT_BUDGETS = (0.0, 0.25, 0.5, 0.75)
PRECISIONS = {d.label: d for d in units.PRECISIONS}  # "bf16 (mixed)", "fp32"


def min_cut_ui(graph: Graph, prof: cluster.ModelProfile) -> tuple[tuple[float, float, float], ...]:
    """The min-cut shares measured for this graph (after the button), else none."""
    from partitioner import PartitionError, remat

    measured = st.session_state.setdefault(MIN_CUT, {})
    key = graph.fingerprint()
    with st.expander("Recomputation by functorch's min-cut", expanded=key in measured):
        st.caption(
            "Besides none and full, the search can recompute what torch.compile's min-cut chooses at an "
            "activation memory budget (torchtitan's memory_budget mode). Measuring runs the model's joint "
            "forward and backward trace and min-cut at budgets "
            f"{', '.join(f'{b:g}' for b in MIN_CUT_BUDGETS)} in a worker process (seconds for the samples, "
            "minutes for a large Hugging Face model: weights on the meta device run as fake tensors)."
        )
        if st.button("Measure min-cut budgets", key="cl_min_cut_run"):
            try:
                results = panels.run_with_status(
                    lambda progress: remat.sweep(
                        graph, graph.example_inputs or (), MIN_CUT_BUDGETS, timeout_s=600, progress=progress
                    ),
                    starting=f"Tracing the joint graph and running min-cut at {len(MIN_CUT_BUDGETS)} budgets in a "
                    "worker (stopped after 10 minutes)...",
                )
            except PartitionError as exc:
                st.error(f"Cannot trace the joint graph: {md(exc)}")
                results = None
            if results is not None:
                measured[key] = cluster.with_min_cut(prof, results).min_cut
        shares = measured.get(key, ())
        if shares:
            st.caption(
                md(
                    "; ".join(
                        f"min-cut-{b:g} keeps {kept:.0%} of the activations and recomputes {redo:.0%} of the forward"
                        for b, kept, redo in shares
                    )
                )
            )
    return shares


def tokens_in_words(count: float) -> str:
    """ "1 trillion", "300 billion", "15.6 trillion", "2,000,000": a token count as people say it."""
    for size, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if count >= size:
            return f"{number(round(count / size, 2))} {word}"
    return number(count)


# The bounds of the page's number fields (the command line's too, cli/cluster.py); None: unbounded.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "cl_batch": (1, 1 << 20),
    "cl_serve_batch": (1, 1 << 20),
    "cl_prompt": (1, 1 << 20),
    "cl_seq": (1, 1 << 20),
    "cl_tokens": (1e6, 1e15),
    "cl_max_nodes": (1, 4096),  # Llama 3's 16,384 H100s are 2,048 nodes of 8; the CLI's --max-nodes too
    "cl_host_gib": (1.0, 65536.0),  # host memory a node, GiB (the command line's --host-memory, up to 64 TiB)
}


def _bounded(box: Any, label: str, key: str, default: float, **kwargs: Any) -> Any:
    """A number field in its range (:data:`RANGES`, the command line's too): a value out of it, typed
    or from a link, is said beside the field and above the page, not dropped in the browser."""
    low, high = RANGES[key]
    before = len(range_notes())
    high = high if high is not None else float("inf")
    value = bounded_number(box, label, low or 0, high, key=key, fallback=default, value=default, **BOUND, **kwargs)
    _page_notes().extend(range_notes()[before:])
    return value


def _page_notes() -> list[str]:
    return st.session_state.setdefault(_PAGE_NOTES, [])


def show_page_notes() -> None:
    """This page's fields not applied, said once more above the answers they did not change (the
    notes above the page are drawn before the page's own fields are read)."""
    for note in st.session_state.pop(_PAGE_NOTES, []):
        st.warning(note, icon=":material/block:")


def precision_for(traced_bytes: int) -> str:
    """The precision a model traced at ``traced_bytes`` an element is planned in unless the user
    picks another: its own (an fp32 model in fp32), a 16-bit model in bf16 mixed precision."""
    return next((d.label for d in units.PRECISIONS if d.bytes == traced_bytes), units.PRECISIONS[0].label)


def workload_ui(traced_bytes: int = 2, model_key: str = "") -> cluster.Workload:
    """The workload's fields; the precision starts at the model's own (:func:`precision_for`) and
    starts there again when ``model_key`` (the model's fingerprint) changes."""
    if st.session_state.get(_PRECISION_MODEL, model_key) != model_key:
        st.session_state.pop("cl_precision", None)  # another model: its own precision, not the last one's
    st.session_state[_PRECISION_MODEL] = model_key
    st.session_state[_PAGE_NOTES] = []  # hardware_ui shows this page's notes after its own fields
    cols = st.columns(4)
    kind = cols[0].selectbox("Work", ["training", "inference"], key="cl_kind", **BOUND)
    training = kind == "training"
    if training:
        batch = int(_bounded(cols[1], "Global batch (sequences a step)", "cl_batch", 512, step=1))
        seq = int(_bounded(cols[2], "Sequence length (tokens)", "cl_seq", 4096, step=1))
    else:  # serving has its own inputs: one conversation at a time unless told otherwise
        batch = int(
            _bounded(
                cols[1],
                "Sequences served at once",
                "cl_serve_batch",
                1,
                step=1,
                help="concurrent sequences decoded together (the serving batch)",
            )
        )
        seq = int(_bounded(cols[2], "Prompt length (tokens)", "cl_prompt", 4096, step=1))
    precision = PRECISIONS[
        cols[3].selectbox(
            "Precision",
            list(PRECISIONS),
            index=list(PRECISIONS).index(precision_for(traced_bytes)),
            key="cl_precision",
            **BOUND,
            help="bf16: bf16 weights and activations with fp32 master weights and state",
        )
    ]
    cols = st.columns(4)
    optimizer = cols[0].selectbox(
        "Optimizer",
        list(OPTIMIZERS),
        key="cl_optimizer",  # its name in the link (NOTE: [Bound keys]); what it keeps, said below
        disabled=not training,
        help="; ".join(f"{name}: {o.label}" for name, o in OPTIMIZERS.items()),
        **BOUND,
    )
    cols[0].caption(OPTIMIZERS[optimizer].label)
    train_tokens = float(
        _bounded(
            cols[1],
            "Tokens to train (for time and cost)",
            "cl_tokens",
            1e12,
            format="%.0f",  # 1000000000000, with the count in words below (Streamlit's formats have no commas)
            step=1e11,
            disabled=not training,
        )
    )
    if training:
        cols[1].caption(md(f"{tokens_in_words(train_tokens)} tokens"))
    generate = int(
        cols[2].number_input(
            "Tokens generated per sequence", 0, 1 << 16, 256, key="cl_generate", disabled=training, **BOUND
        )
    )
    return cluster.Workload(kind, batch, seq, precision.bytes, optimizer, train_tokens, generate, dtype=precision.short)


def hardware_cluster(hw: Mapping[str, Any], engine: str | None = None) -> cluster.Cluster:
    """The :class:`~partitioner.cluster.Cluster` of :func:`hardware_ui`'s fields (the one place the
    page's fields become a cluster: the search, the opened layout and the job review all read it)."""
    return cluster.cluster(
        hw["accelerator"],
        hw["per_node"],
        hw["intra"],
        hw["inter"],
        int(hw["headroom_gib"] * GiB),
        hw["price"],
        engine=engine,
        host_memory_bytes=int(hw.get("host_gib", HOST_MEMORY_BYTES / GiB) * GiB),
    )


def hardware_ui(kind: str = "training") -> dict[str, Any]:
    """The accelerator, nodes, links, price, headroom and the engine the times are for (``kind``:
    the workload's, which picks the engine's default)."""
    cols = st.columns(4)
    names = list(cluster.ACCELERATORS)
    accelerator = cols[0].selectbox("Accelerator", names, index=names.index("h100-80gb"), key="cl_accelerator", **BOUND)
    preset = cluster.ACCELERATORS[accelerator]
    cols[1].caption(
        md(
            f"{format_bytes(preset.memory_bytes)}, {preset.peak_flops / 1e12:,.0f} TFLOP/s dense bf16, "
            f"{preset.memory_bandwidth_bytes_per_s / 1e12:.2f} TB/s memory"
        )
    )
    per_node = int(cols[2].number_input("Devices per node", 1, 64, 8, key="cl_per_node", **BOUND))
    max_nodes = int(  # RANGES: the command line's --max-nodes range too (cli/cluster.py)
        _bounded(
            cols[3],
            "Up to nodes",
            "cl_max_nodes",
            64,
            step=1,
            help="sizes searched: 1, 2, 4, ... devices of one node, then 1, 2, 4, ... nodes up to this",
        )
    )
    cols = st.columns(4)
    links = list(cluster.LINKS)
    own = cluster.cluster(accelerator).intra.name  # the accelerator's own link (NVLink, Infinity Fabric, PCIe)
    intra = cols[0].selectbox(
        "Link inside a node",
        links,
        index=links.index(own),
        key=f"cl_intra_{accelerator}",
        **BOUND,
        help="defaults to the accelerator's own link",
    )
    inter = cols[1].selectbox("Link between nodes", links, index=links.index("infiniband-ndr"), key="cl_inter", **BOUND)
    price = float(
        cols[2].number_input(
            "$ per device-hour",
            0.0,
            1000.0,
            float(preset.price_per_hour),
            key=f"cl_price_{accelerator}",
            **BOUND,
            help="defaults to the preset's list price",
        )
    )
    headroom = float(
        cols[3].number_input(
            "Headroom per device (GiB)",
            0.0,
            64.0,
            4.0,
            key="cl_headroom",
            **BOUND,
            help="kept free on every device: CUDA context, fragmentation",
        )
    )
    cols = st.columns(4)
    host = float(
        _bounded(
            cols[0],
            "Host memory per node (GiB)",
            "cl_host_gib",
            HOST_MEMORY_BYTES / GiB,
            step=256.0,
            format="%.0f",
            help="the CPU memory of a node: ZeRO-Offload keeps each rank's optimizer state, fp32 weights "
            "and gradients there (2 TiB: a DGX H100's)",
        )
    )
    # Serving is priced as vLLM, SGLang and TensorRT-LLM serve (CUDA graphs, fused kernels) unless a
    # person picks eager; training keeps eager PyTorch unless they pick graphs: one radio each.
    serving = kind == "inference"
    engine = panels.engine_ui(
        "cl_serve_engine" if serving else "cl_engine",
        lambda e: preset.with_engine(e).assumes,
        default="graphs" if serving else "eager",
    )
    show_page_notes()
    return dict(
        accelerator=f"{accelerator}@{engine}" if serving or engine != "eager" else accelerator,
        per_node=per_node,
        max_nodes=max_nodes,
        intra=intra,
        inter=inter,
        headroom_gib=headroom,
        price=price,
        host_gib=host,
    )
