"""Training memory on Hugging Face models: the torch.export graph travels to the worker (as
plain data: export's GraphModules do not pickle), meta weights are filled to run or refused with
the rule and the fix, and saved bytes count each storage once at its full size."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import partitioner
import sample_models
from partitioner import remat
from partitioner.remat._portable import from_portable, to_portable

pytest.importorskip("transformers")

# Tiny configs (real weights); the names and fields are sample_models/_hf.py's.
TINY = {
    "gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000},
    "llama": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000},
    "qwen2": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 1000},
}


def _traced(name: str, overrides: dict) -> tuple[partitioner.Graph, tuple]:
    model, inputs, _ = sample_models.load(f"hf:{name}", overrides)
    return partitioner.trace(model, inputs), tuple(inputs)


class FusedAttention(torch.nn.Module):
    """GPT-2's attention in small: one linear makes q, k and v, split into views of its output."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.qkv, self.d, self.heads = torch.nn.Linear(d, 3 * d), d, heads

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(self.d, dim=2)
        q, k, v = (y.view(b, t, self.heads, self.d // self.heads).transpose(1, 2) for y in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_saved_views_of_one_storage_count_its_full_size_once():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    graph = partitioner.trace(FusedAttention(), (x,))
    (r,) = remat.sweep(graph, (x,), (1.0,), timeout_s=None)
    # Hand count: sdpa's backward reads q, k and v, three views of the qkv output (2 x 8 x 96
    # floats: one storage), and its own output (2 x 4 x 8 x 8) and log-sum-exp (2 x 4 x 8).
    qkv, out, lse = 2 * 8 * 96 * 4, 2 * 4 * 8 * 8 * 4, 2 * 4 * 8 * 4
    assert qkv in r.saved_bytes_by_node.values()  # not 2 * 8 * 32 * 4, the first view's size
    assert r.saved_activation_bytes == qkv + out + lse
    assert r.saved_input_bytes == x.numel() * 4  # the linear's weight gradient reads x
    assert r.gradients_equal


def test_an_exported_graph_travels_as_plain_data_with_its_names():
    graph, inputs = _traced("llama", TINY["llama"])
    gm = graph.graph_module
    with pytest.raises(Exception, match="pickle"):
        pickle.dumps(gm)  # torch.export's GraphModule: the reason for the portable form
    back = from_portable(pickle.loads(pickle.dumps(to_portable(gm))))
    kept = [n.name for n in gm.graph.nodes if n.target != "_guards_fn"]
    assert [n.name for n in back.graph.nodes] == kept
    with torch.no_grad():
        torch.testing.assert_close(torch.utils._pytree.tree_leaves(back(*inputs)),
                                   torch.utils._pytree.tree_leaves(gm(*inputs)))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY))
def test_remat_runs_in_the_worker_on_hugging_face_models(name):
    graph, inputs = _traced(name, TINY[name])
    zero, half, one = remat.sweep(graph, inputs, (0.0, 0.5, 1.0), timeout_s=300)
    assert all(r.gradients_equal for r in (zero, half, one))
    assert zero.saved_activation_bytes == 0 < half.saved_activation_bytes <= one.saved_activation_bytes
    # Masks and positions are recomputed even at budget 1 (min-cut always redoes what is cheap).
    assert zero.recomputed_ops > half.recomputed_ops >= one.recomputed_ops
    assert zero.recompute_flops >= half.recompute_flops >= one.recompute_flops
    names = set(graph.index)
    assert set(half.saved) <= names and set(half.recomputed) <= names
    assert sum(half.saved_bytes_by_node.values()) == half.saved_activation_bytes


@pytest.mark.slow
def test_meta_weights_are_filled_to_run_or_refused_with_the_fix():
    # GPT-2 with 2 layers is built on the meta device (53 M parameters): filled in the worker.
    graph, inputs = _traced("gpt2", {"n_layer": 2})
    assert any(p.is_meta for p in graph.graph_module.parameters())
    (r,) = remat.sweep(graph, inputs, (0.5,), timeout_s=300)
    assert r.gradients_equal and r.saved_activation_bytes > 0
    assert any(p.is_meta for p in graph.graph_module.parameters())  # the caller's graph is left as it was
    cli = [sys.executable, "-m", "cli", "remat", "hf:gpt2", "--budget", "0.5"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "must total at most 256 MiB" in done.stderr and "--set num_hidden_layers=2" in done.stderr
    assert "per-layer figures scale" in done.stderr
