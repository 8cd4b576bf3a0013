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
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from partitioner.errors import PartitionError, ShardingError
from partitioner.graph import Graph
from partitioner.remat.memory import RematResult
from partitioner.sharding.specs import parameter_shapes

__all__ = ["ModelProfile", "profile", "with_min_cut", "DTYPE_BYTES"]

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "float8_e4m3fn": 1}
_BLOCK = re.compile(r"^(.*?)\.?(\d+)(?:\.|$)")


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
    _cache: dict[tuple[float, int, float, float], float] = field(default_factory=dict, compare=False, repr=False)

    def forward_flops(self, tokens: float, seq: int) -> float:
        """Forward FLOPs for ``tokens`` tokens in sequences of ``seq``."""
        linear = self.flops_per_token - self.attention_flops_per_token
        return tokens * (linear + self.attention_flops_per_token * seq / self.seq0)

    def forward_seconds(self, tokens: float, seq: int, acc: Any, tp: int = 1) -> float:
        """The forward time of ``tokens`` tokens on one device of ``acc`` (an
        :class:`~partitioner.hardware.Accelerator`), the work split ``tp`` ways (NOTE: [Scaling
        the traced graph]). O(N) the first time for each size, then cached."""
        peak_flops, bandwidth = float(acc.peak_flops), float(acc.memory_bandwidth_bytes_per_s)
        key = (float(tokens), int(seq), peak_flops, bandwidth)
        if key not in self._cache:
            ratio = seq / self.seq0
            total = 0.0
            for w, a, f, att in zip(self.node_weight_bytes, self.node_act_bytes, self.node_flops,
                                    self.node_attention):
                grow = tokens * (ratio if att else 1.0)
                total += max((w + a * grow) / bandwidth, f * grow / peak_flops)
            self._cache[key] = total
        return self._cache[key] / tp


def _tokens(graph: Graph) -> tuple[int, int]:
    """(tokens, sequence length) of the traced example: the first input's first two dimensions
    when it is a 2-D batch of ids (or 3-D embeddings), else its first dimension and 1."""
    for node in graph.nodes:
        if node.op == "placeholder" and node.shape:
            shape = node.shape
            ids = (node.dtype or "").startswith(("int", "uint"))
            if (len(shape) == 2 and ids) or len(shape) == 3:
                return max(1, shape[0] * shape[1]), max(1, shape[1])
            return max(1, shape[0]), 1
    return 1, 1


def _blocks(graph: Graph) -> dict[str, list[int]]:
    """The most repeated block container's blocks: block path -> op node indices."""
    best: dict[str, dict[str, list[int]]] = {}
    for v in graph.op_indices:
        m = _BLOCK.match(graph.nodes[v].module_path)
        if m:
            best.setdefault(m.group(1), {}).setdefault(f"{m.group(1)}.{m.group(2)}", []).append(v)
    if not best:
        return {}
    return max(best.values(), key=len)


_ATTENTION = ("scaled_dot_product", "attention", "bmm", "matmul", "einsum", "baddbmm")


def _grows_with_sequence(target: str) -> bool:
    """Attention's products of two activations (their FLOPs grow with tokens x sequence); a
    grouped or plain matmul with weights (reached through views) does not."""
    base = target.split("::")[-1].lower()
    return any(a in base for a in _ATTENTION) and "grouped" not in base


