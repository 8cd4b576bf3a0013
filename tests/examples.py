"""Test inputs: the reference partitioner's worked example, small random fx models, a host device
profile given by hand and the command line's ``--set`` arguments."""

from __future__ import annotations

import dataclasses

import torch

import partitioner
from partitioner import units
from partitioner.device_profile import DeviceProfile


class WorkedExample(torch.nn.Module):
    """The cost-aware example of torch's own partitioner tests (devices of 125 B, rate 2 B/s)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("b", torch.rand(4))
        self.register_buffer("c", torch.rand(4))
        self.register_buffer("d", torch.rand(4))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        add_1 = a + self.b
        add_2 = add_1 + self.c
        linear_1 = self.linear(add_1)
        add_3 = add_2 + self.d
        add_4 = add_2 + linear_1
        add_5 = add_3 + add_4
        return add_5


def reference_latencies(graph: partitioner.Graph) -> dict[str, tuple[float, float]]:
    """The node latencies torch's partitioner tests use: memory = total bytes, compute =
    1 for parameter-free nodes, else output bytes."""
    return {
        nd.name: (float(nd.total_bytes), 1.0 if nd.param_bytes == 0 else float(nd.output_bytes))
        for nd in graph.nodes
        if nd.is_op
    }


def host_profile(**changes: object) -> DeviceProfile:
    """A host profile given by hand, so that nothing is measured: 8 GiB, 1 us an op, 2 us more a
    module call, a float32 matmul curve and a copy at 1 GB/s to 10 GB/s; ``changes`` replace or add
    fields (collectives, elementwise curves, ...)."""
    base = DeviceProfile(
        name="box",
        memory_bytes=8 * units.GiB,
        launch_s=1e-6,
        module_overhead_s=2e-6,
        matmul=(("float32", ((2e3, 3e-6), (2e6, 2.01e-4))),),
        copy=((1e3, 2e-6), (1e6, 1.01e-4)),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def set_args(**fields: object) -> list[str]:
    """The command line's ``--set KEY=VALUE`` arguments for ``fields``, in their order."""
    return [a for k, v in fields.items() for a in ("--set", f"{k}={v}")]
