"""Device maps from plans that Accelerate can run: real module names, no `_no_split_modules` block
split, tied weights on one device, and no op reading tensors from two devices.

The check runs the model under Accelerate's own hooks (`attach_align_device_hook_on_blocks`,
as `dispatch_model` attaches them) with each logical device faked as a CPU device index
(`cpu:k`): `.to("cpu:k")` copies, and a TorchFunctionMode follows which fake device each
tensor's storage is on, recording every op whose tensor inputs come from two of them."""

import copy

import pytest
import tiny_hf
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

import partitioner
import sample_models
from partitioner.interop.device_map import to_device_map
from partitioner.interop.export import export_plan

pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")
from accelerate.hooks import attach_align_device_hook_on_blocks  # noqa: E402
from accelerate.utils import check_device_map, find_tied_parameters  # noqa: E402

TINY = {
    "hf:gpt2": tiny_hf.SMALL["hf:gpt2"],
    "hf:llama": tiny_hf.DECODER,
    "hf:t5": {**tiny_hf.SMALL["hf:t5"], "num_layers": 1, "num_decoder_layers": 1, "vocab_size": 1000},
    "hf:bert": tiny_hf.SMALL["hf:bert"],
}


def _fake_index(value):
    dev = next((a for a in tree_flatten(value)[0] if isinstance(a, (str, torch.device))), None)
    dev = torch.device(dev) if dev is not None else None
    return dev.index if dev is not None and dev.type == "cpu" else None


class FakeDevices(TorchFunctionMode):
    """Follows the fake device (`cpu:k`) of each storage; `mixed` lists ops reading two."""

    def __init__(self):
        super().__init__()
        self.where, self.mixed = {}, []

    def of(self, t):
        return self.where.get(t.untyped_storage().data_ptr())

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = _fake_index((args[1:], kwargs)) if func is torch.Tensor.to else None
        if target is not None and self.of(args[0]) == target:
            return args[0]  # already there: `.to` is a no-op, as on a real device
        out = func(*args, **kwargs)
        if target is not None:
            tags = {target}
        else:
            tags = {self.of(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.dim()}
            tags.discard(None)
            if len(tags) > 1:
                self.mixed.append((getattr(func, "__name__", str(func)), tuple(sorted(tags))))
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor):
                key = o.untyped_storage().data_ptr()
                if len(tags) == 1:
                    self.where[key] = next(iter(tags))
                else:
                    self.where.pop(key, None)
        return out


def run_on_fake_devices(model, device_map, args, kwargs):
    """(outputs, ops mixing devices) of ``model`` dispatched by Accelerate's hooks on ``device_map``."""
    model = copy.deepcopy(model)
    execution = {k: torch.device("cpu", d) for k, d in device_map.items()}
    execution[""] = torch.device("cpu", min(device_map.values()))  # dispatch_model's main device
    mode = FakeDevices()
    with mode, torch.no_grad():
        attach_align_device_hook_on_blocks(model, execution_device=execution, offload={k: False for k in device_map})
        out = model(*args, **kwargs)
    return out, mode.mixed


