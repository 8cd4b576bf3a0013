"""What a traced model costs per token: the figures the cluster planner scales to any batch,
sequence length and layout. Torch-free: read off the annotated :class:`~partitioner.graph.Graph`.

# NOTE: [Scaling the traced graph]
The graph is traced at one batch x sequence (``tokens0`` tokens). A node's FLOPs and output
bytes grow with the tokens it sees; attention's products of two activations (sdpa, or bmm and
matmul with no weight among their inputs: the scores and their product with the values) grow
with the tokens times the sequence length; weights do not grow. (Mixtral-8x7B's forward at
1 x 512 tokens: 13.19 TFLOP, the analytic 2 x active parameters x tokens plus attention.) Each node then costs max(bytes moved / bandwidth,
FLOPs / peak) (the roofline of :func:`partitioner.cost.model.roofline_latencies`), summed in
order: the forward time on one device at any size. Tensor parallelism divides FLOPs, weights
and (with sequence parallelism) activations by its degree. The repeated blocks (``layers.N``,
``h.N``, ``blocks.N``) give the layer count, the bytes that cross a block boundary per token
(the hidden state) and, for attention with ``k_proj``/``v_proj`` (or GPT-2's fused ``c_attn``),
the KV cache per token. A mixture of experts' experts (parameters under ``experts``) give the
expert count (``experts.N`` modules, or the first dimension of packed expert weights), their share
of the parameters and the MoE layers; the top-k comes from the model's config. Values derived from weights alone (a transpose of a weight, experts'
weights gathered by index) are weights too: they do not grow with the tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from partitioner import kernels, op_table
from partitioner.cluster.model_shape import example_tokens, moe_experts, repeated_blocks
from partitioner.cost import ops as gpu_ops
from partitioner.cost.training import step_bytes, traced_element_bytes
from partitioner.errors import PartitionError
from partitioner.graph import Graph
from partitioner.kernels import FOREACH_BANDWIDTH_SHARE, KernelOp
from partitioner.remat.memory import RematResult
from partitioner.units import dtype_for_bytes

__all__ = ["ModelProfile", "profile", "with_min_cut"]


@dataclass(frozen=True)
class ModelProfile:
    name: str
    tokens0: int  # tokens in the traced example (batch x sequence)
    seq0: int  # the traced sequence length (1 for models without one)
    weight_bytes: int  # every parameter once (tied weights once)
    param_count: int
    element_bytes: int  # bytes of one activation or weight element as traced
    layers: int  # repeated blocks (1 when the model has none)
    hidden_bytes_per_token: float  # what crosses a block boundary, per token
    kv_bytes_per_token: float  # the KV cache one token adds (every layer), 0 without attention
    act_bytes_per_token: float  # every op output of a forward, per token (at seq0)
    flops_per_token: float  # forward FLOPs per token at seq0 (linear and attention)
    attention_flops_per_token: float  # the part that grows with the sequence (at seq0)
    node_weight_bytes: tuple[int, ...] = field(default=(), compare=False, repr=False)  # weight bytes read
    node_act_bytes: tuple[float, ...] = field(default=(), compare=False, repr=False)  # activation bytes per token
    node_flops: tuple[float, ...] = field(default=(), compare=False, repr=False)  # FLOPs per token at seq0
    node_attention: tuple[bool, ...] = field(default=(), compare=False, repr=False)  # grows with the sequence
    expert_param_count: int = 0  # parameters of the experts (a mixture of experts), all layers
    experts: int = 0  # experts per MoE layer (0: a dense model)
    experts_per_token: int = 0  # how many experts each token is sent to (top-k)
    moe_layers: int = 0  # layers with experts
    # min-cut recomputation measured on this graph (:func:`with_min_cut`): (budget, the share of the
    # forward's activations it saves, its recomputed FLOPs as a share of the forward's)
    min_cut: tuple[tuple[float, float, float], ...] = ()
    node_ops: tuple[KernelOp, ...] = field(default=(), compare=False, repr=False)  # each op as a kernel, at tokens0
    vocab: int = 0  # a language model's vocabulary (its head's width), 0 without one
    _cache: dict[tuple, Any] = field(default_factory=dict, compare=False, repr=False)  # per-profile memos

    def forward_flops(self, tokens: float, seq: int) -> float:
        """Forward FLOPs for ``tokens`` tokens in sequences of ``seq``."""
        linear = self.flops_per_token - self.attention_flops_per_token
        return tokens * (linear + self.attention_flops_per_token * seq / self.seq0)

    def forward_seconds(
        self, tokens: float, seq: int, acc: Any, tp: int = 1, decode: bool = False, element_bytes: int | None = None
    ) -> float:
        """The forward time of ``tokens`` tokens in sequences of ``seq`` on one device of ``acc``
        (an :class:`~partitioner.cluster.hardware.Accelerator`), the work split ``tp`` ways
        (NOTE: [Scaling the traced graph]). With the card's kernel curves (``acc.kernels``) each
        op is priced by them through its engine (NOTE: [Engines] in :mod:`partitioner.kernels`);
        without, by the roofline of the accelerator's two figures. ``decode``: one new token a
        sequence (``tokens`` sequences) against ``seq`` tokens of context, attention's cache read
        priced by the caller; ``element_bytes``: the workload's (2: bf16), else as traced. O(N) the
        first time for each size, then cached."""
        gpu = getattr(acc, "kernels", None)
        engine = getattr(acc, "engine", "eager")
        elem = int(element_bytes or self.element_bytes)
        key = (
            float(tokens),
            int(seq),
            getattr(acc, "name", ""),
            float(acc.peak_flops),
            float(acc.memory_bandwidth_bytes_per_s),
            engine,
            int(tp),
            bool(decode),
            elem,
        )
        if key not in self._cache:
            if gpu is not None and self.node_ops:
                self._cache[key] = sum(self._kernel_seconds(gpu, engine, tokens, seq, tp, decode, False, elem))
            else:
                self._cache[key] = (
                    self._roofline_seconds(tokens, seq, float(acc.peak_flops), float(acc.memory_bandwidth_bytes_per_s))
                    / tp
                )
        return self._cache[key]

    def backward_seconds(
        self, tokens: float, seq: int, acc: Any, tp: int = 1, element_bytes: int | None = None
    ) -> float:
        """The backward's time for the same work (:func:`partitioner.kernels.backward_times` with
        the card's curves; twice the forward without them, the FLOP count's rule). Cached."""
        gpu = getattr(acc, "kernels", None)
        if gpu is None or not self.node_ops:
            return 2.0 * self.forward_seconds(tokens, seq, acc, tp, element_bytes=element_bytes)
        engine = getattr(acc, "engine", "eager")
        elem = int(element_bytes or self.element_bytes)
        key = (float(tokens), int(seq), getattr(acc, "name", ""), -1.0, 0.0, engine, int(tp), True, elem)
        if key not in self._cache:
            self._cache[key] = sum(self._kernel_seconds(gpu, engine, tokens, seq, tp, False, True, elem))
        return self._cache[key]

    def loss_seconds(self, tokens: float, acc: Any) -> float:
        """The loss over the vocabulary and its backward for ``tokens`` tokens (a language model's
        cross-entropy in fp32, measured; 0 for a model without a vocabulary head or a card
        without curves). O(1)."""
        gpu = getattr(acc, "kernels", None)
        if gpu is None or not self.vocab:
            return 0.0
        op = KernelOp("loss", "float32", nbytes=tokens * self.vocab)
        return 2.0 * gpu.kernel_s(op) + 2 * gpu.host_per_op_s

    def optimizer_seconds(self, params: float, optimizer: str, element_bytes: int, acc: Any) -> float:
        """One optimizer step over ``params`` parameters on one device; 0 for "none". O(1). Its
        bytes by :func:`partitioner.cost.training.step_bytes` (NOTE: [Optimizer step]): eager's
        foreach kernels on a card with measured curves, at ``FOREACH_BANDWIDTH_SHARE`` of its best
        measured bandwidth; one fused pass under "graphs" and on the roofline."""
        if params <= 0:
            return 0.0
        gpu = getattr(acc, "kernels", None)
        eager = gpu is not None and getattr(acc, "engine", "eager") == "eager"
        moved = params * step_bytes(optimizer, element_bytes, foreach=eager)
        if gpu is None:
            return moved / float(acc.memory_bandwidth_bytes_per_s)
        return moved / (gpu.best_bandwidth_bytes_per_s * (FOREACH_BANDWIDTH_SHARE if eager else 1.0))

    def _unique_ops(self) -> tuple[tuple[KernelOp, ...], tuple[int, ...]]:
        """The distinct ops of :attr:`node_ops` and each op's index among them: a model of identical
        layers has a few dozen distinct ops among thousands, each priced once. Cached. O(N)."""
        key = ("distinct ops",)
        if key not in self._cache:
            index: dict[KernelOp, int] = {}
            at = tuple(index.setdefault(op, len(index)) for op in self.node_ops)
            self._cache[key] = (tuple(index), at)
        return self._cache[key]

    def _kernel_seconds(
        self, gpu: Any, engine: str, tokens: float, seq: int, tp: int, decode: bool, backward: bool, element_bytes: int
    ) -> list[float]:
        """Each op's seconds in program order; each distinct op scaled and priced once (equal ops
        price equal: :meth:`_unique_ops`). O(N + distinct ops)."""
        r, q = tokens / self.tokens0, seq / self.seq0
        dtype = dtype_for_bytes(element_bytes).peak_key
        size = element_bytes / self.element_bytes
        # FP8 runs its matrix products in fp8 and the rest (norms, attention, pointwise) in bf16, as
        # torchtitan's float8 and Transformer Engine do
        rest = dtype_for_bytes(max(2, element_bytes)).peak_key, max(2, element_bytes) / self.element_bytes
        distinct, at = self._unique_ops()
        ops = []
        for op in distinct:
            if op.kind != "view":  # the workload's dtype, not the traced one
                kind, scale = (dtype, size) if op.kind == "matmul" else rest
                op = dataclasses.replace(op, dtype=kind, nbytes=op.nbytes * scale, fixed_bytes=op.fixed_bytes * scale)
            if op.kind == "attention" and decode:  # one query a sequence: a small kernel; the cache read apart
                op = KernelOp("copy", op.dtype, nbytes=op.m * op.k * 4 * r / tp)
            elif decode:
                op = op.scaled(r, q, tp) if op.seq_squared or op.seq_axis else op.scaled(r, 1.0, tp)
            else:
                op = op.scaled(r, q, tp)
            ops.append(op)
        if backward:
            each = kernels.backward_times(ops, gpu, padded=engine == "graphs")
            pairs = [each[i] for i in at]
            if engine == "graphs":
                return [k for _, k in pairs]
            return kernels.eager_increments([h for h, _ in pairs[::-1]], [k for _, k in pairs[::-1]])
        times = [gpu.kernel_s(op) for op in ops]
        if engine == "graphs":
            fused = [kernels.fused_s(gpu, op, t) for op, t in zip(ops, times)]
            return [fused[i] for i in at]
        host = [gpu.host_per_op_s * op.launches for op in ops]
        return kernels.eager_increments([host[i] for i in at], [times[i] for i in at])

    def _roofline_seconds(self, tokens: float, seq: int, peak_flops: float, bandwidth: float) -> float:
        ratio = seq / self.seq0
        total = 0.0
        for w, a, f, att in zip(self.node_weight_bytes, self.node_act_bytes, self.node_flops, self.node_attention):
            grow = tokens * (ratio if att else 1.0)
            total += max((w + a * grow) / bandwidth, f * grow / peak_flops)
        return total


def _grows_with_sequence(target: str) -> bool:
    """Attention's products of two activations (their FLOPs grow with tokens x sequence): attention
    in one kernel, or a batched product (the op table's ``batched``); a grouped or plain matmul
    with weights (reached through views) does not."""
    found = op_table.lookup(target)
    return found is not None and (found.is_attention or found.batched)


def profile(graph: Graph, name: str = "") -> ModelProfile:
    """The per-token figures of ``graph``. O(N + E)."""
    if not graph.op_indices:
        raise PartitionError("the graph has no operations to plan a cluster for")
    tokens0, seq0 = example_tokens(graph)
    nodes = graph.nodes
    weight_bytes = graph.parameter_bytes
    element = traced_element_bytes(graph)
    is_attr = _weight_derived(graph)
    ops = list(graph.op_indices)
    node_ops = _kernel_ops(graph, ops, is_attr, seq0)
    w_bytes, a_bytes, flops, att = _node_costs(graph, ops, is_attr, tokens0, seq0)
    blocks = repeated_blocks(graph)
    expert_params, experts, moe_layers = moe_experts(graph)
    return ModelProfile(
        name=name or graph.name,
        tokens0=tokens0,
        seq0=seq0,
        weight_bytes=int(weight_bytes),
        param_count=int(weight_bytes // element),
        element_bytes=element,
        layers=max(1, len(blocks)),
        hidden_bytes_per_token=_hidden_bytes_per_token(graph, ops, blocks, tokens0),
        kv_bytes_per_token=_kv_bytes_per_token(graph, ops, tokens0),
        act_bytes_per_token=sum(nodes[v].output_bytes for v in ops if not is_attr[v]) / tokens0,
        flops_per_token=sum(flops),
        attention_flops_per_token=sum(f for f, t in zip(flops, att) if t),
        node_weight_bytes=w_bytes,
        node_act_bytes=a_bytes,
        node_flops=flops,
        node_attention=att,
        node_ops=node_ops,
        vocab=_vocab(graph, ops, node_ops),
        expert_param_count=expert_params,
        experts=experts,
        experts_per_token=graph.model_info.experts_per_token if experts else 0,
        moe_layers=moe_layers,
    )


def _weight_derived(graph: Graph) -> list[bool]:
    """Whether each node is weight-derived (NOTE: [Scaling the traced graph]): attributes, and what
    ops without FLOPs make from them as their first input (a transpose, an expert's weights
    gathered by index): their bytes do not grow with the tokens. O(N + E)."""
    nodes = graph.nodes
    is_attr = [nd.op == "get_attr" for nd in nodes]
    for v in graph.op_indices:
        nd = nodes[v]
        # An embedding lookup takes its table first but gathers rows by the token ids: its output
        # grows with the tokens (and so does everything computed from it).
        lookup = nd.is_embedding or "embedding" in nd.target
        if (
            nd.flops == 0
            and nd.inputs
            and is_attr[nd.inputs[0]]
            and not lookup
            and _reads_no_activation(graph, v, is_attr)
        ):
            is_attr[v] = True
    return is_attr


def _node_costs(
    graph: Graph, ops: Sequence[int], is_attr: Sequence[bool], tokens0: int, seq0: int
) -> tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...], tuple[bool, ...]]:
    """Each op's roofline figures (NOTE: [Scaling the traced graph]): (weight bytes read,
    activation bytes per token, FLOPs per token at seq0, whether it grows with the sequence); a
    weight-derived op has no work that grows with the tokens. O(N + E)."""
    nodes = graph.nodes
    w_bytes: list[int] = []
    a_bytes: list[float] = []
    flops: list[float] = []
    att: list[bool] = []
    for v in ops:
        nd = nodes[v]
        if is_attr[v]:
            w_bytes.append(0)
            a_bytes.append(0.0)
            flops.append(0.0)
            att.append(False)
            continue
        reads_weight = nd.param_bytes > 0 or any(is_attr[u] for u in graph.preds[v])
        w = nd.param_bytes + sum(graph.output_bytes[u] for u in graph.preds[v] if is_attr[u])
        a = nd.output_bytes + sum(graph.output_bytes[u] for u in graph.preds[v] if not is_attr[u])
        w_bytes.append(w)
        a_bytes.append(a / tokens0)
        flops.append(nd.flops / tokens0)
        att.append(seq0 > 1 and not reads_weight and _grows_with_sequence(nd.target))
    return tuple(w_bytes), tuple(a_bytes), tuple(flops), tuple(att)


def _hidden_bytes_per_token(graph: Graph, ops: Sequence[int], blocks: dict[str, list[int]], tokens0: int) -> float:
    """What crosses a block boundary per token: the median over the boundaries between the
    repeated ``blocks`` of the bytes made before and used after it; 0 with fewer than two blocks.
    O(blocks x (N + E))."""
    if len(blocks) < 2:
        return 0.0
    position = {v: i for i, v in enumerate(ops)}
    starts = sorted(min(position[v] for v in vs) for vs in blocks.values())
    crossing = []
    for s in starts[1:]:
        cut = sum(graph.output_bytes[v] for v in ops[:s] if any(position.get(u, -1) >= s for u in graph.users[v]))
        crossing.append(cut)
    crossing.sort()
    return crossing[len(crossing) // 2] / tokens0


def _kv_bytes_per_token(graph: Graph, ops: Sequence[int], tokens0: int) -> float:
    """The KV cache one token adds: the outputs of every layer's key and value projections (two
    thirds of GPT-2's fused ``c_attn``). O(N)."""
    kv = 0.0
    for v in ops:
        nd = graph.nodes[v]
        leaf = nd.module_path.rsplit(".", 1)[-1]
        if leaf in ("k_proj", "v_proj", "key", "value") and nd.flops:
            kv += nd.output_bytes / tokens0
        elif leaf == "c_attn" and nd.flops:
            kv += nd.output_bytes * 2 / 3 / tokens0
    return kv


