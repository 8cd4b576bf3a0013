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

    def layer_bytes_per_token(
        self, element_bytes: float, seq: int, tp: int = 1, sequence_parallel: bool = True, scores: bool = True
    ) -> float:
        """One layer's saved bytes a token at sequence ``seq``, on one of ``tp`` ranks; without
        ``scores`` (selective recomputation) the sequence-sized values are left out."""
        sp = (self.sp_elements * element_bytes + self.sp_mask_bytes) / (tp if sequence_parallel else 1)
        split = (self.tp_elements * element_bytes + self.tp_mask_bytes) / tp
        grow = (self.score_elements * element_bytes + self.score_mask_bytes) * seq / self.seq0 / tp if scores else 0.0
        return sp + split + grow

    def input_bytes_per_token(self, element_bytes: float, tp: int = 1, sequence_parallel: bool = True) -> float:
        """A layer's input a token, as full recomputation keeps it (split over tp with sequence parallelism)."""
        return self.input_elements * element_bytes / (tp if sequence_parallel else 1)


def _blocks(graph: Graph) -> dict[int, str]:
    """op node -> its block (the most repeated ``name.N`` container's), as the profile finds them."""
    return {v: name for name, vs in repeated_blocks(graph).items() for v in vs}


def saved_activations(graph: Graph) -> SavedActivations:
    """The saved values of ``graph``'s forward (NOTE: [Saved activations]). O(N + E)."""
    tokens0, seq0 = example_tokens(graph)
    nodes = graph.nodes
    n = len(nodes)

    def elements(v: int) -> float:
        nd = nodes[v]
        kind = find_dtype(nd.dtype) if nd.dtype else None
        size = kind.bytes if kind is not None and kind.floating else 0
        return nd.output_bytes / size / tokens0 if size else 0.0

    # Activations: float values computed from the token stream (the embeddings' outputs, float
    # inputs). Weights, what is made of them alone (a transpose, experts gathered by an index) and
    # position tables (made of positions and buffers) are not.
    weight = [True] * n
    for v in range(n):
        nd = nodes[v]
        if nd.dtype is None and nd.op != "get_attr":  # a tuple (split): an activation if it reads one
            weight[v] = all(weight[u] for u in nd.inputs)
            continue
        if not str(nd.dtype).removeprefix("torch.").startswith(("float", "bfloat")):
            continue
        base = module_kind(graph, v) if nd.op == "call_module" else op_base(nd.target)
        if nd.op == "placeholder" or base == "embedding":
            weight[v] = nd.op == "get_attr"
        elif nd.op != "get_attr":
            weight[v] = not any(not weight[u] for u in nd.inputs)
    block = _blocks(graph)
    # The hidden state: the commonest width a block reads from outside itself.
    sizes = Counter(
        round(elements(u))
        for v in block
        for u in nodes[v].inputs
        if not weight[u] and block.get(u) != block[v] and elements(u) > 0
    )
    hidden = sizes.most_common(1)[0][0] if sizes else max((round(elements(v)) for v in graph.op_indices), default=1)
    significant = [not weight[v] and elements(v) >= max(2.0, hidden / 64) for v in range(n)]
    root = list(range(n))
    kind = ["" for _ in range(n)]
    for v in graph.op_indices:
        base = module_kind(graph, v) if nodes[v].op == "call_module" else op_base(nodes[v].target)
        kind[v] = base
        acts = [u for u in nodes[v].inputs if not weight[u]]
        if base in VIEW and acts:
            root[v] = root[acts[0]]
    # Pointwise regions (union-find over significant pointwise ops joined by significant values).
    pointwise = [kind[v] in LINEAR_POINTWISE or kind[v] in NONLINEAR_POINTWISE for v in range(n)]
    parent = list(range(n))

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for v in graph.op_indices:
        if pointwise[v] and not weight[v]:
            for u in nodes[v].inputs:
                r = root[u]
                if pointwise[r] and not weight[r] and significant[r]:
                    parent[find(r)] = find(v)
    members: dict[int, list[int]] = {}
    for v in graph.op_indices:
        if pointwise[v] and not weight[v]:
            members.setdefault(find(v), []).append(v)
    # Sequence-parallel (True) or tensor-parallel (False) class of each value, in topological order.
    sp = [True] * n
    region_sp: dict[int, bool] = {}
    for v in range(n):
        nd = nodes[v]
        acts = [root[u] for u in nd.inputs if not weight[u] and significant[root[u]]]
        base = kind[v]
        if weight[v] or nd.op not in ("call_function", "call_method", "call_module"):
            continue
        if base in VIEW and [u for u in nd.inputs if not weight[u]]:
            sp[v] = sp[root[v]]
        elif base in PRODUCT:
            reads_weight = any(weight[u] for u in nd.inputs) or nd.param_bytes > 0
            sp[v] = (not all(sp[u] for u in acts)) if reads_weight and acts else False if acts else True
        elif base in ATTENTION or base in SOFTMAX:
            sp[v] = False
        elif base in NORM:
            sp[v] = True
        elif pointwise[v]:
            r = find(v)
            if r not in region_sp:
                outside = {
                    root[u]
                    for m in members[r]
                    for u in nodes[m].inputs
                    if not weight[u] and significant[root[u]] and find(root[u]) != r
                }
                region_sp[r] = all(sp[u] for u in outside)
            sp[v] = region_sp[r]
        else:
            sp[v] = all(sp[u] for u in acts)
    # What each op keeps.
    kept: dict[int, int] = {}  # saved value -> the op that keeps it first
    masks: dict[int, int] = {}  # dropout -> itself (its mask)

    def keep(value: int, by: int) -> None:
        value = root[value]
        if not weight[value] and significant[value] and not str(nodes[value].dtype).startswith(("int", "uint", "bool")):
            kept.setdefault(value, by)

    done: set[int] = set()
    for v in graph.op_indices:
        base = kind[v]
        if weight[v]:
            continue
        ins = [u for u in nodes[v].inputs if not weight[u]]
        if base in PRODUCT:
            for u in ins:
                keep(u, v)
        elif base in NORM and ins:
            keep(ins[0], v)
        elif base in ATTENTION:
            for u in ins[:3]:
                keep(u, v)
            keep(v, v)
        elif base in SOFTMAX:
            keep(v, v)
        elif base == "dropout" and ins and significant[root[ins[0]]]:
            masks[v] = v
        elif pointwise[v]:
            r = find(v)
            if r in done:
                continue
            done.add(r)
            group = members[r]
            inside = set(group)
            external = sorted(
                {
                    root[u]
                    for m in group
                    for u in nodes[m].inputs
                    if not weight[u] and significant[root[u]] and root[u] not in inside
                }
            )
            nonlinear = any(
                kind[m] in NONLINEAR_POINTWISE
                or (
                    kind[m] in ("mul", "div")
                    and sum(significant[root[u]] and not weight[u] for u in nodes[m].inputs) >= 2
                )
                for m in group
            )
            if not nonlinear:
                continue
            if len(external) == 1:
                keep(external[0], group[0])
                continue
            for m in group:  # several inputs: each op as eager autograd keeps
                acts = [u for u in nodes[m].inputs if not weight[u] and significant[root[u]]]
                if (
                    kind[m] in ("mul", "div")
                    and len(acts) >= 2
                    or (kind[m] in NONLINEAR_POINTWISE and kind[m] not in REDUCTION)
                ):
                    for u in acts:
                        keep(u, m)
        elif base not in VIEW and base not in ("embedding", "output"):
            for u in ins:
                keep(u, v)
    # Scores: a product of two activations shaped (..., s, s), and what is made of it alone
    # (scaling, masking, softmax, dropout): the values that grow with the sequence.
    score = [False] * n
    for v in graph.op_indices:
        shape = nodes[v].shape or ()
        square = seq0 > 1 and len(shape) >= 2 and shape[-1] == shape[-2] == seq0
        acts = [root[u] for u in nodes[v].inputs if not weight[u] and significant[root[u]]]
        if not square or weight[v]:
            continue
        if kind[v] in ("matmul", "bmm", "baddbmm", "einsum") and len(acts) >= 2:
            score[v] = not any(score[u] for u in acts)  # Q K^T; the scores times V is the attention's output
        elif acts and all(score[u] for u in acts):
            score[v] = True
    layers = max(1, len(set(block.values())))
    sp_el = tp_el = score_el = out_el = 0.0
    for value, by in kept.items():
        e = elements(value)
        if by not in block:
            out_el += e
            continue
        if score[value]:
            score_el += e
        elif sp[value]:
            sp_el += e
        else:
            tp_el += e
    sp_mask = tp_mask = score_mask = out_mask = 0.0
    for v in masks:
        e = elements(v)
        if v not in block:
            out_mask += e
        elif score[root[nodes[v].inputs[0]]]:
            score_mask += e
        elif sp[root[nodes[v].inputs[0]]]:
            sp_mask += e
        else:
            tp_mask += e
    heads = kv_heads = 0
    widths: set[int] = set()
    for v in block:
        nd = nodes[v]
        if kind[v] in ATTENTION and len(nd.inputs) >= 2:
            q, k = nodes[nd.inputs[0]].shape or (), nodes[root[nd.inputs[1]]].shape or ()
            if len(q) == 4:
                heads = q[1]
                k = nodes[root[nd.inputs[1]]].shape or ()
                kv_heads = k[1] if len(k) == 4 else heads
        if kind[v] in PRODUCT and (nd.param_bytes or any(weight[u] for u in nd.inputs)) and nd.shape:
            widths.add(int(nd.shape[-1]))
        elif (
            not heads
            and kind[v] in ("matmul", "bmm")
            and nd.shape
            and len(nd.shape) == 4
            and seq0 > 1
            and nd.shape[-1] == nd.shape[-2] == seq0
        ):  # eager attention's scores: (batch, heads, s, s)
            heads = kv_heads = int(nd.shape[1])
    return SavedActivations(
        layers=layers,
        seq0=seq0,
        sp_elements=sp_el / layers,
        tp_elements=tp_el / layers,
        score_elements=score_el / layers,
        sp_mask_bytes=sp_mask / layers,
        tp_mask_bytes=tp_mask / layers,
        score_mask_bytes=score_mask / layers,
        outside_elements=out_el,
        input_elements=float(hidden),
        hidden=int(hidden),
        heads=int(heads),
        kv_heads=int(kv_heads),
        widths=tuple(sorted(widths)),
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
