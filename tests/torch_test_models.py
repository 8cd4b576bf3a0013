"""The models of torch's own partitioner tests (``test/test_fx_experimental.py``), rebuilt with
the devices, latencies and transfer rates those tests use, for the differential tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from partitioner import Device


class AddLinearAdd(torch.nn.Module):  # test_size_based_partition
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.c = torch.rand(4)

    def forward(self, a, b):
        return self.linear(a + b) + self.c


class DeviceMapping(torch.nn.Module):  # test_partition_device_mapping
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, a):
        linear_1 = self.linear(a + torch.rand(4))
        return torch.rand(4) + a + linear_1


class Diamond(torch.nn.Module):  # test_partition_latency, test_saturate_host
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, a):
        add_1 = a + torch.rand(4)
        add_2 = add_1 + torch.rand(4)
        add_3 = add_2 + self.linear(add_1)
        return add_2 + add_3


class TwoBranches(Diamond):  # test_cost_aware_partition: the same layer, another graph
    def forward(self, a):
        add_1 = a + torch.rand(4)
        add_2 = add_1 + torch.rand(4)
        linear_1 = self.linear(add_1)
        add_3 = add_2 + torch.rand(4)
        return add_3 + (add_2 + linear_1)


class LinearResidual(torch.nn.Module):  # test_large_node_error
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, a):
        return self.linear(a) + a


class Add(torch.nn.Module):  # test_lack_of_devices
    def forward(self, a, b):
        return a + b


def size_latency(compute_of_plain: Callable[[int], float]):
    """Torch's tests' node latencies from node sizes: (total size, output size), or
    (total size, ``compute_of_plain(total)``) for a node without parameters."""

    def latency(graph) -> dict[str, tuple[float, float]]:
        out = {}
        for v in graph.op_indices:
            node = graph.nodes[v]
            if node.total_bytes == node.output_bytes:
                out[node.name] = (float(node.total_bytes), float(compute_of_plain(node.total_bytes)))
            else:
                out[node.name] = (float(node.total_bytes), float(node.output_bytes))
        return out

    return latency


@dataclass
class Case:
    name: str
    model: torch.nn.Module
    inputs: tuple
    devices: list[Device]
    rate: float | None = None
    latency: Callable | None = None
    fails: bool = False  # torch's test expects a RuntimeError
    saturate_host: bool = False
    extra: dict = field(default_factory=dict)


def _devices(*memories: int) -> list[Device]:
    return [Device(f"dev_{i}", m, i) for i, m in enumerate(memories)]


def cases() -> list[Case]:
    torch.manual_seed(0)
    return [
        Case("size_based", AddLinearAdd(), (torch.rand(4), torch.rand(4)), _devices(125, 125, 125)),
        Case("device_mapping", DeviceMapping(), (torch.rand(4),), _devices(120, 160)),
        Case(
            "partition_latency",
            Diamond(),
            (torch.rand(4),),
            _devices(200, 200),
            rate=2.0,
            latency=size_latency(lambda total: 2.0 * total),
        ),
        Case(
            "cost_aware",
            TwoBranches(),
            (torch.rand(4),),
            _devices(125, 125, 125, 125),
            rate=2.0,
            latency=size_latency(lambda total: 1.0),
        ),
        Case("saturate_host", Diamond(), (torch.rand(4),), _devices(200, 200, 100, 100, 200, 100), saturate_host=True),
        Case("large_node", LinearResidual(), (torch.rand(4),), _devices(40, 40, 40, 40, 40), fails=True),
        Case("lack_of_devices", Add(), (torch.rand(4), torch.rand(4)), _devices(4, 4), fails=True),
    ]
