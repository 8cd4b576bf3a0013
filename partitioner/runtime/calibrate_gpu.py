"""Kept for code outside this repository that imports ``partitioner.runtime.calibrate_gpu``: the GPU
calibration moved to :mod:`partitioner.calibration.gpu` (issue 55). Import from there; these names
are the same objects."""

from __future__ import annotations

from partitioner.calibration.gpu import QUICK_SHAPES, SHAPES, Shapes, calibrate_gpu, measure_rows, timer

__all__ = ["measure_rows", "calibrate_gpu", "timer", "Shapes", "SHAPES", "QUICK_SHAPES"]
