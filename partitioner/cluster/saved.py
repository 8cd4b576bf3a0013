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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from partitioner.cluster.model_shape import example_tokens, repeated_blocks
from partitioner.cluster.op_kinds import (
    ATTENTION,
    LINEAR_POINTWISE,
    NONLINEAR_POINTWISE,
    NORM,
    PRODUCT,
    REDUCTION,
    SOFTMAX,
    VIEW,
    module_kind,
    op_base,
)
from partitioner.cluster.profile import ModelProfile
from partitioner.cluster.profile import profile as _profile
from partitioner.graph import Graph
from partitioner.units import find_dtype

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


def _blocks(graph: Graph) -> dict[int, str]:
    """op node -> its block (the most repeated ``name.N`` container's), as the profile finds them."""
    return {v: name for name, vs in repeated_blocks(graph).items() for v in vs}


class _Scan:
    """The per-node facts of one traced forward that the phases of :func:`saved_activations` read:
    which values are activations, each op's kind, the value each view stands for (``root``), the
    pointwise regions (a union-find), the blocks and the hidden width."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes = graph.nodes
        self.tokens0, self.seq0 = example_tokens(graph)
        n = len(self.nodes)
        self.weight = self._weights()
        self.block = _blocks(graph)
        self.hidden = self._hidden_width()
        # Small values (norms' statistics) are left out: under 1/64 of the hidden state a token.
        self.significant = [not self.weight[v] and self.elements(v) >= max(2.0, self.hidden / 64) for v in range(n)]
        self.kind = ["" for _ in range(n)]
        self.root = list(range(n))  # a view, cast or copy of a value is that value
        for v in graph.op_indices:
            self.kind[v] = self._base(v)
            acts = [u for u in self.nodes[v].inputs if not self.weight[u]]
            if self.kind[v] in VIEW and acts:
                self.root[v] = self.root[acts[0]]
        self.pointwise = [k in LINEAR_POINTWISE or k in NONLINEAR_POINTWISE for k in self.kind]
        self.parent = list(range(n))
        self.members = self._pointwise_regions()

    def elements(self, v: int) -> float:
        """Floating elements of ``v``'s output a token (0 for integer and boolean values)."""
        nd = self.nodes[v]
        dtype = find_dtype(nd.dtype) if nd.dtype else None
        size = dtype.bytes if dtype is not None and dtype.floating else 0
        return nd.output_bytes / size / self.tokens0 if size else 0.0

    def _base(self, v: int) -> str:
        nd = self.nodes[v]
        return module_kind(self.graph, v) if nd.op == "call_module" else op_base(nd.target)

    def _weights(self) -> list[bool]:
        """Whether each value is made of weights alone. Activations are float values computed from
        the token stream (the embeddings' outputs, float inputs); weights, what is made of them
        alone (a transpose, experts gathered by an index) and position tables (made of positions
        and buffers) are not. Non-float values stay weights: they are never saved as activations."""
        weight = [True] * len(self.nodes)
        for v, nd in enumerate(self.nodes):
            if nd.dtype is None and nd.op != "get_attr":  # a tuple (split): an activation if it reads one
                weight[v] = all(weight[u] for u in nd.inputs)
                continue
            if not str(nd.dtype).removeprefix("torch.").startswith(("float", "bfloat")):
                continue
            if nd.op == "placeholder" or self._base(v) == "embedding":
                weight[v] = nd.op == "get_attr"
            elif nd.op != "get_attr":
                weight[v] = all(weight[u] for u in nd.inputs)
        return weight

    def _hidden_width(self) -> int:
        """The hidden state: the commonest width a block reads from outside itself (without blocks,
        the widest op's output)."""
        sizes = Counter(
            round(self.elements(u))
            for v in self.block
            for u in self.nodes[v].inputs
            if not self.weight[u] and self.block.get(u) != self.block[v] and self.elements(u) > 0
        )
        if sizes:
            return sizes.most_common(1)[0][0]
        return max((round(self.elements(v)) for v in self.graph.op_indices), default=1)

    def find(self, v: int) -> int:
        """The pointwise region of ``v`` (its union-find root, with path halving)."""
        parent = self.parent
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    def _pointwise_regions(self) -> dict[int, list[int]]:
        """Join pointwise ops that read significant pointwise values (what a fusing engine runs as
        one kernel); region -> its ops in topological order."""
        for v in self.graph.op_indices:
            if self.pointwise[v] and not self.weight[v]:
                for u in self.nodes[v].inputs:
                    r = self.root[u]
                    if self.pointwise[r] and not self.weight[r] and self.significant[r]:
                        self.parent[self.find(r)] = self.find(v)
        members: dict[int, list[int]] = {}
        for v in self.graph.op_indices:
            if self.pointwise[v] and not self.weight[v]:
                members.setdefault(self.find(v), []).append(v)
        return members

    def acts(self, v: int) -> list[int]:
        """The significant activations ``v`` reads, as the values they stand for."""
        return [self.root[u] for u in self.nodes[v].inputs if not self.weight[u] and self.significant[self.root[u]]]

    def region_inputs(self, r: int) -> list[int]:
        """The significant activations region ``r`` reads from outside itself, sorted."""
        return sorted({u for m in self.members[r] for u in self.acts(m) if self.find(u) != r})

    def reads_weight(self, v: int) -> bool:
        """Whether op ``v`` reads a weight: a module's parameters or a weight value."""
        nd = self.nodes[v]
        return nd.param_bytes > 0 or any(self.weight[u] for u in nd.inputs)

    def sequence_parallel(self) -> list[bool]:
        """Each value's class: sequence-parallel (True) or tensor-parallel (False), in topological
        order, following Megatron's split (NOTE: [Saved activations])."""
        sp = [True] * len(self.nodes)
        region_sp: dict[int, bool] = {}
        for v, nd in enumerate(self.nodes):
            if self.weight[v] or nd.op not in ("call_function", "call_method", "call_module"):
                continue
            base, acts = self.kind[v], self.acts(v)
            if base in VIEW and any(not self.weight[u] for u in nd.inputs):
                sp[v] = sp[self.root[v]]
            elif base in PRODUCT:
                # With a weight: column-parallel (split) reading the sp part, row-parallel (whole
                # again) reading the split part. Between activations only (attention's): split.
                sp[v] = (not all(sp[u] for u in acts)) if self.reads_weight(v) and acts else not acts
            elif base in ATTENTION or base in SOFTMAX:
                sp[v] = False
            elif base in NORM:
                sp[v] = True
            elif self.pointwise[v]:  # a fused region is split as a whole when what it reads is
                r = self.find(v)
                if r not in region_sp:
                    region_sp[r] = all(sp[u] for u in self.region_inputs(r))
                sp[v] = region_sp[r]
            else:
                sp[v] = all(sp[u] for u in acts)
        return sp

    def _keep(self, kept: dict[int, int], values: Iterable[int], by: int) -> None:
        """Op ``by`` keeps ``values`` (as the values they stand for): each saved once, by the first op
        that keeps it; weights, small values and integers (indices, boolean masks) are not counted."""
        for value in values:
            value = self.root[value]
            dtype = str(self.nodes[value].dtype)
            if not self.weight[value] and self.significant[value] and not dtype.startswith(("int", "uint", "bool")):
                kept.setdefault(value, by)

    def saved_values(self) -> tuple[dict[int, int], list[int]]:
        """What each op keeps for its backward (NOTE: [Saved activations]): saved value -> the first
        op keeping it, and the dropouts whose masks are kept, in topological order."""
        kept: dict[int, int] = {}
        masks: list[int] = []
        regions_done: set[int] = set()
        for v in self.graph.op_indices:
            if self.weight[v]:
                continue
            base = self.kind[v]
            ins = [u for u in self.nodes[v].inputs if not self.weight[u]]
            if base in PRODUCT:  # a weight's gradient needs the product's input
                self._keep(kept, ins, v)
            elif base in NORM and ins:
                self._keep(kept, ins[:1], v)
            elif base in ATTENTION:  # query, key, value and output; the scores are recomputed
                self._keep(kept, ins[:3], v)
                self._keep(kept, [v], v)
            elif base in SOFTMAX:  # its derivative reads its output
                self._keep(kept, [v], v)
            elif base == "dropout" and ins and self.significant[self.root[ins[0]]]:
                masks.append(v)
            elif self.pointwise[v]:  # a fused region keeps as a whole, once
                r = self.find(v)
                if r not in regions_done:
                    regions_done.add(r)
                    self._keep_region(kept, r)
            elif base not in VIEW and base not in ("embedding", "output"):
                self._keep(kept, ins, v)
        return kept, masks

    def _multiplies_activations(self, v: int) -> bool:
        """Whether ``v`` multiplies (or divides) two activations: nonlinear in its inputs."""
        return self.kind[v] in ("mul", "div") and len(self.acts(v)) >= 2

    def _keep_region(self, kept: dict[int, int], r: int) -> None:
        """What fused pointwise region ``r`` keeps: nothing when it is linear in its inputs (residual
        adds, rotary embeddings); its input when it reads one (a GeLU however decomposed, an
        RMSNorm); else what each op keeps, as eager autograd does (SwiGLU's silu(gate) x up)."""
        group = self.members[r]
        if not any(self.kind[m] in NONLINEAR_POINTWISE or self._multiplies_activations(m) for m in group):
            return
        external = self.region_inputs(r)
        if len(external) == 1:
            self._keep(kept, external, group[0])
            return
        for m in group:
            if self._multiplies_activations(m) or (
                self.kind[m] in NONLINEAR_POINTWISE and self.kind[m] not in REDUCTION
            ):
                self._keep(kept, self.acts(m), m)

    def _square(self, shape: tuple[int, ...]) -> bool:
        """Whether ``shape`` ends in (s, s) at the traced sequence: attention's scores."""
        return self.seq0 > 1 and len(shape) >= 2 and shape[-1] == shape[-2] == self.seq0

    def score_shaped(self) -> list[bool]:
        """Values that grow with the sequence: a product of two activations shaped (..., s, s) (Q K^T)
        and what is made of it alone (scaling, masking, softmax, dropout)."""
        score = [False] * len(self.nodes)
        for v in self.graph.op_indices:
            if not self._square(self.nodes[v].shape or ()) or self.weight[v]:
                continue
            acts = self.acts(v)
            if self.kind[v] in ("matmul", "bmm", "baddbmm", "einsum") and len(acts) >= 2:
                score[v] = not any(score[u] for u in acts)  # Q K^T; the scores times V is the attention's output
            elif acts and all(score[u] for u in acts):
                score[v] = True
        return score

    def _part(self, value: int, by: int, sp: list[bool], score: list[bool]) -> str:
        """Where a value saved by op ``by`` counts: outside the blocks, score-shaped, sp or tp."""
        if by not in self.block:
            return "outside"
        if score[value]:
            return "score"
        return "sp" if sp[value] else "tp"

    def totals(
        self, kept: dict[int, int], masks: list[int], sp: list[bool], score: list[bool]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """The saved elements and the dropout masks' bytes a token, over all blocks, by part
        (``"sp"``, ``"tp"``, ``"score"``, ``"outside"``); a mask counts in its input's part."""
        elements = dict.fromkeys(("sp", "tp", "score", "outside"), 0.0)
        for value, by in kept.items():
            elements[self._part(value, by, sp, score)] += self.elements(value)
        mask_bytes = dict.fromkeys(("sp", "tp", "score", "outside"), 0.0)
        for v in masks:  # one byte an element
            mask_bytes[self._part(self.root[self.nodes[v].inputs[0]], v, sp, score)] += self.elements(v)
        return elements, mask_bytes

    def weight_inputs(self, kept: dict[int, int]) -> float:
        """Saved elements a token inside the blocks that a product with a weight reads."""
        read: set[int] = set()
        for v in self.block:
            if self.kind[v] in PRODUCT and self.reads_weight(v):
                read.update(self.root[u] for u in self.nodes[v].inputs if not self.weight[u])
        return sum(self.elements(u) for u in read if u in kept and kept[u] in self.block)

    def op_policy(self, sp: list[bool]) -> tuple[float, float, float]:
        """(sp elements, tp elements, recomputed FLOPs) a token over all blocks under torchtitan's
        per-op policy (NOTE: [Per-op selective recomputation]): each block keeps its input, the
        output of its 1st, 3rd, ... product with a weight and of its attention; the 2nd, 4th, ...
        products are computed again (with the pointwise ops, which have no FLOPs counted)."""
        elements = {"sp": 0.0, "tp": 0.0}
        flops = 0.0
        count: dict[str, int] = {}
        entered: set[str] = set()
        for v in self.graph.op_indices:
            b = self.block.get(v)
            if b is None or self.weight[v]:
                continue
            if b not in entered:  # the block's input: the first activation it reads from outside
                entered.add(b)
                for u in self.nodes[v].inputs:
                    if not self.weight[u] and self.block.get(u) != b:
                        elements["sp"] += self.elements(self.root[u])
                        break
            if self.kind[v] in PRODUCT and self.reads_weight(v):
                count[b] = count.get(b, 0) + 1
                if count[b] % 2 == 0:
                    flops += self.nodes[v].flops / self.tokens0
                else:
                    elements["sp" if sp[v] else "tp"] += self.elements(v)
            elif self.kind[v] in ATTENTION:
                elements["sp" if sp[v] else "tp"] += self.elements(v)
        return elements["sp"], elements["tp"], flops

    def heads_and_widths(self) -> tuple[int, int, tuple[int, ...]]:
        """The attention heads and key-value heads (fused attention's query and key, (batch, heads,
        s, d); else eager attention's scores, (batch, heads, s, s)) and the output widths of the
        products with weights inside the blocks: what a tensor-parallel degree must divide."""
        heads = kv_heads = 0
        widths: set[int] = set()
        for v in self.block:
            nd = self.nodes[v]
            if self.kind[v] in ATTENTION and len(nd.inputs) >= 2:
                q = self.nodes[nd.inputs[0]].shape or ()
                if len(q) == 4:
                    heads = q[1]
                    k = self.nodes[self.root[nd.inputs[1]]].shape or ()
                    kv_heads = k[1] if len(k) == 4 else heads
            shape = nd.shape or ()
            if self.kind[v] in PRODUCT and self.reads_weight(v) and shape:
                widths.add(int(shape[-1]))
            elif not heads and self.kind[v] in ("matmul", "bmm") and len(shape) == 4 and self._square(shape):
                heads = kv_heads = int(shape[1])  # eager attention's scores: (batch, heads, s, s)
        return int(heads), int(kv_heads), tuple(sorted(widths))


def saved_activations(graph: Graph) -> SavedActivations:
    """The saved values of ``graph``'s forward (NOTE: [Saved activations]). O(N + E)."""
    scan = _Scan(graph)
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
    """A :class:`~partitioner.cluster.profile.ModelProfile` with what autograd keeps
    (:func:`saved_activations` of the same graph): the planner's activation memory reads it."""

    saved: SavedActivations | None = None


def profile(graph: Graph, name: str = "") -> PlannerProfile:
    """The per-token figures of ``graph`` (:func:`partitioner.cluster.profile.profile`) with its
    saved activations. O(N + E)."""
    base = _profile(graph, name)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init and f.name != "_cache"}
    return PlannerProfile(**values, saved=saved_activations(graph))
