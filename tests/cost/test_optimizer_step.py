"""An optimizer step's bytes (NOTE: [Optimizer step] in partitioner.cost.training) against the
kernels torch.optim's foreach step really dispatches, and the planner's step time against the
step measured on an H100 (bench/results: AdamW over Llama-3-8B's 4-layer config)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import partitioner
import sample_models
from partitioner import cluster
from partitioner.cost.training import OPTIMIZERS, step_bytes

FOREACH = {
    "adam": lambda params: torch.optim.AdamW(params, lr=1e-3, foreach=True),
    "sgd": lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True),
}


class _Passes(TorchDispatchMode):
    """Counts, over the foreach ops dispatched, the parameter-sized tensor lists each reads and
    the one it writes."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.passes = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        lists = [
            a
            for a in (*args, *kwargs.values())
            if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor) and a[0].numel() == self.numel
        ]
        if lists and func.__name__.startswith("_foreach_"):
            self.passes += len(lists) + 1
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(FOREACH))
def test_the_foreach_passes_are_what_torch_optim_dispatches(name):
    params = [torch.nn.Parameter(torch.randn(4, 4)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = FOREACH[name](params)
    opt.step()  # the first step makes the state (SGD clones the gradient into its momentum)
    with _Passes(16) as counted:
        opt.step()
    assert OPTIMIZERS[name].foreach_passes == counted.passes


def test_a_fused_step_moves_the_zero_papers_bytes_and_foreach_more():
    # fused Adam in bf16 mixed precision: read the gradient (2), read and write the fp32 master and
    # two moments (2 x 12), write the bf16 weight from the master (4 + 2)
    assert step_bytes("adam", 2, foreach=False) == 32
    assert step_bytes("adam", 2) == 21 * 4 + 12  # the copies in and out of fp32
    assert step_bytes("adam", 4) == 21 * 4  # full precision: no master, no copies
    assert step_bytes("none", 2) == step_bytes(None, 2) == 0


def test_the_planners_adam_step_is_the_one_measured_on_an_h100():
    """AdamW's step and the two copies of mixed precision over 1.92 billion parameters: 57.3 ms
    and 8.6 ms on an H100 (torch 2.11, torch.profiler)."""
    module, example = sample_models.build("mlp")
    prof = cluster.profile(partitioner.trace(module, example))
    acc = cluster.cluster("h100-80gb").accelerator
    predicted = prof.optimizer_seconds(1.923e9, "adam", 2, acc)
    assert predicted == pytest.approx(57.3e-3 + 8.6e-3, rel=0.05)
