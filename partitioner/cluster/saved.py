"""What autograd keeps for the backward, per layer and per token, read off the traced forward graph;
and the model's shape (heads, widths) that a layout must divide. Torch-free.

# NOTE: [Saved activations]
Each op keeps what its derivative reads (torch's ``derivatives.yaml``): a matrix product its
activation operands (a weight's gradient needs its input), a norm its input, fused attention
(sdpa, flash) its query, key, value and output (never the scores: they are recomputed in the
backward), a softmax its output, a dropout its mask (one byte an element). Views, casts and
copies of a value are that value. Pointwise ops are taken as a fusing engine runs them (Megatron's
fused bias-GeLU, torch.compile): a connected region of pointwise ops with one input reading it
non-linearly (a GeLU however decomposed, an RMSNorm) keeps that input; a region linear in its
inputs (residual adds, rotary embeddings: products with position tables) keeps nothing; a region
of several inputs (SwiGLU's silu(gate) x up) keeps what each op keeps, as eager autograd does.
Values under 1/64 of the hidden state a token (norms' statistics) and values not made from the token stream (position tables, masks)
are left out. A value saved by several ops counts once.

# NOTE: [Per-op selective recomputation]
torchtitan's selective checkpointing by op (``activation_checkpoint.mode = "selective"``,
``selective_ac_option = "op"``) wraps each block and saves the outputs of the ops on its save list
(matrix products, fused attention) except every second matrix product, recomputing the rest in
the backward: a block keeps its input, its 1st, 3rd, ... products' outputs and attention's output;
the 2nd, 4th, ... products and every pointwise op (norms, SwiGLU, rotary embeddings) run again.
On Llama-3-8B's block that keeps 2 (4h + k + f) bytes a token of 2 (6h + 2k + 4f) (38 %) and
computes 36 % of the block's product FLOPs again. This is what "selective" means on a model with
fused attention, where Megatron's selective recomputation (the scores) drops nothing.

This reproduces Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sec. 4.1) exactly for a GPT block with dropout and fused attention: 34 s b h bytes a layer
(10 s b h outside the tensor-parallel regions, 24 s b h inside), and 2 (6h + 2k + 4f) s b for a
Llama block (k the key-value width, f the MLP's), the sums the tests check.

Each saved value is either in the sequence-parallel part (the hidden state's width outside the
tensor-parallel regions: norms' inputs and outputs, the residual stream, dropout after a
row-parallel product; divided by tp only with sequence parallelism) or in the tensor-parallel part
(heads and the MLP's width: always divided by tp). The class follows Megatron's split: a product
with a weight reading the sequence-parallel part is column-parallel (its output is split), one
reading the split part is row-parallel (its output is whole again); attention and what reads split
values are split. Score-shaped values (the last two dimensions the sequence: eager attention's
probabilities: a product of two activations and what is made of it alone) grow with the sequence
and are what selective recomputation drops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from partitioner.cluster.forward_scan import ForwardScan
from partitioner.cluster.model_profile import ModelProfile
from partitioner.cluster.model_profile import profile as _profile
from partitioner.graph import Graph

__all__ = ["SavedActivations", "saved_activations", "PlannerProfile", "profile"]


@dataclass(frozen=True)
class SavedActivations:
    """Elements autograd keeps per token (NOTE: [Saved activations]), averaged over the repeated
    blocks, at the traced sequence ``seq0``; masks in bytes. ``bytes_per_token`` prices them."""

    layers: int
    seq0: int
    sp_elements: float  # the sequence-parallel part: divided by tp only with sequence parallelism
    tp_elements: float  # heads and MLP width: divided by tp
    score_elements: float  # grows with the sequence (eager attention's scores); divided by tp
    sp_mask_bytes: float = 0.0  # dropout masks in the sequence-parallel part
    tp_mask_bytes: float = 0.0
    score_mask_bytes: float = 0.0
    outside_elements: float = 0.0  # outside the blocks (embeddings, the final norm, the head), per token
    input_elements: float = 0.0  # one layer's input: what full recomputation keeps
    hidden: int = 0  # the hidden state's width
    heads: int = 0  # attention heads (0: none found)
    kv_heads: int = 0
    widths: tuple[int, ...] = ()  # output widths of the products with weights inside the blocks
    # The saved inputs of the products with weights (what their weight gradients read), a layer:
    # the part a split backward holds until its W step (NOTE: [Weight-gradient stash])
    weight_input_elements: float = 0.0
    # torchtitan's per-op selective checkpointing (NOTE: [Per-op selective recomputation]): what a
    # layer keeps (its input, every other weight product's output, attention's output) by part,
    # and the FLOPs a token it computes again (the other products)
    op_policy_sp_elements: float = 0.0
    op_policy_tp_elements: float = 0.0
    op_policy_recompute_flops: float = 0.0

    def layer_bytes_per_token(
        self, element_bytes: float, seq: int, tp: int = 1, sequence_parallel: bool = True, scores: bool = True
    ) -> float:
        """One layer's saved bytes a token at sequence ``seq``, on one of ``tp`` ranks; without
        ``scores`` (selective recomputation) the sequence-sized values are left out."""
        sp = (self.sp_elements * element_bytes + self.sp_mask_bytes) / (tp if sequence_parallel else 1)
        split = (self.tp_elements * element_bytes + self.tp_mask_bytes) / tp
        grow = (self.score_elements * element_bytes + self.score_mask_bytes) * seq / self.seq0 / tp if scores else 0.0
        return sp + split + grow

    def weight_input_share(self) -> float:
        """The share of a layer's saved elements that are products' inputs (what a weight gradient
        reads): 0 when nothing is known."""
        total = self.sp_elements + self.tp_elements + self.score_elements
        return min(1.0, self.weight_input_elements / total) if total > 0 else 0.0

    def op_policy_bytes_per_token(self, element_bytes: float, tp: int = 1, sequence_parallel: bool = True) -> float:
        """One layer's saved bytes a token under torchtitan's per-op selective checkpointing, on one
        of ``tp`` ranks (NOTE: [Per-op selective recomputation])."""
        sp = self.op_policy_sp_elements * element_bytes / (tp if sequence_parallel else 1)
        return sp + self.op_policy_tp_elements * element_bytes / tp

    def input_bytes_per_token(self, element_bytes: float, tp: int = 1, sequence_parallel: bool = True) -> float:
        """A layer's input a token, as full recomputation keeps it (split over tp with sequence parallelism)."""
        return self.input_elements * element_bytes / (tp if sequence_parallel else 1)


