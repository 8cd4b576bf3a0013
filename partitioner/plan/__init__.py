"""Plans: the immutable records (:class:`Plan`, :class:`Partition`, :class:`Edge`), their build and
JSON round trip with schema upgrades, typed validation, and diffs between two plans. Torch-free."""

from __future__ import annotations

from partitioner.plan.build import build_plan, rescore
from partitioner.plan.records import (
    SCHEMA_VERSION,
    Edge,
    Partition,
    Plan,
    PlanFormatError,
    Provenance,
)

__all__ = ["SCHEMA_VERSION", "Edge", "Partition", "Plan", "PlanFormatError", "Provenance", "build_plan", "rescore"]
