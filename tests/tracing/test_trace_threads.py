"""The library's trace is safe from threads (NOTE: [Tracing and threads]): N threads loading and
tracing sample models at once each get the graph a serial trace gives, node for node, with the
same weights (the traced module's outputs equal the serial one's)."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

import sample_models

# Small models with enough modules that traces overlap when they run at once.
MODELS = [
    ("mlp", {"n_layer": 40, "hidden": 16, "in_features": 16, "out_features": 16, "batch_size": 2}),
    (
        "transformer",
        {"n_layer": 2, "n_embd": 32, "n_head": 2, "block_size": 8, "seq_len": 8, "vocab_size": 64, "batch_size": 1},
    ),
]
THREADS = 8


def _trace(spec: str, overrides: dict):
    loaded = sample_models.load(spec, overrides)
    return sample_models.trace_loaded(spec, overrides, loaded, spec)


def test_threads_tracing_at_once_each_get_the_serial_graph():
    serial = {spec: _trace(spec, overrides) for spec, overrides in MODELS}
    jobs = [MODELS[i % len(MODELS)] for i in range(THREADS)]
    results: list[object] = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def work(i: int) -> None:
        spec, overrides = jobs[i]
        start.wait()
        try:
            results[i] = _trace(spec, overrides)
        except Exception as exc:  # noqa: BLE001 - recorded and asserted below, with the thread's job
            results[i] = exc

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, as a busy server does: races show at once
    try:
        for _ in range(2):
            threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            assert not any(t.is_alive() for t in threads), "a trace never finished"
            for (spec, _), graph in zip(jobs, results):
                assert not isinstance(graph, Exception), f"{spec}: {graph!r}"
                want = serial[spec]
                assert graph.nodes == want.nodes, f"{spec}: {len(graph.nodes)} nodes, serially {len(want.nodes)}"
                assert graph.fingerprint() == want.fingerprint()
                inputs = want.example_inputs
                with torch.no_grad():
                    torch.testing.assert_close(graph.graph_module(*inputs), want.graph_module(*inputs))
    finally:
        sys.setswitchinterval(switch)


@pytest.mark.parametrize("spec", ["mlp"])
def test_the_trace_lock_is_reentrant(spec):
    """A caller holding the lock (the app around its cache) may trace inside it."""
    from partitioner.tracing.lock import TRACE_LOCK

    with TRACE_LOCK:
        graph = _trace(spec, {"n_layer": 2})
    assert len(graph.op_indices) == 3
