"""torch.fx's ``accelerator_partitioner``, and beyond: the partition modes (one public module each;
the machinery they share is private: ``_base``, ``_fills``, ``_search``, ``_segments``,
``_torch_merge``, ``_cpsat``), the registry (:mod:`.modes`), the front door (:mod:`.api`:
partition, evaluate, check), comparisons of modes and an algorithm's steps as data. Torch-free."""

from __future__ import annotations

from partitioner.accelerator.api import evaluate_plan, partition
from partitioner.accelerator.check import check_plan
from partitioner.accelerator.modes import DEFAULT_MODE, DESCRIPTIONS, MODES, get_mode

__all__ = ["partition", "evaluate_plan", "check_plan", "MODES", "DEFAULT_MODE", "DESCRIPTIONS", "get_mode"]
