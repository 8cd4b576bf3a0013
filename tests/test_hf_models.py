"""Hugging Face architectures from their configs: traced as users have them (keyword inputs, cache
outputs), tied weights counted once, every mode valid and a split equal to the model on small
configs, and a real-size preset on meta weights without the memory."""

import resource
import subprocess
import sys

import pytest
import torch

import partitioner
import sample_models

pytest.importorskip("transformers")  # an optional extra; the dev extra (and CI) installs it

SMALL = {
    "hf:gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000, "n_positions": 64},
    "hf:llama": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "vocab_size": 1000},
    "hf:mixtral": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 4},
    "hf:bert": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "vocab_size": 1000},
    "hf:vit": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "image_size": 32, "patch_size": 8},
    "hf:t5": {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_ff": 128, "num_heads": 4, "d_kv": 16,
              "vocab_size": 500},
}  # decoder-only, MoE, encoder-only, vision, encoder-decoder; the embedding-heavy one is gpt2 (tied)


def first_tensor(out):
    for name in ("logits", "last_hidden_state"):
        if hasattr(out, name):
            return getattr(out, name)
    return out[0] if isinstance(out, (tuple, list)) else out


@pytest.mark.parametrize("spec", list(SMALL))
def test_small_configs_trace_partition_and_split_equal_the_model(spec):
    model, args, kwargs = sample_models.load(spec, SMALL[spec])
    graph = partitioner.trace(model, args, example_kwargs=kwargs)
    devices = partitioner.parse_devices(f"3x{int(graph.total_size_bytes * 0.45)}B")
    with torch.no_grad():
        expected = first_tensor(model(*args, **kwargs))
    for mode in ("size_based", "largest_first", "cost_aware", "kl_based"):
        plan = partitioner.partition(graph, devices, mode=mode)
        assert plan.violations(graph) == [], (spec, mode)
        assert len(plan.partitions) > 1
    with torch.no_grad():
        got = first_tensor(partitioner.split(plan, graph)(*graph.example_inputs))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_keyword_inputs_and_a_dict_by_mistake():
    model, args, kwargs = sample_models.load("hf:t5", SMALL["hf:t5"])
    assert set(kwargs) == {"decoder_input_ids"}
    configs = {id(m.config): m.config for m in model.modules() if hasattr(m, "config")}
    for config in configs.values():  # as users have them: caches on, which export cannot flatten
        config.use_cache = True
    graph = partitioner.trace(model, args, example_kwargs=kwargs)
    assert [n.name for n in graph.nodes if n.op == "placeholder"][-1].startswith("decoder_input_ids")
    assert all(c.use_cache for c in configs.values())  # the cache was off only while tracing
    with pytest.raises(partitioner.TraceError, match="example_kwargs"):
        partitioner.trace(model, {"input_ids": args[0]})


def test_tied_weights_count_once():
    model, args, _ = sample_models.load("hf:gpt2", SMALL["hf:gpt2"])
    graph = partitioner.trace(model, args)
    assert graph.tied_parameters == (("transformer.wte.weight", "lm_head.weight"),)
    unique = {id(p): p for p in model.parameters()}
    param_bytes = sum(p.numel() * p.element_size() for p in unique.values())
    attrs = sum(n.output_bytes for n in graph.nodes if n.op == "get_attr")
    assert attrs == param_bytes  # every parameter once, the tied embedding included


def test_dtype_setting_halves_the_weights():
    fp32 = partitioner.trace(*sample_models.load("hf:llama", SMALL["hf:llama"])[:2])
    bf16 = partitioner.trace(*sample_models.load("hf:llama", {**SMALL["hf:llama"], "dtype": "bf16"})[:2])
    weights = [sum(n.output_bytes for n in g.nodes if n.op == "get_attr") for g in (fp32, bf16)]
    assert weights[1] * 2 == weights[0]


def test_bad_names_and_fields_say_the_fix():
    with pytest.raises(ValueError, match="neither a preset .* nor a transformers model type"):
        sample_models.load("hf:no_such_type")
    with pytest.raises(ValueError, match="no config field 'n_layers'; did you mean n_layer"):
        sample_models.load("hf:gpt2", {"n_layers": 2})


MEASURE = """
import resource, sys, time
import partitioner, sample_models
began = time.perf_counter()
model, args, kwargs = sample_models.load("hf:llama-3-8b")
graph = partitioner.trace(model, args, example_kwargs=kwargs)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(len(graph.op_indices), graph.total_size_bytes, rss, time.perf_counter() - began)
"""


def test_llama_3_8b_traces_on_meta_weights_without_their_memory():
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ops, size, rss, _ = done.stdout.split()
    assert int(ops) > 1000
    assert int(size) > 30 * 2**30  # 8 billion fp32 parameters are in the graph's figures...
    assert int(rss) < 2 * 2**30  # ...but never in this process's memory
