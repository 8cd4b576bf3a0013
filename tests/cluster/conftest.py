"""The cluster tests' shared fixture: Llama-3-8B's block at Meta's widths, traced once a session."""

from __future__ import annotations

import pytest

import partitioner
import sample_models
from partitioner import cluster


@pytest.fixture(scope="session")
def llama_4_layers() -> cluster.ModelProfile:
    """Llama-3-8B's block at Meta's widths, 4 layers, in bf16 (seconds to trace: once, for the
    serving and FP8 tests alike)."""
    module, inputs, kwargs = sample_models.load("hf:llama-3-8b", overrides={"num_hidden_layers": 4, "dtype": "bf16"})
    return cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs))