def profile(graph: Graph, name: str = "") -> ModelProfile:
    """The per-token figures of ``graph``. O(N + E)."""
    if not graph.op_indices:
        raise PartitionError("the graph has no operations to plan a cluster for")
    tokens0, seq0 = _tokens(graph)
    nodes = graph.nodes
    weight_bytes = graph.parameter_bytes
    dtypes = Counter(str(nd.dtype).removeprefix("torch.") for nd in nodes
                     if str(nd.dtype).removeprefix("torch.") in DTYPE_BYTES)
    element = DTYPE_BYTES[dtypes.most_common(1)[0][0]] if dtypes else 4
    # Weight-derived values (NOTE: [Scaling the traced graph]): attributes, and what ops without
    # FLOPs make from them as their first input (a transpose, an expert's weights gathered by
    # index): their bytes do not grow with the tokens.
    is_attr = [nd.op == "get_attr" for nd in nodes]
    for v in graph.op_indices:
        nd = nodes[v]
        if nd.flops == 0 and nd.inputs and is_attr[nd.inputs[0]]:
            is_attr[v] = True
    ops = list(graph.op_indices)
    w_bytes, a_bytes, flops, att = [], [], [], []
    for v in ops:
        nd = nodes[v]
        if is_attr[v]:  # weight-derived: no work that grows with the tokens
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
    blocks = _blocks(graph)
    layers = max(1, len(blocks))
    position = {v: i for i, v in enumerate(ops)}
    hidden = 0.0
    if len(blocks) >= 2:
        starts = sorted(min(position[v] for v in vs) for vs in blocks.values())
        crossing = []
        for s in starts[1:]:
            cut = sum(graph.output_bytes[v] for v in ops[:s]
                      if any(position.get(u, -1) >= s for u in graph.users[v]))
            crossing.append(cut)
        crossing.sort()
        hidden = crossing[len(crossing) // 2] / tokens0
    kv = 0.0
    for v in ops:
        path = nodes[v].module_path
        leaf = path.rsplit(".", 1)[-1]
        if leaf in ("k_proj", "v_proj", "key", "value") and nodes[v].flops:
            kv += nodes[v].output_bytes / tokens0
        elif leaf == "c_attn" and nodes[v].flops:
            kv += nodes[v].output_bytes * 2 / 3 / tokens0
    expert_params, experts, moe_layers = _experts(graph)
    return ModelProfile(
        name=name or graph.name, tokens0=tokens0, seq0=seq0, weight_bytes=int(weight_bytes),
        param_count=int(weight_bytes // element), element_bytes=element, layers=layers,
        hidden_bytes_per_token=hidden, kv_bytes_per_token=kv,
        act_bytes_per_token=sum(nodes[v].output_bytes for v in ops if not is_attr[v]) / tokens0,
        flops_per_token=sum(flops), attention_flops_per_token=sum(f for f, t in zip(flops, att) if t),
        node_weight_bytes=tuple(w_bytes), node_act_bytes=tuple(a_bytes), node_flops=tuple(flops),
        node_attention=tuple(att), expert_param_count=expert_params, experts=experts,
        experts_per_token=graph.model_info.experts_per_token if experts else 0, moe_layers=moe_layers)


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
    options = tuple(sorted((float(r.budget), min(1.0, r.saved_activation_bytes / acts), r.recompute_flops / flops)
                           for r in results))
    return dataclasses.replace(p, min_cut=options, _cache={})


_EXPERT = re.compile(r"^(.*)\.experts\.(?:(\d+)\.)?")


def _experts(graph: Graph) -> tuple[int, int, int]:
    """(expert parameters, experts per MoE layer, MoE layers) from the parameters' names and shapes:
    ``...experts.N.w1.weight`` (one module an expert) or ``...experts.gate_up_proj`` packed
    (experts, out, in). (0, 0, 0) for a dense model or a graph without its module. O(parameters)."""
    try:
        params = parameter_shapes(graph)
    except ShardingError:
        return 0, 0, 0
    count, layers, per_layer = 0, set(), {}  # type: tuple[int, set[str], dict[str, set[int]]]
    for name, (shape, _, _) in params.items():
        m = _EXPERT.match(name)
        if not m:
            continue
        n = 1
        for d in shape:
            n *= d
        count += n
        layers.add(m.group(1))
        found = per_layer.setdefault(m.group(1), set())
        if m.group(2) is not None:
            found.add(int(m.group(2)))
        elif len(shape) == 3:
            found.update(range(shape[0]))
    experts = max((len(v) for v in per_layer.values()), default=0)
    return (count, experts, len(layers)) if experts > 1 else (0, 0, 0)


def divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (limit or n) + 1) if n % d == 0]

