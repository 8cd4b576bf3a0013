"""Tensor-parallel plans on graphs torch.export made (Hugging Face models): parameters map to
their modules by qualified name and the classes the trace recorded, so Llama's projections shard."""

from __future__ import annotations

import tiny_hf

import partitioner
import sample_models
from partitioner.sharding import tensor_parallel

SMALL = tiny_hf.DECODER


def test_llama_projections_shard_and_the_row_parallel_layer_all_reduces():
    module, inputs, kwargs = sample_models.load("hf:llama", overrides=SMALL)
    graph = partitioner.trace(module, inputs, example_kwargs=kwargs)
    assert not any(nd.op == "call_module" for nd in graph.nodes)  # exported: no modules of its own
    layer = "model.layers.0"
    spec = {
        f"{layer}.mlp.gate_proj.weight": "2,1",
        f"{layer}.mlp.up_proj.weight": "2,1",
        f"{layer}.mlp.down_proj.weight": "1,2",
        f"{layer}.self_attn.q_proj.weight": "2,1",
    }
    plan = tensor_parallel.tp_plan(graph, spec, 2)
    styles = {m: lay["style"] for m, lay in plan.styles.items()}
    assert styles == {
        f"{layer}.mlp.gate_proj": "colwise",
        f"{layer}.mlp.up_proj": "colwise",
        f"{layer}.mlp.down_proj": "rowwise",
        f"{layer}.self_attn.q_proj": "colwise",
    }
    reduces = [c for c in plan.collectives if c.kind == "all_reduce" and not c.backward]
    assert [c.module for c in reduces] == [f"{layer}.mlp.down_proj"]
    hidden = graph.nodes[graph.index[reduces[0].node]].output_bytes
    assert reduces[0].nbytes == hidden == inputs[0].numel() * SMALL["hidden_size"] * 4