def saved_activations(graph: Graph) -> SavedActivations:
    """The saved values of ``graph``'s forward (NOTE: [Saved activations]). O(N + E)."""
    scan = ForwardScan(graph)
    sp = scan.sequence_parallel()
    kept, masks = scan.saved_values()
    score = scan.score_shaped()
    elements, mask_bytes = scan.totals(kept, masks, sp, score)
    heads, kv_heads, widths = scan.heads_and_widths()
    layers = max(1, len(set(scan.block.values())))  # the repeated blocks
    op_sp, op_tp, op_flops = scan.op_policy(sp)
    return SavedActivations(
        layers=layers,
        seq0=scan.seq0,
        sp_elements=elements["sp"] / layers,
        tp_elements=elements["tp"] / layers,
        score_elements=elements["score"] / layers,
        sp_mask_bytes=mask_bytes["sp"] / layers,
        tp_mask_bytes=mask_bytes["tp"] / layers,
        score_mask_bytes=mask_bytes["score"] / layers,
        outside_elements=elements["outside"],
        input_elements=float(scan.hidden),
        hidden=int(scan.hidden),
        heads=heads,
        kv_heads=kv_heads,
        widths=widths,
        weight_input_elements=scan.weight_inputs(kept) / layers,
        op_policy_sp_elements=op_sp / layers,
        op_policy_tp_elements=op_tp / layers,
        op_policy_recompute_flops=op_flops / layers,
    )


@dataclass(frozen=True)
class PlannerProfile(ModelProfile):
    """A :class:`~partitioner.cluster.model_profile.ModelProfile` with what autograd keeps
    (:func:`saved_activations` of the same graph): the planner's activation memory reads it."""

    saved: SavedActivations | None = None


def profile(graph: Graph, name: str = "") -> PlannerProfile:
    """The per-token figures of ``graph`` (:func:`partitioner.cluster.model_profile.profile`) with its
    saved activations. O(N + E)."""
    base = _profile(graph, name)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init and f.name != "_cache"}
    return PlannerProfile(**values, saved=saved_activations(graph))
