"""Which module owns each parameter and where it runs in a traced graph, for tensor parallelism.

Works on both kinds of trace: a ``symbolic_trace`` graph calls modules (``call_module`` nodes); an
exported graph (``torch.export``, Hugging Face models) has none, so a module's call is the run of
op nodes whose ``module_path`` is the module, and its kind comes from the classes the trace
recorded of the original model (:class:`partitioner.graph.ModelInfo`). Torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from partitioner.errors import ShardingError
from partitioner.graph import Graph
from partitioner.op_table import lookup

__all__ = [
    "Call",
    "module_kinds",
    "module_calls",
    "OUT_AXIS",
    "tied_elsewhere",
    "heads_after",
    "model_plan_styles",
    "linear_children",
]

# The weight axis that holds a layer's output features: nn.Linear's weight is (out, in), GPT-2's
# Conv1D's is (in, out) (transposed), an Embedding's table is (rows, features).
OUT_AXIS = {"linear": 0, "conv1d": 1, "embedding": 1}


@dataclass(frozen=True)
class Call:
    """Where a module runs: its first node (``entry``), its output node (``out``) and the node
    that feeds it (``source``; None when the input is not a node of the graph)."""

    entry: int
    out: int
    source: int | None


def module_kinds(graph: Graph) -> dict[str, str]:
    """Module path -> "linear" / "conv1d" / "embedding" for the model's Linear, Conv1D (GPT-2's
    transposed linear) and Embedding layers, by the classes the trace recorded of the original
    model, else the traced module's. O(modules)."""
    classes = graph.model_info.module_classes
    if not classes:
        gm = graph.graph_module
        if gm is None:
            raise ShardingError(f"graph {graph.name!r} has no traced module; use partitioner.trace")
        classes = {path: tuple(c.__name__ for c in type(m).__mro__) for path, m in gm.named_modules()}
    kinds = {}
    for path, names in classes.items():
        if "Linear" in names:
            kinds[path] = "linear"
        elif "Conv1D" in names:
            kinds[path] = "conv1d"
        elif "Embedding" in names or "EmbeddingBag" in names:
            kinds[path] = "embedding"
    return kinds


def module_calls(graph: Graph, kinds: Mapping[str, str]) -> dict[str, Call]:
    """Module path -> its first call: a ``call_module`` node (symbolic_trace), or in an exported
    graph the op nodes whose module path is the module (a Linear is one ``linear`` op, a Conv1D
    ``view, addmm, view``). O(N)."""
    found: dict[str, Call] = {}
    members: dict[str, list[int]] = {}
    for v, nd in enumerate(graph.nodes):
        if nd.op == "call_module" and nd.target in kinds and nd.target not in found:
            found[nd.target] = Call(v, v, _source(graph, v))
        elif nd.is_op and nd.op != "call_module" and nd.module_path in kinds:
            members.setdefault(nd.module_path, []).append(v)
    for path, nodes in members.items():
        if path in found:
            continue
        inside = set(nodes)
        entry = nodes[0]
        run = [entry]  # the first call: nodes reached from the entry without leaving the module
        for v in nodes[1:]:
            if any(u in inside and u in run for u in graph.preds[v]):
                run.append(v)
        out = next((v for v in run if any(u not in inside for u in graph.users[v])), run[-1])
        found[path] = Call(entry, out, _source(graph, entry))
    return found


def _source(graph: Graph, v: int) -> int | None:
    for u in graph.preds[v]:
        if graph.nodes[u].op != "get_attr":
            return u
    return None


def tied_elsewhere(graph: Graph, params: Mapping[str, object]) -> dict[str, str]:
    """Parameter -> the other parameter name it is also (``_tied_weights_keys`` where the tie is
    real: the tied name is no parameter of its own, e.g. GPT-2's lm_head.weight is wte.weight)."""
    out: dict[str, str] = {}
    for tied, source in graph.model_info.tied_weights.items():
        if source in params and tied not in params:
            out[source] = tied
    return out


def heads_after(graph: Graph, out: int, features: int) -> int | None:
    """The number of heads ``out``'s features are viewed into (the next view whose last two axes
    multiply to ``features``), or None when the output is not viewed into heads directly (a fused
    q/k/v projection splits it first). O(users)."""
    current = out
    for _ in range(3):
        users = graph.users[current]
        if len(users) != 1:
            return None
        nd = graph.nodes[users[0]]
        op = lookup(nd.target)  # a reshape into heads, or a cast or copy on the way (partitioner.op_table)
        shape = nd.shape
        if op is not None and op.shape == "reshape" and shape and len(shape) >= 2 and shape[-2] * shape[-1] == features:
            return shape[-2]
        if op is None or op.shape != "same":
            return None
        current = users[0]
    return None


def model_plan_styles(graph: Graph) -> dict[str, str]:
    """Module path -> "colwise" / "rowwise" as the model's own plan (``base_model_tp_plan``, paths
    relative to the base model) says of its Linear and Embedding layers; entries naming other
    things (experts' packed weights, "gather", ...) are left out. O(modules x plan)."""
    plan = graph.model_info.tp_plan
    if not plan:
        return {}
    classes = graph.model_info.module_classes
    bases = sorted((p for p, names in classes.items() if p and "PreTrainedModel" in names), key=len)
    prefix = f"{bases[0]}." if bases else ""
    patterns = [(re.compile(re.escape(pat).replace(r"\*", r"[^.]+") + r"\Z"), style) for pat, style in plan.items()]
    kinds = module_kinds(graph)
    out: dict[str, str] = {}
    for path in classes:
        if path not in kinds or not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        for pattern, style in patterns:
            if pattern.match(rel):
                base = style.split("_")[0] if style.startswith(("colwise", "rowwise")) else style
                if style == "embedding_rowwise":
                    base = "rowwise"
                if base in ("colwise", "rowwise"):
                    out[path] = base
                break
    return out


def linear_children(kinds: Mapping[str, str], parent: str) -> list[str]:
    """The Linear (or Conv1D) layers directly inside ``parent``."""
    return sorted(p for p, k in kinds.items() if k != "embedding" and p.rpartition(".")[0] == parent)
