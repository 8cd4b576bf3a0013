"""Accelerators and links for cluster planning: published peak figures, editable prices.

Peak FLOP/s are the vendors' dense BF16/FP16 tensor-core figures (no sparsity); memory is the
HBM (or GDDR) size; bandwidth the HBM bandwidth. Prices per device-hour are on-demand list
prices of the kind public clouds quoted in 2025 (rounded; edit them for your own quote). Links
carry a bandwidth per device and direction and a latency per message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from partitioner.errors import PartitionError

if TYPE_CHECKING:
    from partitioner.device_profile import DeviceProfile

__all__ = ["Accelerator", "Link", "Cluster", "ACCELERATORS", "LINKS", "cluster", "from_profile", "local_cluster"]


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bytes: int
    peak_flops: float  # dense BF16 FLOP/s
    memory_bandwidth_bytes_per_s: float
    price_per_hour: float  # one device, USD


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_bytes_per_s: float  # per device, one direction
    latency_s: float  # per message


GiB = 2**30
ACCELERATORS: dict[str, Accelerator] = {a.name: a for a in (
    Accelerator("a100-40gb", 40 * GiB, 312e12, 1.555e12, 3.0),
    Accelerator("a100-80gb", 80 * GiB, 312e12, 2.039e12, 4.0),
    Accelerator("h100-80gb", 80 * GiB, 989e12, 3.35e12, 6.0),
    Accelerator("h200-141gb", 141 * 10**9, 989e12, 4.8e12, 7.5),
    Accelerator("b200-192gb", 192 * 10**9, 2.25e15, 8.0e12, 10.0),
    Accelerator("mi300x-192gb", 192 * GiB, 1.307e15, 5.3e12, 5.0),
    Accelerator("l4-24gb", 24 * GiB, 121e12, 300e9, 0.8),
)}

LINKS: dict[str, Link] = {l.name: l for l in (
    Link("nvlink4", 450e9, 2e-6),  # H100 SXM: 900 GB/s both directions
    Link("nvlink3", 300e9, 2e-6),  # A100 SXM
    Link("nvlink5", 900e9, 2e-6),  # B200
    Link("infinity-fabric", 448e9, 2e-6),  # MI300X: 7 links of 64 GB/s
    Link("pcie5", 64e9, 5e-6),
    Link("pcie4", 32e9, 5e-6),
    Link("infiniband-ndr", 50e9, 5e-6),  # 400 Gb/s a device
    Link("infiniband-hdr", 25e9, 5e-6),  # 200 Gb/s a device
    Link("ethernet-100g", 12.5e9, 10e-6),
)}


@dataclass(frozen=True)
class Cluster:
    """Nodes of ``devices_per_node`` accelerators; ``intra`` links devices of a node, ``inter``
    nodes; ``headroom_bytes`` is kept free on every device (CUDA context, fragmentation)."""

    accelerator: Accelerator
    devices_per_node: int = 8
    intra: Link = LINKS["nvlink4"]
    inter: Link = LINKS["infiniband-ndr"]
    headroom_bytes: int = 4 * GiB

    def __post_init__(self) -> None:
        if not 1 <= self.devices_per_node <= 64:
            raise PartitionError(f"devices_per_node must be in [1, 64] (got {self.devices_per_node})")
        if not 0 <= self.headroom_bytes < self.accelerator.memory_bytes:
            raise PartitionError(f"headroom_bytes must be below the device memory "
                                 f"({self.accelerator.memory_bytes} B; got {self.headroom_bytes})")

    @property
    def usable_bytes(self) -> int:
        return self.accelerator.memory_bytes - self.headroom_bytes


def from_profile(profile: DeviceProfile, price_per_hour: float = 0.0) -> tuple[Accelerator, Link]:
    """A measured device profile as the planner's accelerator (its best measured FLOP/s and
    bandwidth) and link (its measured point-to-point latency and bandwidth)."""
    link = profile.link
    return (Accelerator(profile.name, profile.memory_bytes, profile.peak_flops, profile.memory_bandwidth_bytes_per_s,
                        price_per_hour),
            Link(f"{profile.name}-p2p", link.bandwidth_bytes_per_s if link else 10e9, link.latency_s if link else 5e-6))


def _profile_named(name: str) -> DeviceProfile | None:
    from partitioner.device_profile import find_profile, load_profile

    return load_profile(name) if name.endswith(".json") else find_profile(name)


def cluster(accelerator: str, devices_per_node: int = 8, intra: str | None = None, inter: str = "infiniband-ndr",
            headroom_bytes: int = 4 * GiB, price_per_hour: float | None = None,
            overrides: Mapping[str, float] | None = None) -> Cluster:
    """A :class:`Cluster` from preset names (``intra`` defaults to the accelerator's own link)."""
    measured = _profile_named(accelerator) if accelerator not in ACCELERATORS else None
    if accelerator not in ACCELERATORS and measured is None:
        raise PartitionError(f"unknown accelerator {accelerator!r}; choose one of {', '.join(ACCELERATORS)}, or a "
                             "profile measured by `partition-explorer calibrate` (its name or .json file)")
    if measured is not None:
        acc, own = from_profile(measured)
        if price_per_hour is not None:
            acc = dataclasses.replace(acc, price_per_hour=float(price_per_hour))
        if overrides:
            acc = dataclasses.replace(acc, **dict(overrides))  # type: ignore[arg-type]
        return Cluster(acc, devices_per_node, LINKS[intra] if intra else own, LINKS.get(inter, own), headroom_bytes)
    acc = ACCELERATORS[accelerator]
    if price_per_hour is not None:
        if not price_per_hour >= 0:
            raise PartitionError(f"price_per_hour must be >= 0 (got {price_per_hour})")
        acc = dataclasses.replace(acc, price_per_hour=float(price_per_hour))
    if overrides:
        acc = dataclasses.replace(acc, **dict(overrides))  # type: ignore[arg-type]
    default_intra = {"a100": "nvlink3", "b200": "nvlink5", "mi300x": "infinity-fabric", "l4": "pcie4"}
    intra = intra or default_intra.get(accelerator.split("-")[0], "nvlink4")
    for name in (intra, inter):
        if name not in LINKS:
            raise PartitionError(f"unknown link {name!r}; choose one of {', '.join(LINKS)}")
    return Cluster(acc, devices_per_node, LINKS[intra], LINKS[inter], headroom_bytes)


def local_cluster(devices: int, gpu: bool = False, accelerator: str = "h100-80gb") -> Cluster:
    """This machine as the planner sees it, for runs on its local processes: the ``accelerator``
    preset on GPUs; on CPUs the profile ``partition-explorer calibrate`` measured here, else the
    "cpu" device preset of :mod:`partitioner.devices` (its peak FLOP/s, memory bandwidth and link)."""
    if gpu:
        return cluster(accelerator, max(1, devices), headroom_bytes=0)
    from partitioner.device_profile import find_profile
    from partitioner.devices import PRESETS

    measured = find_profile("local")
    if measured is not None:
        acc, link = from_profile(measured)
        return Cluster(acc, max(1, devices), link, link, headroom_bytes=0)
    cpu = PRESETS["cpu"]
    acc = Accelerator("local-cpu", cpu["memory_bytes"], cpu["peak_flops"], cpu["memory_bandwidth_bytes_per_s"], 0.0)
    link = Link("local", cpu["link_bandwidth_bytes_per_s"], 5e-6)
    return Cluster(acc, max(1, devices), link, link, headroom_bytes=0)
