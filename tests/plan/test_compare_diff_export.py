"""compare_modes, diff_plans and the exports, in process (the CLI's subprocess tests are in
test_cli.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
import torch

import partitioner
import sample_models
from cli.diff_report import format_diff
from cli.report import format_comparison
from partitioner import Device, PartitionError
from partitioner.accelerator.compare import ModeResult, best_mode, compare_modes, gaps
from partitioner.cost.model import NEAR_TIE
from partitioner.interop.export import (
    ExportError,
    export_plan,
    pipeline_split_points,
    read_aot_mapping,
    to_fx_aot,
    to_pipeline_split_spec,
    to_reference_config,
)
from partitioner.plan.diff import diff_plans
from partitioner.testing.synthetic import synthetic_graph
from partitioner.units import format_seconds

SMALL_MLP = dict(n_layer=4, hidden=64, in_features=64, out_features=64, batch_size=8)


def devices(n: int, memory: int) -> list[Device]:
    return [Device(f"dev_{i}", memory, i) for i in range(n)]


@pytest.fixture(scope="module")
def mlp() -> tuple[partitioner.Graph, torch.nn.Module, tuple[torch.Tensor, ...]]:
    module, inputs = sample_models.build("mlp", **SMALL_MLP)
    return partitioner.trace(module, inputs, name="mlp"), module, inputs


@pytest.fixture(scope="module")
def transformer() -> tuple[partitioner.Graph, torch.nn.Module, tuple[torch.Tensor, ...]]:
    module, inputs = sample_models.build("transformer", n_layer=2)
    return partitioner.trace(module, inputs, name="transformer"), module, inputs


def chain_graph(n: int = 8, size: int = 100) -> partitioner.Graph:
    return synthetic_graph([(i, i + 1) for i in range(n - 1)], [size] * n)


# --------------------------------------------------------------------------------------------
# compare


def test_compare_modes_runs_every_mode_but_aot_and_keeps_failures():
    graph = chain_graph()
    results = compare_modes(graph, devices(4, 350), force_partition=True, time_limit_s=3)
    assert [r.mode for r in results] == [
        "size_based",
        "largest_first",
        "sparse_nn",
        "cost_aware",
        "kl_based",
        "optimal",
    ]
    by_mode = {r.mode: r for r in results}
    failed = by_mode["sparse_nn"]
    assert failed.error and "embedding" in failed.error and failed.plan is None
    assert failed.latency_s is None and failed.seconds >= 0
    for name in ("size_based", "cost_aware", "kl_based"):
        r = by_mode[name]
        assert r.ok and r.plan is not None and r.plan.mode == name
        assert r.latency_s == r.plan.latency_s and r.partitions == len(r.plan.partitions)
        assert r.peak_memory_utilisation == r.plan.memory_utilisation() <= 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        failed.mode = "x"  # type: ignore[misc]
    json.dumps([r.to_dict() for r in results])
    assert "plan" in results[0].to_dict(include_plan=True)
    # Every mode measured by the strongest bound any of them proved, and against optimal.
    gap = gaps(results)
    assert set(gap) == {r.mode for r in results if r.ok}
    bound = max(r.plan.lower_bound_s for r in results if r.ok)
    for r in results:
        if r.ok:
            assert gap[r.mode][0] == pytest.approx(r.latency_s / bound - 1)
            assert gap[r.mode][1] == pytest.approx(r.latency_s / by_mode["optimal"].latency_s - 1)
            assert gap[r.mode][1] >= -1e-9  # optimal is never slower than a heuristic


def test_compare_modes_validates_modes_and_options_first():
    graph = chain_graph()
    with pytest.raises(PartitionError, match="unknown partition mode 'fast'.*size_based"):
        compare_modes(graph, devices(2, 1000), ["size_based", "fast"])
    with pytest.raises(PartitionError, match="unknown option.*'speed'"):
        compare_modes(graph, devices(2, 1000), speed=3)
    # aot_based asked for explicitly without mappings fails as a result, not an exception.
    [r] = compare_modes(graph, devices(2, 1000), ["aot_based"])
    assert not r.ok and "node_to_partition" in (r.error or "")


def test_format_comparison_marks_best_and_shows_errors():
    results = [
        ModeResult("a", 2e-3, 2, 0.5, 0.01, None, None),
        ModeResult("b", 1e-3 * (1 + 1e-12), 5, 0.5, 0.01, None, None),
        ModeResult("c", 1e-3, 3, 0.9, 0.02, None, None),
        ModeResult("d", None, None, None, 0.0, "it broke:\n  - here", None),
    ]
    assert best_mode(results) == "c"  # ties within float noise go to fewer partitions
    text = format_comparison(results)
    assert "c*" in text and "failed: it broke: - here" in text and "best: c" in text
    # A plan with more partitions must earn them: within NEAR_TIE of the fastest, fewer win.
    near = [
        ModeResult("many", 1e-3, 94, 0.5, 0.1, None, None),
        ModeResult("few", 1e-3 * (1 + NEAR_TIE / 2), 3, 0.5, 0.1, None, None),
        ModeResult("slow", 1e-3 * (1 + 2 * NEAR_TIE), 1, 0.5, 0.1, None, None),
    ]
    assert best_mode(near) == "few"
    assert format_seconds(2.25e-5) == "22.5 us" and format_seconds(1.5) == "1.5 s"
    assert format_seconds(math.inf) == "inf (cycle)" and format_seconds(None) == "-"


# --------------------------------------------------------------------------------------------
# diff


def _plan_pair() -> tuple[partitioner.Graph, partitioner.Plan, partitioner.Plan]:
    graph = chain_graph()
    devs = devices(4, 1000)
    a = partitioner.evaluate_plan(
        graph, devs, {f"op{i}": i // 4 for i in range(8)}, {0: [0], 1: [1]}, transfer_rate_bytes_per_s=100.0
    )
    b = partitioner.evaluate_plan(
        graph,
        devs,
        {f"op{i}": (0 if i < 3 else 1 if i < 6 else 2) for i in range(8)},
        {0: [0], 1: [1], 2: [2]},
        transfer_rate_bytes_per_s=100.0,
    )
    return graph, a, b


def test_diff_identical_plans_is_empty():
    _, a, _ = _plan_pair()
    d = diff_plans(a, a)
    assert d.is_empty and not d.moves and d.latency_change_s == 0.0
    assert all(p.status == "unchanged" for p in d.partitions)
    assert "no differences" in format_diff(d)


def test_diff_reports_moves_added_partitions_and_latency():
    _, a, b = _plan_pair()
    d = diff_plans(a, b)
    assert [(m.node, m.from_partition, m.from_devices, m.to_partition, m.to_devices) for m in d.moves] == [
        ("op3", 0, (0,), 1, (1,)),
        ("op6", 1, (1,), 2, (2,)),
        ("op7", 1, (1,), 2, (2,)),
    ]
    assert d.added == (2,) and d.removed == ()
    p0, p1, p2 = d.partitions
    assert (p0.status, p1.status, p2.status) == ("changed", "changed", "added")
    assert p0.memory_change_bytes == -100 and p0.nodes_a == 4 and p0.nodes_b == 3
    assert p2.memory_bytes_a is None and p2.memory_bytes_b == b.partitions[2].memory_bytes
    assert (p1.bytes_in_a, p1.bytes_out_a, p1.bytes_in_b, p1.bytes_out_b) == (100, 0, 100, 100)
    assert p1.bytes_crossing_change == 100
    assert d.latency_change_s == pytest.approx(b.latency_s - a.latency_s)
    assert d.same_graph and not d.devices_changed
    back = diff_plans(b, a)
    assert back.removed == (2,) and back.partitions[2].status == "removed"
    text = format_diff(d, "old.json", "new.json")
    assert "3 node(s) moved" in text and "op3" in text and "partitions added: 2" in text
    assert "--- old.json" in text and "end-to-end latency:" in text
    data = json.loads(json.dumps(d.to_dict()))
    assert data["added_partitions"] == [2] and data["moves"][0]["node"] == "op3"


def test_diff_nodes_of_other_models_and_cyclic_latency():
    graph, a, _ = _plan_pair()
    other = partitioner.evaluate_plan(chain_graph(9), devices(4, 1000), {f"op{i}": 0 for i in range(9)}, {0: [0]})
    d = diff_plans(a, other)
    assert d.nodes_only_in_b == ("op8",) and not d.same_graph
    assert "DIFFERENT graphs" in format_diff(d)
    cyc = dataclasses.replace(a, latency_s=math.inf)
    assert math.isnan(diff_plans(cyc, cyc).latency_change_s)
    assert diff_plans(cyc, cyc).to_dict()["latency_change_s"] is None


# --------------------------------------------------------------------------------------------
# exports


def test_fx_aot_export_round_trips_through_aot_based(mlp):
    graph, _, _ = mlp
    plan = partitioner.partition(graph, devices(4, 28 * 1024))
    data = json.loads(json.dumps(to_fx_aot(plan)))
    assert data["node_to_partition"]["layers_0"] == 0
    assert data["partition_to_logical_device_mapping"] == {"0": [0], "1": [1], "2": [2], "3": [3]}
    assert data["devices"][0] == {"name": "dev_0", "available_mem_bytes": 28 * 1024, "logical_id": 0}
    n2p, p2d = read_aot_mapping(data)
    again = partitioner.partition(
        graph, devices(4, 28 * 1024), mode="aot_based", node_to_partition=n2p, partition_to_devices=p2d
    )
    assert again.node_to_partition() == plan.node_to_partition()
    assert again.latency_s == plan.latency_s
    # A saved plan and the short form are accepted too.
    assert read_aot_mapping(json.loads(plan.to_json())) == (plan.node_to_partition(), plan.partition_to_devices())
    assert read_aot_mapping({"node_to_partition": {"a": 0}, "partition_to_devices": {"0": 1}}) == ({"a": 0}, {0: [1]})
    with pytest.raises(ExportError, match="needs the objects 'node_to_partition'.*keys \\['nodes'\\]"):
        read_aot_mapping({"nodes": {}})
    with pytest.raises(ExportError, match="integer partition ids"):
        read_aot_mapping({"node_to_partition": {"a": "x"}, "partition_to_devices": {}})


def test_reference_config_reproduces_the_plan_in_torchs_partitioner(transformer):
    from torch.fx.experimental.accelerator_partitioner import Partitioner
    from torch.fx.passes.graph_manipulation import get_size_of_all_nodes

    graph, module, inputs = transformer
    plan = partitioner.partition(graph, partitioner.parse_devices("4x2MiB"), mode="cost_aware", force_partition=True)
    assert len(plan.partitions) > 1
    gm = copy.deepcopy(graph.graph_module)
    get_size_of_all_nodes(gm, list(inputs))
    config = to_reference_config(plan, gm)
    assert all(isinstance(n, torch.fx.Node) for n in config.node_to_partition_mapping)
    reference = Partitioner()
    result = reference.partition_graph(gm, gm, config)
    got = {
        n.name: p.partition_id
        for p in reference.partitions
        for n in p.nodes
        if n.op not in ("placeholder", "get_attr", "output")
    }
    assert got == plan.node_to_partition()
    assert {p.partition_id: list(p.logical_device_ids) for p in reference.partitions} == plan.partition_to_devices()
    torch.testing.assert_close(result.module_with_submodules(*inputs), module(*inputs))


def test_reference_config_names_mismatched_nodes(mlp, transformer):
    graph, _, _ = mlp
    plan = partitioner.partition(graph, devices(4, 28 * 1024))
    with pytest.raises(ExportError, match="lacks: \\['layers_0'.*are in no partition"):
        to_reference_config(plan, transformer[0].graph_module)
    with pytest.raises(ExportError, match="logical device id\\(s\\) \\[2, 3\\]"):
        to_reference_config(plan, graph.graph_module, devices(2, 10**6))


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_pipeline_split_spec_matches_torch_pipelining(transformer):
    from torch.distributed.pipelining import pipeline

    graph, module, inputs = transformer
    plan = partitioner.partition(graph, partitioner.parse_devices("4x2MiB"))
    spec = to_pipeline_split_spec(plan, graph)
    assert spec["split_spec"] == {"blocks.0.mlp.gelu": "beginning", "blocks.1.mlp.gelu": "beginning"}
    assert spec["num_stages"] == len(plan.partitions) == 3
    assert [s["first_node"] for s in spec["stages"]] == [p.node_names[0] for p in plan.partitions]
    json.dumps(spec)
    pipe = pipeline(module, inputs, split_spec=pipeline_split_points(plan, graph))
    assert pipe.num_stages == 3
    torch.testing.assert_close(pipe(*inputs)[0], module(*inputs))


def _mapping_from(graph: partitioner.Graph, starts: dict[str, int]) -> dict[str, int]:
    """Op nodes in order; partition id changes at each node named in ``starts``."""
    out, pid = {}, 0
    for name in graph.op_names:
        pid = starts.get(name, pid)
        out[name] = pid
    return out


def test_pipeline_split_spec_errors_say_where_and_what_to_do(mlp, transformer):
    graph, _, _ = transformer
    devs = partitioner.parse_devices("4x64MiB")

    def plan_for(mapping: dict[str, int]) -> partitioner.Plan:
        return partitioner.evaluate_plan(graph, devs, mapping, {p: [p] for p in set(mapping.values())})

    top = plan_for(_mapping_from(graph, {"add": 1}))  # wte + wpe runs in GPT.forward itself
    with pytest.raises(
        ExportError,
        match="node 'add', which runs in the model's top-level forward.*nearest nodes where a stage may start: 'wpe'",
    ):
        to_pipeline_split_spec(top, graph)
    middle = plan_for(_mapping_from(graph, {"unflatten": 1}))
    with pytest.raises(
        ExportError,
        match="middle of module 'blocks.0.attn' \\(whose first node is 'blocks_0_attn_q_proj', in partition 0\\)",
    ):
        to_pipeline_split_spec(middle, graph)
    mapping = _mapping_from(graph, {"blocks_1_ln_1": 1})
    mapping["ln_f"] = 0  # partition 0 runs again after partition 1: not a chain
    with pytest.raises(ExportError, match="do not form a chain: partition 0 runs again at node 'ln_f'"):
        to_pipeline_split_spec(plan_for(mapping), graph)
    other = partitioner.partition(mlp[0], devices(4, 28 * 1024))
    with pytest.raises(ExportError, match="does not match model 'transformer'"):
        to_pipeline_split_spec(other, graph)
    with pytest.raises(ExportError, match="needs the model"):
        export_plan(other, "pipeline-split-spec")
    with pytest.raises(ExportError, match="unknown export kind 'onnx'; valid kinds are fx-aot, pipeline-split-spec"):
        export_plan(other, "onnx")
    single = partitioner.partition(graph, devs)
    assert to_pipeline_split_spec(single, graph)["split_spec"] == {}


def test_diff_matches_renumbered_partitions_by_shared_nodes():
    n = 12
    graph = synthetic_graph([(i, i + 1) for i in range(n - 1)], [10] * n)
    devices = partitioner.parse_devices("4x1KiB")
    thirds = {f"op{i}": i // 4 for i in range(n)}
    a = partitioner.evaluate_plan(graph, devices, thirds, {0: [0], 1: [1], 2: [2]})
    # op1 alone in a new partition: every later partition shifts its id by one.
    moved = {**thirds, "op1": 9}
    b = partitioner.evaluate_plan(graph, devices, moved, {0: [0], 1: [1], 2: [2], 9: [3]})
    assert [p.id for p in b.partitions if "op4" in p.node_names] == [2]  # renumbered
    d = diff_plans(a, b)
    assert [(m.node, m.from_partition, m.to_partition) for m in d.moves] == [("op1", 0, 1)]
    assert [p.status for p in d.partitions if p.status == "added"] == ["added"]
