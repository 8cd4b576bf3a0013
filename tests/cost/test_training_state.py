"""The training-state rule has one home (partitioner.cost.training.StateBytes): its bytes equal the
state torch.optim keeps, and pipeline stages, remat's training memory and the cluster planner give
the same model-state bytes for the same model and optimizer ("none": weights and gradients; None:
inference, the weights alone)."""

import pytest
import torch

import partitioner
import sample_models
from partitioner import PartitionError, cluster, pipeline, remat
from partitioner.cost.training import OPTIMIZERS, state_bytes, training_copies
from partitioner.remat.memory import RematResult

TORCH_OPTIMIZERS = {
    "adam": lambda params: torch.optim.Adam(params),
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "none": lambda params: torch.optim.SGD(params, lr=0.1),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_the_state_is_what_torch_optim_keeps(name):
    """In full precision: the per-parameter state tensors torch.optim allocates on its first step
    (the scalar step counters apart) and the gradient autograd writes."""
    model = torch.nn.Linear(16, 8)
    opt = TORCH_OPTIMIZERS[name](model.parameters())
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    numel = sum(p.numel() for p in model.parameters())
    kept = sum(
        t.numel() * t.element_size()
        for state in opt.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor) and t.dim() > 0
    )
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    held = state_bytes(name, 4)
    assert held.optimizer * numel == kept and held.gradients * numel == grads and held.master == 0
    assert held.weights * numel == sum(p.numel() * p.element_size() for p in model.parameters())


def test_mixed_precision_is_the_zero_papers_2_2_k():
    # Rajbhandari et al. 2020, sec. 3.1: Adam in mixed precision holds 2 + 2 + 12 = 16 bytes a parameter.
    adam = state_bytes("adam", 2)
    assert (adam.weights, adam.gradients, adam.state, adam.total) == (2, 2, 12, 16)
    assert adam.master == 4 and adam.copies == 8
    assert state_bytes(None, 2).total == 2 and training_copies(None) == 1
    assert training_copies("none") == 2  # weights and gradients: training without optimizer state


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def mlp(request):
    model, inputs, _ = sample_models.load("mlp", {})
    dtype = getattr(torch, request.param)
    model = model.to(dtype)
    inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    return partitioner.trace(model, inputs), torch.empty((), dtype=dtype).element_size()


@pytest.mark.parametrize("optimizer", [None, *OPTIMIZERS])
def test_pipeline_remat_and_cluster_agree_on_the_model_state(mlp, optimizer):
    graph, element = mlp
    devices = partitioner.parse_devices("1x4GiB")
    pp = pipeline.plan(graph, devices, stages=1, microbatches=1, schedule="gpipe", training=optimizer)
    staged = pp.stage_memory_bytes[0] - pp.stage_stash_bytes[0]

    plan = partitioner.partition(graph, devices)
    nothing = RematResult(1.0, (), (), 0, 0, 0, 0.0)
    (device,) = remat.training_memory(plan, graph, nothing, optimizer).values()
    rematted = device.parameters + device.gradients + device.optimizer

    kind = "inference" if optimizer is None else "training"
    w = cluster.Workload(kind=kind, global_batch=1, seq_len=1, element_bytes=element, optimizer=optimizer or "adam")
    memory = cluster.evaluate(cluster.profile(graph), w, cluster.local_cluster(1), cluster.Layout()).memory
    planned = sum(memory.get(k, 0.0) for k in ("weights", "gradients", "optimizer"))

    params = sum(p.numel() for p in sample_models.load("mlp", {})[0].parameters())
    expected = params * state_bytes(optimizer, element).total  # the record's bytes, for the model's parameters
    assert staged == rematted == planned == expected
    if optimizer == "none":  # training without state still holds the gradients
        assert device.gradients == device.parameters > 0 and pp.stage_backward_s[0] > 0
    if optimizer is None:
        assert device.gradients == 0 and pp.stage_backward_s[0] == 0


def test_an_unknown_optimizer_names_the_choices(mlp):
    graph, _ = mlp
    devices = partitioner.parse_devices("1x4GiB")
    match = "unknown optimizer 'adamw'; choose one of adam, sgd, none"
    with pytest.raises(PartitionError, match=match):
        state_bytes("adamw")
    with pytest.raises(PartitionError, match="training must be None .* one of adam, sgd, none \\(got 'adamw'\\)"):
        pipeline.plan(graph, devices, stages=1, microbatches=1, training="adamw")
    with pytest.raises(PartitionError, match=match):
        cluster.Workload(optimizer="adamw")
