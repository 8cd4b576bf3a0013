"""Which box of the collapsed graph a node falls in, and which sibling boxes fold into one
(NOTE: [Folded blocks]): the keys :func:`partitioner.draw.collapse.collapse` groups nodes by."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Collection, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from partitioner.graph import Graph

__all__ = ["FOLD", "block_ancestors", "box_key", "numbered", "fold_runs"]

FOLD = "fold:"  # key prefix of a box of folded repeated blocks


def block_ancestors(graph: "Graph") -> set[str]:
    """Proper prefixes of the numbered blocks' paths (``model`` for ``model.layers.3``): a node in
    such a module but in no block is boxed one level deeper, so the wrapper's own ops (embedding,
    final norm) are boxes of their own rather than one box before and after every block."""
    if graph in _ANCESTORS:
        return _ANCESTORS[graph]
    found: set[str] = set()
    for path in {graph.nodes[v].module_path for v in graph.op_indices}:
        parts = path.split(".") if path else []
        cut = next((i for i, c in enumerate(parts) if c.isdigit()), 0)
        found.update(".".join(parts[:k]) for k in range(1, cut))
    _ANCESTORS[graph] = found
    return found


def box_key(graph: "Graph", v: int, expanded: Collection[str], ancestors: Collection[str] = ()) -> tuple[str, bool]:
    """(key, expandable) of node v's box under ``expanded``."""
    nd = graph.nodes[v]
    parts = nd.module_path.split(".") if nd.module_path else []
    if not parts:
        return f"node:{nd.name}", False
    cut = next((i + 1 for i, c in enumerate(parts) if c.isdigit()), 1)
    key = ".".join(parts[:cut])
    while key in ancestors and cut < len(parts):
        cut += 1
        key = ".".join(parts[:cut])
    while key in expanded:
        if cut >= len(parts):
            return f"node:{nd.name}", False
        cut += 2 if cut + 1 < len(parts) and parts[cut + 1].isdigit() else 1  # a list's items, not the list
        key = ".".join(parts[:cut])
    return key, True


# NOTE: [Folded blocks]
# Two sibling boxes are the same block when their keys are P.i and P.(i+1), the model recorded the
# same module class for both (graph.model_info; none recorded counts as equal), and their members
# have the same op structure: the same (op, target below the block, module path below the block, inputs inside
# the block by position, count of inputs from outside) in topological order. Shapes and bytes may
# differ; the folded box sums the real members, so its figures are exact. A run of two or more
# adjacent same blocks (no other box between them in topological order) folds. Signatures are
# computed once per candidate box: O(N) over the graph.
# A graph's block signatures and block ancestors, kept while the graph lives: every view of the
# same model (expand, search, colour by) asks for the same ones.
_SIGNATURES: "weakref.WeakKeyDictionary[Graph, dict[tuple[str, int, int], tuple[object, ...]]]" = (
    weakref.WeakKeyDictionary()
)
_ANCESTORS: "weakref.WeakKeyDictionary[Graph, set[str]]" = weakref.WeakKeyDictionary()


def _signature(graph: "Graph", key: str, members: Sequence[int]) -> tuple[object, ...]:
    known = _SIGNATURES.setdefault(graph, {})
    memo = (key, len(members), members[0])
    if memo not in known:
        known[memo] = _signature_of(graph, key, members)
    return known[memo]


def _signature_of(graph: "Graph", key: str, members: Sequence[int]) -> tuple[object, ...]:
    position = {v: i for i, v in enumerate(members)}
    skip = len(key)
    out: list[object] = [graph.model_info.module_classes.get(key, ())[:1]]
    for v in members:
        nd = graph.nodes[v]
        inside = tuple(position[u] for u in nd.inputs if u in position)
        target = nd.target[skip:] if nd.target.startswith(key + ".") else nd.target  # call_module: its path
        out.append((nd.op, target, nd.module_path[skip:], inside, len(nd.inputs) - len(inside)))
    return tuple(out)


def numbered(key: str) -> tuple[str, int] | None:
    parent, _, last = key.rpartition(".")
    return (parent, int(last)) if parent and last.isdigit() and not key.startswith(("node:", "run:")) else None


def fold_runs(graph: "Graph", order: Sequence[str], members: Sequence[Sequence[int]]) -> list[list[int]]:
    """Boxes (indices into ``order``) grouped: each run of folded blocks one list, others alone."""
    runs: list[list[int]] = []
    signatures: dict[int, tuple[object, ...]] = {}

    def same(a: int, b: int) -> bool:
        na, nb = numbered(order[a]), numbered(order[b])
        if na is None or nb is None or na[0] != nb[0] or nb[1] != na[1] + 1 or len(members[a]) != len(members[b]):
            return False
        for box in (a, b):
            if box not in signatures:
                signatures[box] = _signature(graph, order[box], members[box])
        return signatures[a] == signatures[b]

    for b in range(len(order)):
        if runs and same(runs[-1][-1], b):
            runs[-1].append(b)
        else:
            runs.append([b])
    return runs
