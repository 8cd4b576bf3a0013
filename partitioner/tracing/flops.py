"""FLOP formulas torch's counter lacks, and the ops a trace could not price.

``torch.utils.flop_counter`` has no formula for ``aten._grouped_mm``, the grouped matmul that
Hugging Face's mixture-of-experts layers (Mixtral, Qwen-MoE, ...) run their experts with: left
alone, every expert counts as free. The formula here follows the op's definition: every row of
the left operand meets the matrix of its group, so a 2-D (M, K) times a 3-D (G, K, N) costs
2 M K N, a 3-D (G, M, K) times (G, K, N) 2 G M K N, and a 2-D (M, K) times a 2-D (K, N) with
offsets along K 2 M K N. transformers' own fallback for it (``transformers::grouped_mm_fallback``,
what its MoE layers call on CPU) takes (S, K) tokens sorted by expert and (E, K, N) weights:
2 S K N. Attention on CPU runs as ``aten._scaled_dot_product_flash_attention_for_cpu``, which the
counter also lacks: torch's own ``sdpa_flop_count`` prices it as it prices the GPU kernels.
Registered once, on first use; torch's own formula wins where it has one.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Iterable

from partitioner import optional
from partitioner.op_table import names, op_name, stems

__all__ = ["register_formulas", "unpriced", "describe_unpriced", "MATMUL_LIKE"]

# The ops that do matmul-sized work (the op table's matrix products and attention): one counted as
# free by the counter is reported.
MATMUL_LIKE = names(kernel="matmul") | names(kernel="attention")

_DONE = False


def _grouped_mm_flops(a_shape: Any, b_shape: Any, *args: Any, **kwargs: Any) -> int:
    a, b = list(a_shape), list(b_shape)
    if len(a) == 2 and len(b) == 3:
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 3 and len(b) == 3:
        return 2 * a[0] * a[1] * a[2] * b[2]
    if len(a) == 3 and len(b) == 2:
        return 2 * a[0] * a[1] * a[2] * b[1]
    return 2 * a[0] * a[1] * b[-1]


def register_formulas() -> None:
    """Register the formulas above with ``torch.utils.flop_counter`` (once per process)."""
    global _DONE
    if _DONE:
        return
    import torch
    from torch.utils.flop_counter import flop_registry, register_flop_formula, sdpa_flop_count

    def grouped_mm(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return _grouped_mm_flops(a_shape, b_shape)

    def cpu_attention(q: Any, k: Any, v: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return int(sdpa_flop_count(q, k, v))

    ops = [
        (getattr(torch.ops.aten, "_grouped_mm", None), grouped_mm),
        (getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None), cpu_attention),
    ]
    if "transformers" in sys.modules:  # its custom op exists once its MoE integration is imported
        try:
            optional.load("transformers.integrations.moe")  # NOTE: [Optional imports and threads]

            ops.append((torch.ops.transformers.grouped_mm_fallback, grouped_mm))
        except (ImportError, AttributeError, RuntimeError):
            pass
        _DONE = True  # a model without transformers may be traced first: look again next time
    for op, formula in ops:
        if op is not None and op not in flop_registry:
            register_flop_formula(op)(formula)  # type: ignore[arg-type]


def unpriced(targets_and_flops: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """The matmul-like ops (by target name: one of :data:`MATMUL_LIKE` or a variant,
    :func:`partitioner.op_table.stems`) that came out at zero FLOPs, with their counts, most
    frequent first."""
    found: Counter[str] = Counter()
    for target, flops in targets_and_flops:
        if flops == 0 and stems(op_name(target), MATMUL_LIKE):
            found[target] += 1
    return tuple(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


def describe_unpriced(ops: tuple[tuple[str, int], ...]) -> str:
    """``'3 ops with no FLOP formula (counted as free): aten::foo (2), aten::bar (1)'``."""
    count = sum(n for _, n in ops)
    shown = ", ".join(f"{t} ({n})" for t, n in ops[:5]) + (" ..." if len(ops) > 5 else "")
    return (
        f"{count} op{'s' if count != 1 else ''} with no FLOP formula (counted as free, so compute "
        f"times are low): {shown}"
    )
