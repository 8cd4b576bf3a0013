"""A model whose weights are on the meta device is traced on meta copies of its example inputs
(NOTE: [Meta weights, meta inputs]: torch 2.11's export refuses meta weights with CPU inputs), and
that path traces every hf: preset to the graph CPU inputs give where torch takes both (2.13)."""

from __future__ import annotations

import pytest
import torch

from partitioner.errors import TraceError
from partitioner.tracing import capture, tracer

transformers = pytest.importorskip("transformers")

from sample_models import _hf  # noqa: E402 - after the importorskip


def _small(preset: str) -> dict:
    """The preset's own config with one layer (two for an encoder-decoder's halves), so the test
    traces every architecture in seconds."""
    return {field: 1 for field in _hf.layer_fields(preset)}


def _devices(values) -> set[str]:
    return {v.device.type for v in torch.utils._pytree.tree_leaves(values) if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("preset", sorted(_hf.PRESETS))
def test_meta_weights_trace_on_meta_inputs_to_the_cpu_inputs_graph(preset, monkeypatch):
    module, inputs, kwargs = _hf.load_hf(preset, _small(preset))
    module = module.to("meta")  # what a real-size preset is built as
    assert _hf.is_meta(module)
    cpu_inputs = tuple(t.to("cpu") for t in inputs)
    seen: dict[str, set[str]] = {}
    real_to_gm, real_annotate = tracer.to_graph_module, tracer._run_annotation

    def to_gm(model, args, kw):
        seen["trace"] = _devices((args, kw))
        return real_to_gm(model, args, kw)

    def annotation(gm, args):
        seen["annotate"] = _devices(args)
        return real_annotate(gm, args)

    monkeypatch.setattr(tracer, "to_graph_module", to_gm)
    monkeypatch.setattr(tracer, "_run_annotation", annotation)
    graph = tracer.trace(module, cpu_inputs, name=preset, example_kwargs={k: v.to("cpu") for k, v in kwargs.items()})
    assert seen == {"trace": {"meta"}, "annotate": {"meta"}}
    assert _devices(graph.example_inputs) == {"cpu"}, "the graph keeps the inputs it was given"
    # Where torch takes meta weights with CPU inputs, the meta-input path gives the same graph;
    # where it does not (torch 2.11's export for any preset, 2.13's for a vision model's concat),
    # the refusal is the device mismatch that path avoids.
    monkeypatch.setattr(tracer, "on_meta", lambda model: False)
    try:
        plain = tracer.trace(module, cpu_inputs, name=preset, example_kwargs=dict(kwargs))
    except TraceError as exc:
        assert "device" in str(exc) and "meta" in str(exc), str(exc)[:400]
        return
    assert graph.nodes == plain.nodes


def test_stack_traces_switch_is_optional(monkeypatch):
    """torch 2.11 has no torch.fx.config.do_not_emit_stack_traces: export runs without it."""
    monkeypatch.delattr(torch.fx.config, "do_not_emit_stack_traces", raising=False)
    with capture.no_stack_traces():
        pass
    assert not hasattr(torch.fx.config, "do_not_emit_stack_traces")
