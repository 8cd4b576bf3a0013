"""Training memory on Hugging Face models: the torch.export graph travels to the worker (as
plain data: export's GraphModules do not pickle), meta weights run as fake tensors (the same
decisions as real weights), and saved bytes count each storage once at its full size."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import tiny_hf
import torch
import torch.nn.functional as F

import partitioner
import sample_models
from partitioner import remat
from partitioner.remat._portable import from_portable, to_portable

pytest.importorskip("transformers")

# Tiny configs (real weights); the names and fields are sample_models/_hf.py's.
TINY = {"gpt2": tiny_hf.GPT2, "llama": tiny_hf.DECODER, "qwen2": tiny_hf.DECODER}


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
        torch.testing.assert_close(
            torch.utils._pytree.tree_leaves(back(*inputs)), torch.utils._pytree.tree_leaves(gm(*inputs))
        )


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
def test_meta_weights_run_as_fake_tensors_and_decide_as_real_weights_do():
    # GPT-2 with 2 layers is built on the meta device (53 M parameters): its joint trace runs on
    # fake tensors, and min-cut decides exactly as for the same model with real weights.
    model, inputs, _ = sample_models.load("hf:gpt2", {"n_layer": 2})
    graph = partitioner.trace(model, inputs)
    assert any(p.is_meta for p in graph.graph_module.parameters())
    budgets = (0.0, 0.5, 1.0)
    fake = remat.sweep(graph, inputs, budgets, timeout_s=300)
    assert any(p.is_meta for p in graph.graph_module.parameters())  # the caller's graph is left as it was
    real_model = model.to_empty(device="cpu")
    real_model.tie_weights()  # to_empty makes a tensor per module: tie lm_head to wte again
    for p in real_model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    real = remat.sweep(partitioner.trace(real_model, inputs), inputs, budgets, timeout_s=300)
    for f, r in zip(fake, real):
        assert f.gradients_equal is None and r.gradients_equal
        assert (f.saved_activation_bytes, f.saved_input_bytes, f.recomputed_ops, f.forward_ops, f.recompute_flops) == (
            r.saved_activation_bytes,
            r.saved_input_bytes,
            r.recomputed_ops,
            r.forward_ops,
            r.recompute_flops,
        )
        assert f.saved == r.saved and f.recomputed == r.recomputed
    assert fake[0].saved_activation_bytes < fake[2].saved_activation_bytes
    cli = [sys.executable, "-m", "cli", "remat", "hf:gpt2", "--set", "n_layer=2", "--budget", "0.5", "--out", "-"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert '"gradients_equal": null' in done.stdout


@pytest.mark.slow
def test_a_mixture_of_experts_runs_in_the_worker():
    # Mixtral counts tokens per expert with histc on integer ids, which the CPU lacks.
    overrides = {**TINY["llama"], "num_local_experts": 4, "num_experts_per_tok": 2}
    graph, inputs = _traced("mixtral", overrides)
    (r,) = remat.sweep(graph, inputs, (0.5,), timeout_s=300)
    assert r.gradients_equal and r.saved_activation_bytes > 0 and r.forward_ops > 0