def _vocab(graph: Graph, ops: Sequence[int], node_ops: Sequence[KernelOp]) -> int:
    """The vocabulary of a language model: the width of the matrix product that makes its last
    output when the model also looks up embeddings (a head over the tokens), else 0."""
    if not any(graph.nodes[v].is_embedding or "embedding" in graph.nodes[v].target for v in ops):
        return 0
    for op in reversed(node_ops):
        if op.kind == "matmul":
            return int(op.n) if op.n >= 1000 else 0
        if op.kind not in ("view", "copy"):
            return 0
    return 0


def _reads_no_activation(graph: Graph, v: int, is_attr: Sequence[bool]) -> bool:
    """Whether every input of ``v`` that is an op output is weight-derived (placeholders holding
    token ids or positions count as activations)."""
    return all(is_attr[u] or graph.nodes[u].op == "get_attr" for u in graph.preds[v])


def _kernel_ops(graph: Graph, ops: Sequence[int], is_attr: Sequence[bool], seq0: int) -> tuple[KernelOp, ...]:
    """Each op of ``ops`` as a :class:`~partitioner.kernels.KernelOp` at the traced size, marked
    with how it grows (NOTE: [Scaling the traced graph]): a weight-derived op not at all, a
    product of two activations along its sequence axis, an op on (sequence x sequence) scores or
    masks with the tokens times the sequence. O(N)."""
    causal = gpu_ops.is_causal(graph)
    out = []
    for v in ops:
        nd = graph.nodes[v]
        op = gpu_ops.kernel_op(graph, v, gpu_ops.op_kind(nd.op, nd.target, gpu_ops.module_kind(graph, nd)), causal)
        if is_attr[v]:
            op = dataclasses.replace(op, fixed_bytes=op.nbytes) if op.kind != "matmul" else op
        elif op.kind == "matmul" and seq0 > 1 and nd.param_bytes == 0 and not any(is_attr[u] for u in graph.preds[v]):
            axis = "n" if round(op.n) == seq0 else "k" if round(op.k) == seq0 else ""
            op = dataclasses.replace(op, seq_axis=axis)
        elif op.kind not in ("matmul", "attention") and seq0 > 1:
            shape = nd.shape or ()
            if len(shape) >= 2 and shape[-1] == shape[-2] == seq0:
                op = dataclasses.replace(op, seq_squared=True)
        out.append(op)
    return tuple(out)


def with_min_cut(p: ModelProfile, results: Sequence[RematResult]) -> ModelProfile:
    """``p`` with functorch's min-cut at each budget of ``results`` (:func:`partitioner.remat.sweep`
    on the same graph) as recomputation choices: the saved activations as a share of every op
    output of the forward (what recomputation "none" keeps), the recomputed FLOPs as a share of the
    forward's. Measured at the traced tokens; the shares are taken to hold at any batch and
    sequence (they do where the saved values grow with the tokens as the rest does; attention's
    sequence-squared scores are not saved by sdpa). O(budgets)."""
    acts = p.act_bytes_per_token * p.tokens0
    flops = p.flops_per_token * p.tokens0
    if acts <= 0 or flops <= 0:
        raise PartitionError("the graph has no activations or FLOPs to recompute")
    options = tuple(
        sorted((float(r.budget), min(1.0, r.saved_activation_bytes / acts), r.recompute_flops / flops) for r in results)
    )
    return dataclasses.replace(p, min_cut=options, _cache={})


def divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]
