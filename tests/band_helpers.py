"""Cluster answers given a band by hand, for the tests of how the command line and the pages write
bands (the library's own bands are tested in tests/cluster/test_training_answer.py)."""

from __future__ import annotations

import dataclasses

from partitioner import cluster


def banded(r: cluster.LayoutResult, low: float | None, high: float, assumes: tuple[str, ...]) -> cluster.LayoutResult:
    """``r`` with a band of -``low`` to +``high`` of its step (``low`` None: no band, as the library
    leaves one it has not computed) and ``assumes``."""
    band_s = (0.0, 0.0) if low is None else (r.step_s * (1 - low), r.step_s * (1 + high))
    return dataclasses.replace(r, band_s=band_s, assumes=assumes)


def banded_plan(
    found: cluster.ClusterPlan, low: float | None, high: float, assumes: tuple[str, ...]
) -> cluster.ClusterPlan:
    """``found`` with every answer banded as :func:`banded` bands it (one record a layout)."""
    one = {r.layout: banded(r, low, high, assumes) for r in found.fitting}

    def b(r: cluster.LayoutResult | None) -> cluster.LayoutResult | None:
        return None if r is None else one.get(r.layout, banded(r, low, high, assumes))

    return dataclasses.replace(
        found,
        fitting=tuple(one.values()),
        fewest_devices=b(found.fewest_devices),
        fastest=b(found.fastest),
        cheapest=b(found.cheapest),
        front=tuple(map(b, found.front)),
        by_devices={n: b(r) for n, r in found.by_devices.items()},
        knee=b(found.knee),
    )
