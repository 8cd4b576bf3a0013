"""The per-node facts of one traced forward that :func:`partitioner.cluster.saved.saved_activations`
reads (NOTE: [Saved activations] and NOTE: [Per-op selective recomputation] there): which values
are activations, each op's kind, the value each view stands for, the pointwise regions, the blocks
and the hidden width; what each op keeps for its backward. Torch-free."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

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
from partitioner.graph import Graph
from partitioner.op_table import names
from partitioner.units import find_dtype

__all__ = ["ForwardScan"]

BATCHED = names(batched=True)  # how eager attention writes its scores and their product with V
BILINEAR = names(bilinear=True)  # of two activations, nonlinear in its inputs


def _blocks(graph: Graph) -> dict[int, str]:
    """op node -> its block (the most repeated ``name.N`` container's), as the profile finds them."""
    return {v: name for name, vs in repeated_blocks(graph).items() for v in vs}


class ForwardScan:
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
        return self.kind[v] in BILINEAR and len(self.acts(v)) >= 2

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
            if self.kind[v] in BATCHED and len(acts) >= 2:
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
            elif not heads and self.kind[v] in BATCHED and len(shape) == 4 and self._square(shape):
                heads = kv_heads = int(shape[1])  # eager attention's scores: (batch, heads, s, s)
        return int(heads), int(kv_heads), tuple(sorted(widths))
