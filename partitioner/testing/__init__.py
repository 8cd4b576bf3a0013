"""Test oracles: synthetic random graphs and the adapter that runs torch's own
``accelerator_partitioner`` on our graphs. Not part of the public API (``partitioner.__all__``)."""

from __future__ import annotations

from partitioner.testing.synthetic import synthetic_graph

__all__ = ["synthetic_graph"]
