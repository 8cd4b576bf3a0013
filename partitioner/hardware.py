"""The one table of accelerators and links: datasheet figures per dtype, memory, links, prices.

Every device type of the explorer (the sidebar's presets, ``--devices 2xh100-80gb``, the cluster
planner's ``--accelerator``) is a row of :data:`HARDWARE`; :mod:`partitioner.devices` and
:mod:`partitioner.cluster.hardware` read it, nothing else lists a card. Torch-free.

Peak FLOP/s are the vendors' dense tensor-core figures (no sparsity) per dtype; ``float32`` is the
non-tensor-core FP32 rate eager PyTorch runs fp32 matmuls at (TF32 is off by default), ``tf32``
the TF32 tensor-core rate. Memory is the HBM (or GDDR) size, bandwidth the HBM bandwidth. Prices
per device-hour are on-demand list prices of the kind public clouds quoted in 2025 (rounded; edit
them for your own quote). A time is never priced from these peaks alone on a card with kernel
curves: see :func:`partitioner.cost.kernels.gpu_profile` (measured on H100 and H200, derived from
the nearest measured card for the others).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from partitioner.errors import DeviceSpecError
from partitioner.units import GiB, find_dtype

__all__ = ["Hardware", "Link", "HARDWARE", "LINKS", "ACCELERATOR_NAMES", "DTYPES", "hardware"]

DTYPES = ("float8", "bfloat16", "float16", "tf32", "float32")


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_bytes_per_s: float  # per device, one direction
    latency_s: float  # per message


@dataclass(frozen=True)
class Hardware:
    """One device type: the one record of a card's figures (a row of :data:`HARDWARE`, or a card
    of one's own or a measured one, :meth:`partitioner.cluster.Accelerator.custom`).
    ``peak_flops`` is the dense bf16 (fp16 where the card has no bf16) rate, the figure MFU is
    quoted against; ``peak_flops_by_dtype`` the rest of the datasheet (empty: ``peak_flops`` at
    every dtype)."""

    name: str
    memory_bytes: int
    peak_flops: float
    memory_bandwidth_bytes_per_s: float
    link: str  # the link between devices of one node (a key of LINKS)
    price_per_hour: float  # one device, USD
    # compared, not hashed (a dict): a card stays hashable, as the planner's records holding it
    peak_flops_by_dtype: Mapping[str, float] = field(default_factory=dict, hash=False)
    accelerator: bool = True  # False for the host CPU preset
    vendor: str = ""

    def __post_init__(self) -> None:
        if self.link not in LINKS:
            raise DeviceSpecError(
                f"device type {self.name!r}: unknown link {self.link!r}; choose one of {', '.join(LINKS)}"
            )

    def peak_for(self, dtype: str | None) -> float:
        """The datasheet peak at ``dtype`` (``torch.float32`` and ``float32`` alike); the bf16
        figure for a dtype the datasheet does not give."""
        found = find_dtype(dtype or "bfloat16")
        name = found.peak_key if found is not None else str(dtype)
        return float(self.peak_flops_by_dtype.get(name, self.peak_flops))

    @property
    def link_bandwidth_bytes_per_s(self) -> float:
        return LINKS[self.link].bandwidth_bytes_per_s


LINKS: dict[str, Link] = {
    lk.name: lk
    for lk in (
        Link("nvlink4", 450e9, 2e-6),  # H100/H200 SXM: 900 GB/s both directions
        Link("nvlink3", 300e9, 2e-6),  # A100 SXM
        Link("nvlink2", 150e9, 2e-6),  # V100 SXM2
        Link("nvlink5", 900e9, 2e-6),  # B200
        Link("infinity-fabric", 448e9, 2e-6),  # MI300X: 7 links of 64 GB/s
        Link("ici-v4", 100e9, 2e-6),  # TPU v4 inter-chip interconnect, per chip and direction (rounded)
        Link("pcie5", 64e9, 5e-6),
        Link("pcie4", 32e9, 5e-6),
        Link("pcie3", 16e9, 5e-6),
        Link("infiniband-ndr", 50e9, 5e-6),  # 400 Gb/s a device
        Link("infiniband-hdr", 25e9, 5e-6),  # 200 Gb/s a device
        Link("ethernet-100g", 12.5e9, 10e-6),
        Link("host", 10e9, 5e-6),  # processes on one host (shared memory)
    )
}


def _peaks(
    bf16: float,
    fp16: float | None = None,
    tf32: float | None = None,
    fp32: float | None = None,
    fp8: float | None = None,
) -> dict[str, float]:
    out = {"bfloat16": bf16, "float16": fp16 if fp16 is not None else bf16}
    for key, value in (("tf32", tf32), ("float32", fp32), ("float8", fp8)):
        if value is not None:
            out[key] = value
    return out


HARDWARE: dict[str, Hardware] = {
    h.name: h
    for h in (
        # NVIDIA datasheets (SXM parts), dense figures.
        Hardware(
            "h100-80gb",
            80 * GiB,
            989e12,
            3.35e12,
            "nvlink4",
            6.0,
            _peaks(989e12, tf32=494.5e12, fp32=66.9e12, fp8=1979e12),
            vendor="nvidia",
        ),
        Hardware(
            "h200-141gb",
            141 * 10**9,
            989e12,
            4.8e12,
            "nvlink4",
            7.5,
            _peaks(989e12, tf32=494.5e12, fp32=66.9e12, fp8=1979e12),
            vendor="nvidia",
        ),
        Hardware(
            "b200-192gb",
            192 * 10**9,
            2.25e15,
            8.0e12,
            "nvlink5",
            10.0,
            _peaks(2.25e15, tf32=1.1e15, fp32=75e12, fp8=4.5e15),
            vendor="nvidia",
        ),
        Hardware(
            "a100-40gb",
            40 * GiB,
            312e12,
            1.555e12,
            "nvlink3",
            3.0,
            _peaks(312e12, tf32=156e12, fp32=19.5e12),
            vendor="nvidia",
        ),
        Hardware(
            "a100-80gb",
            80 * GiB,
            312e12,
            2.039e12,
            "nvlink3",
            4.0,
            _peaks(312e12, tf32=156e12, fp32=19.5e12),
            vendor="nvidia",
        ),
        Hardware(
            "l4-24gb",
            24 * GiB,
            121e12,
            300e9,
            "pcie4",
            0.8,
            _peaks(121e12, tf32=60e12, fp32=30.3e12, fp8=242e12),
            vendor="nvidia",
        ),
        # V100 and T4 have no bf16 tensor cores: their bf16 runs on the fp32 units.
        Hardware(
            "v100-16gb",
            16 * GiB,
            125e12,
            900e9,
            "nvlink2",
            2.5,
            {"float16": 125e12, "bfloat16": 15.7e12, "float32": 15.7e12},
            vendor="nvidia",
        ),
        Hardware(
            "t4-16gb",
            16 * GiB,
            65e12,
            320e9,
            "pcie3",
            0.35,
            {"float16": 65e12, "bfloat16": 8.1e12, "float32": 8.1e12},
            vendor="nvidia",
        ),
        Hardware(
            "mi300x-192gb",
            192 * GiB,
            1.307e15,
            5.3e12,
            "infinity-fabric",
            5.0,
            _peaks(1.307e15, tf32=653.7e12, fp32=163.4e12, fp8=2.615e15),
            vendor="amd",
        ),
        Hardware("tpu-v4", 32 * GiB, 275e12, 1.2e12, "ici-v4", 3.2, _peaks(275e12), vendor="google"),
        # The host, for plans over local processes (no kernel curves: `partition-explorer calibrate`).
        Hardware("cpu", 64 * GiB, 1e12, 100e9, "host", 0.0, {"float32": 1e12, "bfloat16": 1e12}, accelerator=False),
    )
}

ACCELERATOR_NAMES = tuple(name for name, h in HARDWARE.items() if h.accelerator)


def hardware(name: str) -> Hardware:
    """The row called ``name`` (case-insensitive); :class:`KeyError` naming the valid ones."""
    key = name.strip().lower()
    if key not in HARDWARE:
        raise KeyError(f"unknown device type {name!r}; choose one of {', '.join(HARDWARE)}")
    return HARDWARE[key]
