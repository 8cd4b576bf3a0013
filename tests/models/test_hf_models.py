"""Hugging Face architectures from their configs: traced as users have them (keyword inputs, cache
outputs), tied weights counted once, every mode valid and a split equal to the model on small
configs, and a real-size preset on meta weights without the memory."""

import subprocess
import sys

import pytest
import tiny_hf
import torch

import partitioner
import sample_models

pytest.importorskip("transformers")  # an optional extra; the dev extra (and CI) installs it

SMALL = tiny_hf.SMALL


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
    modes = ["sparse_nn", "size_based", "largest_first", "cost_aware", "kl_based"]
    if spec in ("hf:gpt2", "hf:t5"):  # the solver's worker takes seconds: two architectures are enough
        modes.append("optimal")
    for mode in modes:
        try:
            plan = partitioner.partition(graph, devices, mode=mode, time_limit_s=1)
        except partitioner.PartitionError as exc:  # no tables (ViT), or the dense part fits beside none
            assert mode == "sparse_nn" and (
                "needs embedding nodes" in str(exc) or "replicates the dense part" in str(exc)
            ), (spec, exc)
            continue
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
    for dtype, share in (("int8", 2), ("int4", 4)):  # quantized weights: bf16 bytes / 2 or / 4
        overrides = {**SMALL["hf:llama"], "dtype": dtype}
        scale = sample_models.weight_scale("hf:llama", overrides)
        graph = partitioner.trace(*sample_models.load("hf:llama", overrides)[:2]).with_weight_bytes(scale)
        assert sum(n.output_bytes for n in graph.nodes if n.op == "get_attr") * share == weights[1]
        assert [n.output_bytes for n in graph.nodes if n.is_op] == [n.output_bytes for n in bf16.nodes if n.is_op]


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


@pytest.mark.slow
def test_llama_3_8b_traces_on_meta_weights_without_their_memory():
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ops, size, rss, _ = done.stdout.split()
    assert int(ops) > 1000
    assert int(size) > 15 * 2**30  # 8 billion bf16 parameters (the checkpoint's dtype) are in the graph's figures...
    assert int(rss) < 2 * 2**30  # ...but never in this process's memory


def test_a_plan_exports_as_an_accelerate_device_map_and_accelerates_map_scores_as_a_plan():
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import check_device_map

    from partitioner.interop.device_map import accelerate_plan, from_device_map, to_device_map

    model, args, _ = sample_models.load("hf:gpt2", SMALL["hf:gpt2"])
    graph = partitioner.trace(model, args)
    devices = partitioner.parse_devices(f"3x{int(graph.total_size_bytes * 0.45)}B")
    plan = partitioner.partition(graph, devices, mode="kl_based")
    exported = to_device_map(plan, graph)
    check_device_map(model, exported.device_map)  # covers every parameter
    assert len(exported.reasons) == len(exported.split_modules)
    for module, reason in zip(exported.split_modules, exported.reasons):
        assert reason.startswith(module or "the model") and "partitions" in reason
    where = plan.node_to_partition()
    for p in plan.partitions:  # where the plan follows module boundaries, the map agrees with it
        for name in p.node_names:
            path = graph.node(name).module_path
            keys = [k for k in exported.device_map if not k or path == k or path.startswith(k + ".")]
            if path and keys and not any(path == s or path.startswith(s + ".") for s in exported.split_modules):
                assert exported.device_map[max(keys, key=len)] == p.device_ids[0], name
    # Read back, the map gives the plan's devices for every node of a module it names whole.
    node_to_partition, partition_to_devices = from_device_map(graph, exported.device_map)
    assert set(node_to_partition) == set(where)
    with torch.no_grad():
        expected = first_tensor(model(*args))
        dispatched = accelerate.dispatch_model(model, device_map={k: "cpu" for k in exported.device_map})
        torch.testing.assert_close(first_tensor(dispatched(*args)), expected)
    theirs = accelerate_plan(model, graph, devices)
    assert theirs.mode == "accelerate" and sorted(theirs.node_to_partition()) == sorted(where)
    # Accelerate fills devices by parameter bytes; activations, which our cost model counts, can
    # overfill them: its plan is scored and any violation is memory, never a cycle.
    assert all(v.kind == "memory" for v in theirs.violations(graph))
    if not theirs.violations(graph):
        assert plan.latency_s <= theirs.latency_s * (1 + 1e-9)


@pytest.mark.slow
def test_compare_on_the_command_line_puts_accelerate_beside_the_modes():
    pytest.importorskip("accelerate")
    import json

    sets = [f"--set={k}={v}" for k, v in SMALL["hf:llama"].items()]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "compare",
            "hf:llama",
            *sets,
            "--devices",
            "3x800KiB",
            "--modes",
            "size_based,kl_based",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["mode"]: r for r in json.loads(done.stdout)["results"]}
    assert list(rows) == ["size_based", "kl_based", "accelerate"]
    accelerate = rows["accelerate"]
    assert accelerate["latency_s"] is not None or "does not fit by our count" in accelerate["error"]
