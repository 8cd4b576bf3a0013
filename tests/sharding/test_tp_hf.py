"""Tensor parallelism on Hugging Face models (tiny configs, nothing downloaded): the model's own
plan as a spec, attention by heads, GPT-2's transposed Conv1D, tied and meta weights refused
with the reason; real runs on 2 gloo ranks equal one process and CommDebugMode's counts."""

from __future__ import annotations

import pytest
import tiny_hf
import torch

import partitioner
import sample_models
from partitioner import Device, ShardingError, sharding
from partitioner.sharding import tensor_parallel
from partitioner.sharding.tp_run import run_sharded

SMALL = tiny_hf.DECODER
CONFIGS = {
    "llama": SMALL,
    "qwen2": SMALL,
    "mistral": SMALL,
    "mixtral": {**SMALL, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt2": tiny_hf.GPT2,
}


def _load(name: str, **more):
    module, inputs, kwargs = sample_models.load(f"hf:{name}", overrides={**CONFIGS[name], **more})
    return module, inputs, kwargs, partitioner.trace(module, inputs, example_kwargs=kwargs)


@pytest.fixture(scope="module")
def llama():
    return _load("llama")


def test_the_models_own_plan_becomes_a_spec(llama):
    module, _, _, graph = llama
    spec = tensor_parallel.from_model_plan(graph, 2)
    # transformers' own plan, read from the config rather than from our code
    plan = module.config.base_model_tp_plan
    for i in range(SMALL["num_hidden_layers"]):
        for rel, style in plan.items():
            path = "model." + rel.replace("*", str(i))
            assert spec[f"{path}.weight"] == ("2,1" if style == "colwise" else "1,2")
    assert not any("norm" in name or "embed" in name for name in spec)  # replicated
    tp = tensor_parallel.tp_plan(graph, spec, 2)
    assert all(lay["output"] == "shard" for lay in tp.styles.values() if lay["style"] == "colwise")
    assert all(lay["input"] == "shard" for lay in tp.styles.values() if lay["style"] == "rowwise")
    rowwise = [m for m, lay in tp.styles.items() if lay["style"] == "rowwise"]
    assert sorted(c.module for c in tp.collectives) == sorted(rowwise)  # one all-reduce per block
    assert {c.kind for c in tp.collectives} == {"all_reduce"}


def test_heads_that_do_not_divide_are_refused_with_the_rule(llama):
    _, _, _, graph = llama
    spec = tensor_parallel.from_model_plan(graph, 4)  # 2 key-value heads over 4 devices
    with pytest.raises(ShardingError, match=r"self_attn: .*heads .* must divide by the 4 devices.*k_proj 2"):
        tensor_parallel.tp_plan(graph, spec, 4)
    with pytest.raises(ShardingError, match="declares no tensor-parallel plan"):
        tensor_parallel.from_model_plan(_load("gpt2")[3], 2)


def test_suggest_starts_from_the_models_plan_and_adds_embeddings_to_fit(llama):
    _, _, _, graph = llama
    two = [Device("a", 1, 0), Device("b", 1, 1)]
    whole = sharding.device_memory(graph, two, {})[0]
    devices = [Device(f"d{i}", int(whole * 0.9), i) for i in range(2)]
    spec = tensor_parallel.suggest(graph, devices)
    assert set(tensor_parallel.from_model_plan(graph, 2)) <= set(spec)
    used = sharding.device_memory(graph, devices, spec)
    assert all(used[d.logical_id] <= d.memory_bytes for d in devices)


def test_gpt2_conv1d_is_transposed_and_tied_or_fused_weights_are_explained():
    _, _, _, graph = _load("gpt2")
    mlp = "transformer.h.0.mlp"
    # Conv1D's weight is (in, out): "1,2" splits the output features, a column-parallel layer.
    tp = tensor_parallel.tp_plan(graph, {f"{mlp}.c_fc.weight": "1,2", f"{mlp}.c_proj.weight": "2,1"}, 2)
    assert {m: lay["style"] for m, lay in tp.styles.items()} == {f"{mlp}.c_fc": "colwise", f"{mlp}.c_proj": "rowwise"}
    assert tp.styles[f"{mlp}.c_fc"]["output"] == "shard" and tp.spec[f"{mlp}.c_fc.bias"] == "2"
    assert tp.transposed == (f"{mlp}.c_fc", f"{mlp}.c_proj")
    with pytest.raises(ShardingError, match=r"transformer.wte.weight: it is also lm_head.weight \(tied"):
        tensor_parallel.tp_plan(graph, {"transformer.wte.weight": "2,1"}, 2)
    # GPT-2 fuses q, k and v in c_attn: split by columns its output is gathered before the split.
    attn = tensor_parallel.tp_plan(graph, {"transformer.h.0.attn.c_attn.weight": "1,2"}, 2)
    assert attn.counts() == {"all_gather": 1}


def test_a_model_on_meta_weights_is_refused_before_any_process_starts():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    plan = tensor_parallel.TPPlan(2, {}, {})
    with pytest.raises(ShardingError, match="meta device .* cannot run"):
        run_sharded(model, (torch.randn(1, 4),), plan)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_real_run_equals_one_process_and_commdebugmode(name):
    module, inputs, kwargs, graph = _load(name)
    if name == "gpt2":
        whole = sharding.device_memory(graph, [Device("a", 1, 0), Device("b", 1, 1)], {})[0]
        spec = tensor_parallel.suggest(graph, [Device(f"d{i}", int(whole * 0.9), i) for i in range(2)])
        spec.update(
            {
                "transformer.h.1.mlp.c_fc.weight": "1,2",
                "transformer.h.1.mlp.c_proj.weight": "2,1",
                "transformer.h.0.attn.c_proj.weight": "2,1",
            }
        )
    else:  # the model's plan, and the embedding and output layer split as torchtitan does
        spec = {
            **tensor_parallel.from_model_plan(graph, 2),
            "model.embed_tokens.weight": "2,1",
            "lm_head.weight": "2,1",
        }
    plan = tensor_parallel.tp_plan(graph, spec, 2)
    result = run_sharded(module, inputs, plan, example_kwargs=kwargs, timeout_s=240)
    assert result.outputs_equal, result.max_abs_diff
    assert result.forward_counts == plan.counts(False)
    params = sharding.parameter_shapes(graph)
    for pname, value in plan.spec.items():
        assert result.local_shapes[pname] == sharding.shard_shapes(params[pname][0], value)[0]


@pytest.mark.slow
def test_the_sharding_page_on_a_hugging_face_model():
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from explorer.sidebar import HF_MODEL

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "explorer" / "app.py"), default_timeout=240).run()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_name").set_value("llama")
    at.text_input(key="hf_set").set_value(" ".join(f"{k}={v}" for k, v in SMALL.items()))
    at.button(key="hf_build").click().run()
    at.number_input(key="dev_count").set_value(2).run()
    at.switch_page("views/sharding.py").run()
    assert not at.exception, at.exception
    at.button(key="sh_model_plan").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    collectives = [d.value for d in at.dataframe if "Collective" in d.value.columns][0]
    assert set(collectives["Collective"]) == {"all_reduce"}
    assert set(collectives["Module"]) == {
        f"model.layers.{i}.{m}" for i in range(2) for m in ("self_attn.o_proj", "mlp.down_proj")
    }
    at.button(key="sh_run").click().run(timeout=240)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("as predicted" in s.value and "Outputs equal" in s.value for s in at.success)


def test_a_mixture_of_experts_that_does_not_fit_is_pointed_to_expert_parallelism():
    _, _, _, graph = _load("mixtral")
    whole = sharding.device_memory(graph, [Device("a", 1, 0), Device("b", 1, 1)], {})[0]
    tight = [Device(f"d{i}", int(whole * 0.6), i) for i in range(2)]  # the experts alone hold most of it
    with pytest.raises(
        ShardingError,
        match=r"needing [\d.]+ [KM]iB of its [\d.]+ [KM]iB.*packed expert weights "
        r"\(e.g. model.layers.0.mlp.experts.down_proj\).*expert parallelism",
    ):
        tensor_parallel.suggest(graph, tight)
