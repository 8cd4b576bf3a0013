"""The Training memory page speaks of one count of recomputation (nodes of the traced graph, the
aten ops said beside them) and says why no plan is drawn when the devices are too small."""

from __future__ import annotations

import pytest
import torch
from app_helpers import errors, start

import partitioner
from explorer.builders import training_figures
from partitioner.remat.memory import RematResult


def gelu_recomputed(
    width: int, hidden: int, rows: int, flops: int, time_s: float
) -> tuple[partitioner.Graph, RematResult]:
    """Linear(width, hidden), GELU, Linear(hidden, width) traced on ``rows`` rows, and a result that
    recomputes the GELU (3 aten ops) at ``flops`` in ``time_s``."""
    graph = partitioner.trace(
        torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width)),
        (torch.randn(rows, width),),
    )
    gelu = graph.nodes[graph.op_indices[1]].name  # the GELU
    result = RematResult(
        budget=0.5,
        saved=(),
        recomputed=(gelu,),
        saved_activation_bytes=0,
        saved_input_bytes=0,
        recompute_flops=flops,
        recompute_time_s=time_s,
        recomputed_ops=3,
    )
    return graph, result


def test_the_graphs_title_counts_the_recomputed_nodes_and_names_the_aten_ops():
    graph, result = gelu_recomputed(4, 4, 2, flops=8, time_s=1e-12)
    dot = training_figures.remat_to_dot(graph, result)
    assert "1 recomputed nodes (3 aten ops)" in dot
    figure = training_figures.tradeoff_figure([result], 0.5)
    assert "recomputes 1 nodes (3 aten ops" in figure.data[0].hovertext[0]


@pytest.mark.slow
def test_too_small_devices_are_named_as_the_cause():
    at = start()
    at.selectbox(key="model").set_value("mlp").run()
    at.text_input(key="dev_memory").set_value("1 KiB").run()
    at.switch_page("views/training.py").run()
    at.button(key="tm_run").click().run(timeout=240)
    assert not at.exception and not errors(at)
    metrics = {m.label: m.value for m in at.metric}
    assert "Recomputed nodes" in metrics and "Recomputed ops" not in metrics
    shown = [w.value for w in at.warning]
    assert any("No plan of this model fits the sidebar's devices" in w and "KiB" in w for w in shown), shown
    assert not any("see the Explore page" in i.value for i in at.info)


def test_flops_read_in_units_in_the_tradeoff_and_the_graph():
    graph, result = gelu_recomputed(64, 512, 256, flops=35_362_048, time_s=1e-6)
    hover = training_figures.tradeoff_figure([result], 0.5).data[0].hovertext[0]
    assert "35.4 MFLOP" in hover and "35,362,048" not in hover
    dot = training_figures.remat_to_dot(graph, result)
    assert "FLOPs" not in dot and "FLOP" in dot