def logits(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def device_of(device_map, name):
    parts = name.split(".")
    for i in range(len(parts), -1, -1):
        if ".".join(parts[:i]) in device_map:
            return device_map[".".join(parts[:i])]
    raise AssertionError(f"{name} is in no entry of the map")


def devices_under(device_map, path):
    inside = {d for k, d in device_map.items() if k == path or k.startswith(path + ".")}
    return inside or {device_of(device_map, path)}


@pytest.fixture(scope="module", params=list(TINY))
def traced(request):
    model, args, kwargs = sample_models.load(request.param, TINY[request.param])
    graph = partitioner.trace(model, args, **({"example_kwargs": kwargs} if kwargs else {}))
    return model, args, kwargs, graph


def test_the_fake_devices_catch_a_split_block_and_pass_accelerates_own_map():
    model, args, kwargs = sample_models.load("hf:llama", TINY["hf:llama"])
    reference = logits(model(*args))
    split = {
        "model.embed_tokens": 0,
        "model.rotary_emb": 0,
        "model.layers.0.input_layernorm": 0,
        "model.layers.0.self_attn": 0,
        "model.layers.0.post_attention_layernorm": 1,
        "model.layers.0.mlp": 1,
        "model.layers.1": 1,
        "model.norm": 1,
        "lm_head": 1,
    }
    check_device_map(model, split)
    _, mixed = run_on_fake_devices(model, split, args, kwargs)
    assert mixed and all(sorted(pair) == [0, 1] for _, pair in mixed)  # the block's residual add
    sizes = accelerate.utils.compute_module_sizes(model)
    theirs = accelerate.infer_auto_device_map(
        model,
        max_memory={0: sizes[""] // 2, 1: sizes[""] // 2, 2: sizes[""]},
        no_split_module_classes=model._no_split_modules,
    )
    assert len(set(theirs.values())) >= 2
    out, mixed = run_on_fake_devices(model, theirs, args, kwargs)
    assert mixed == []
    torch.testing.assert_close(logits(out), reference)


@pytest.mark.parametrize("count,share", [(2, 0.65), (3, 0.45)])
def test_a_plans_map_is_one_accelerate_runs(traced, count, share):
    model, args, kwargs, graph = traced
    devices = partitioner.parse_devices(f"{count}x{int(graph.total_size_bytes * share)}B")
    plan = partitioner.partition(graph, devices, mode="kl_based")  # every model here has one
    assert len({p.device_ids[0] for p in plan.partitions}) >= 2
    exported = to_device_map(plan, graph)
    dm = exported.device_map
    names = set(dict(model.named_modules())) | set(dict(model.named_parameters()))
    assert set(dm) <= names, sorted(set(dm) - names)
    check_device_map(model, dm)  # Accelerate's own rule: every parameter covered
    for path, module in model.named_modules():  # no block of _no_split_modules split
        if type(module).__name__ in model._no_split_modules:
            assert len(devices_under(dm, path)) == 1, path
    for group in find_tied_parameters(model):  # Accelerate's own list of tied parameters
        assert len({device_of(dm, name) for name in group}) == 1, group
    out, mixed = run_on_fake_devices(model, dm, args, kwargs)
    assert mixed == []
    with torch.no_grad():
        torch.testing.assert_close(logits(out), logits(model(*args, **kwargs)))
    for group in exported.moved:
        assert group.device not in group.from_devices and group.moved_bytes >= 0
        assert all(devices_under(dm, m) == {group.device} for m in group.modules)


def _plan_by_module(graph, on_one, devices=2):
    """A hand-made plan: ops of modules under ``on_one`` on device 1, the rest on device 0."""
    mapping = {
        name: int(
            any(graph.node(name).module_path == m or graph.node(name).module_path.startswith(m + ".") for m in on_one)
        )
        for name in graph.op_names
    }
    return partitioner.evaluate_plan(graph, partitioner.parse_devices(f"{devices}x1GiB"), mapping, {0: [0], 1: [1]})


def _bytes(model, prefix, but=None):
    return sum(
        p.numel() * p.element_size()
        for n, p in model.named_parameters()
        if n.startswith(prefix + ".") and not (but and n.startswith(but + "."))
    )


def test_a_cut_block_goes_whole_to_the_device_with_most_of_its_weights():
    model, args, kwargs = sample_models.load("hf:gpt2", TINY["hf:gpt2"])
    graph = partitioner.trace(model, args)
    plan = _plan_by_module(graph, ["transformer.h.0.mlp"])
    exported = to_device_map(plan, graph)
    mlp, rest = _bytes(model, "transformer.h.0.mlp"), _bytes(model, "transformer.h.0", but="transformer.h.0.mlp")
    assert mlp > rest  # so the block goes where its MLP is, and the rest moves
    (group,) = [g for g in exported.moved if "no_split" in g.kinds]
    assert group.modules == ("transformer.h.0",) and group.device == 1 and group.from_devices == (0,)
    assert group.moved_bytes == rest
    assert exported.device_map["transformer.h.0"] == 1 and exported.moved_bytes >= rest
    assert any(n.startswith("transformer.h.0 ") and f"{rest:,}" in n for n in exported.notes)
    data = export_plan(plan, "accelerate-device-map", graph)
    assert data["device_map"] == exported.device_map
    assert any(
        m["modules"] == ["transformer.h.0"] and m["device"] == 1 and m["moved_bytes"] == rest for m in data["moved"]
    ) and data["notes"] == list(exported.notes)
    _, mixed = run_on_fake_devices(model, exported.device_map, args, kwargs)
    assert mixed == []


def test_modules_an_op_reads_together_share_a_device():
    # GPT-2 adds wte(ids) + wpe(positions) in GPT2Model's own forward: on two devices that add
    # mixes them (a map Accelerate's infer_auto_device_map can make on tight memories).
    model, args, kwargs = sample_models.load("hf:gpt2", TINY["hf:gpt2"])
    graph = partitioner.trace(model, args)
    plan = _plan_by_module(graph, ["transformer.wpe"])
    naive = {
        "transformer.wte": 0,
        "transformer.wpe": 1,
        "transformer.drop": 0,
        "transformer.h": 0,
        "transformer.ln_f": 0,
        "lm_head": 0,
    }
    check_device_map(model, naive)
    _, mixed = run_on_fake_devices(model, naive, args, kwargs)
    assert mixed  # the check sees the problem...
    exported = to_device_map(plan, graph)
    assert device_of(exported.device_map, "transformer.wpe") == device_of(exported.device_map, "transformer.wte")
    assert any("shared_input" in g.kinds for g in exported.moved)
    _, mixed = run_on_fake_devices(model, exported.device_map, args, kwargs)
    assert mixed == []  # ...and the map avoids it
