"""Accelerators and links for cluster planning, read from the one hardware table
(:mod:`partitioner.hardware`): datasheet figures, editable prices, and each card's kernel curves
(:mod:`partitioner.profiles`: measured on H100 and H200, derived for the others), which price
the planner's compute op by op under an engine (eager PyTorch by default); and what the serving
engines configure on a card by default (NOTE: [Serving engine defaults]).

# NOTE: [Serving engine defaults]
vLLM's ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py) sets ``max_num_batched_tokens``,
the tokens one forward pass takes with chunked prefill on, by the card: 8,192 for the OpenAI-
compatible server (16,384 for the offline ``LLM`` class) on cards of at least 70 GiB that are not
A100s ("For GPUs like H100 and MI300x, use larger default values"), 2,048 (8,192) on the others;
:func:`serving_chunk_tokens` takes the server's. ``--gpu-memory-utilization`` defaults to 0.9: the
engine sizes its KV cache so weights, activations and cache take 90 % of the card
(``GPU_MEMORY_UTILIZATION``), the rest left to the CUDA context and other processes. The cache is
allocated in blocks of ``--block-size`` 16 tokens a sequence (``KV_BLOCK_TOKENS``, PagedAttention,
Kwon et al. 2023).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from partitioner.errors import PartitionError
from partitioner.hardware import ACCELERATOR_NAMES, HARDWARE, LINKS, Hardware, Link
from partitioner.kernels import ENGINES, GpuKernels
from partitioner.units import GiB, find_dtype

if TYPE_CHECKING:
    from partitioner.device_profile import DeviceProfile

__all__ = [
    "Accelerator",
    "Link",
    "Cluster",
    "ACCELERATORS",
    "LINKS",
    "cluster",
    "from_profile",
    "local_cluster",
    "serving_chunk_tokens",
    "GPU_MEMORY_UTILIZATION",
    "KV_BLOCK_TOKENS",
    "HOST_MEMORY_BYTES",
]

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's --gpu-memory-utilization default (NOTE: [Serving engine defaults])
KV_BLOCK_TOKENS = 16  # vLLM's --block-size default on CUDA


# The link inside a node of a card of one's own (Accelerator.custom): an H100 node's NVLink, a
# Cluster's default ``intra``. A Cluster, not its card, says which links a plan runs on.
CUSTOM_LINK = "nvlink4"


@dataclass(frozen=True)
class Accelerator:
    """A device type as the planner times it: the card (:class:`~partitioner.hardware.Hardware`,
    the one record of its figures: a row of the hardware table, a card of one's own or a measured
    one) and how its times are made (its kernel curves under an engine, or the roofline of its
    figures). The card's figures read through: ``acc.memory_bytes``, ``acc.peak_flops``..."""

    card: Hardware
    kernels: GpuKernels | None = dataclasses.field(default=None, compare=False, repr=False)  # per-op curves
    engine: str = "eager"  # what its times assume (partitioner.kernels.ENGINES)
    # whether a person named the engine (``h100-80gb@eager``); serving prices an unnamed one as the
    # serving engines run (NOTE: [Serving engine] in partitioner.cluster.serving)
    engine_chosen: bool = dataclasses.field(default=False, compare=False)
    # a calibrated profile's "calibrated <UTC date> at load <x>" (partitioner.calibration.naming); "" for a preset
    calibrated: str = dataclasses.field(default="", compare=False)

    @classmethod
    def custom(
        cls,
        name: str,
        memory_bytes: int,
        peak_flops: float,
        memory_bandwidth_bytes_per_s: float,
        price_per_hour: float = 0.0,
        host: bool = False,
    ) -> "Accelerator":
        """A card of one's own (no datasheet row, no kernel curves: timed by the roofline of
        ``peak_flops``, the dense bf16 rate at every dtype, and the memory bandwidth); ``host``:
        the processes of a host, linked as a host's are."""
        link = "host" if host else CUSTOM_LINK
        card = Hardware(
            name, memory_bytes, peak_flops, memory_bandwidth_bytes_per_s, link, price_per_hour, accelerator=not host
        )
        return cls(card)

    @property
    def name(self) -> str:
        return self.card.name

    @property
    def memory_bytes(self) -> int:
        return self.card.memory_bytes

    @property
    def peak_flops(self) -> float:
        """Dense BF16 FLOP/s (what MFU is quoted against)."""
        return self.card.peak_flops

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.card.memory_bandwidth_bytes_per_s

    @property
    def price_per_hour(self) -> float:
        """One device, USD."""
        return self.card.price_per_hour

    def with_card(self, **figures: Any) -> "Accelerator":
        """The same accelerator on a card with other ``figures`` (fields of
        :class:`~partitioner.hardware.Hardware`: a price, a memory)."""
        return dataclasses.replace(self, card=dataclasses.replace(self.card, **figures))

    @property
    def assumes(self) -> str:
        """What a time on this accelerator assumes, in words: with a calibrated profile, when and at
        what load it was measured."""
        when = f"; {self.calibrated}" if self.calibrated else ""
        if self.kernels is None:
            if self.calibrated:
                return f"the peak FLOP/s and memory bandwidth measured on {self.name}{when}"
            return "the roofline of the datasheet's peak FLOP/s and memory bandwidth (no kernel curves)"
        where = self.kernels.derived_from or f"kernel curves measured on {self.kernels.gpu}"
        return f"{ENGINES[self.engine]}; {where}{when}"

    def with_engine(self, engine: str) -> "Accelerator":
        if engine not in ENGINES:
            raise PartitionError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        return dataclasses.replace(self, engine=engine, engine_chosen=True)

    def peak_for(self, dtype: str | None) -> float:
        """The dense matrix rate a workload of ``dtype`` is floored at: the card's datasheet FP8
        figure for fp8 where it gives one, else :attr:`peak_flops` (bf16; the times themselves come
        from the kernel curves at the workload's dtype)."""
        found = find_dtype(dtype or "bfloat16")
        if found is not None and found.peak_key == "float8":
            return self.card.peak_for("float8")
        return self.peak_flops


def _accelerator(name: str) -> Accelerator:
    from partitioner.profiles import gpu_kernels

    card = HARDWARE[name]
    kernels = gpu_kernels(name)
    fp8 = card.peak_flops_by_dtype.get("float8")
    if kernels is not None and fp8:  # NOTE: [FP8 from the bf16 curves] in partitioner.kernels
        kernels = kernels.with_derived_dtype("float8_e4m3fn", fp8 / card.peak_flops_by_dtype["bfloat16"])
    return Accelerator(card, kernels=kernels)


# A node's host (CPU) memory, which ZeRO-Offload fills: NVIDIA's DGX H100 datasheet gives its 8-GPU node
# 2 TB of system memory (32 DIMMs of 64 GiB: 2 TiB); settable per cluster (``--host-memory``).
HOST_MEMORY_BYTES = 2 * 2**40
ACCELERATORS: dict[str, Accelerator] = {name: _accelerator(name) for name in ACCELERATOR_NAMES}


@dataclass(frozen=True)
class Cluster:
    """Nodes of ``devices_per_node`` accelerators; ``intra`` links devices of a node, ``inter``
    nodes; ``headroom_bytes`` is kept free on every device (CUDA context, fragmentation)."""

    accelerator: Accelerator
    devices_per_node: int = 8
    intra: Link = LINKS["nvlink4"]
    inter: Link = LINKS["infiniband-ndr"]
    headroom_bytes: int = 4 * GiB
    # serving: the share of each card the engine takes (vLLM's --gpu-memory-utilization, SGLang's
    # --mem-fraction-static); the rest is the CUDA context's and other processes'
    memory_utilization: float = GPU_MEMORY_UTILIZATION
    # the host (CPU) memory of a node, which ZeRO-Offload's optimizer state must fit in
    # (:func:`partitioner.cluster.memory.host_bytes`); default: a DGX H100's 2 TiB
    host_memory_bytes: int = HOST_MEMORY_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.host_memory_bytes, bool) or not self.host_memory_bytes > 0:
            raise PartitionError(
                f"host_memory_bytes must be > 0 (got {self.host_memory_bytes}); e.g. 2 TiB for a DGX H100 node"
            )
        if not 0 < self.memory_utilization <= 1:
            raise PartitionError(f"memory_utilization must be in (0, 1] (got {self.memory_utilization})")
        if not 1 <= self.devices_per_node <= 64:
            raise PartitionError(f"devices_per_node must be in [1, 64] (got {self.devices_per_node})")
        if not 0 <= self.headroom_bytes < self.accelerator.memory_bytes:
            raise PartitionError(
                f"headroom_bytes must be below the device memory "
                f"({self.accelerator.memory_bytes} B; got {self.headroom_bytes})"
            )

    @property
    def usable_bytes(self) -> int:
        return self.accelerator.memory_bytes - self.headroom_bytes


def serving_chunk_tokens(acc: Accelerator) -> int:
    """The tokens one chunked-prefill pass takes on ``acc``: vLLM's server default
    ``max_num_batched_tokens`` for the card (NOTE: [Serving engine defaults]). O(1)."""
    return 8192 if acc.memory_bytes >= 70 * GiB and "a100" not in acc.name.lower() else 2048


def from_profile(profile: DeviceProfile, price_per_hour: float = 0.0) -> tuple[Accelerator, Link]:
    """A measured device profile as the planner's accelerator (its best measured FLOP/s and
    bandwidth) and link (its measured point-to-point latency and bandwidth), saying when and at what
    load it was measured."""
    from partitioner.calibration.naming import calibrated_words

    link = profile.link
    measured = Accelerator.custom(
        profile.name,
        profile.memory_bytes,
        profile.peak_flops,
        profile.memory_bandwidth_bytes_per_s,
        price_per_hour,
        host=profile.gpu is None,  # measured on the host's processes, not a GPU's kernels
    )
    return (
        dataclasses.replace(measured, kernels=profile.gpu, engine=profile.engine, calibrated=calibrated_words(profile)),
        Link(f"{profile.name}-p2p", link.bandwidth_bytes_per_s if link else 10e9, link.latency_s if link else 5e-6),
    )


def _profile_named(name: str) -> DeviceProfile | None:
    from partitioner.device_profile import find_profile, load_profile

    return load_profile(name) if name.endswith(".json") else find_profile(name)


def cluster(
    accelerator: str,
    devices_per_node: int = 8,
    intra: str | None = None,
    inter: str = "infiniband-ndr",
    headroom_bytes: int = 4 * GiB,
    price_per_hour: float | None = None,
    overrides: Mapping[str, Any] | None = None,
    engine: str | None = None,
    host_memory_bytes: int = HOST_MEMORY_BYTES,
) -> Cluster:
    """A :class:`Cluster` from preset names (``intra`` defaults to the accelerator's own link).
    ``engine`` names what the times assume (:data:`partitioner.kernels.ENGINES`; unnamed: eager for
    training, the serving engines' for inference, NOTE: [Serving engine]); ``overrides`` set the
    card's figures (fields of :class:`~partitioner.hardware.Hardware`), and of the peak FLOP/s or
    bandwidth price the compute by the roofline of those figures (the card's kernel curves no
    longer describe it). ``host_memory_bytes``: a node's host memory, which ZeRO-Offload
    fills (default :data:`HOST_MEMORY_BYTES`, a DGX H100's)."""
    if "@" in accelerator:  # "h100-80gb@graphs"
        accelerator, _, engine = accelerator.rpartition("@")
    if engine is not None and engine not in ENGINES:
        raise PartitionError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)} (write NAME@ENGINE)")
    measured = _profile_named(accelerator) if accelerator not in ACCELERATORS else None
    if accelerator not in ACCELERATORS and measured is None:
        raise PartitionError(
            f"unknown accelerator {accelerator!r}; choose one of {', '.join(ACCELERATORS)}, or a "
            "profile measured by `partition-explorer calibrate` (its name or .json file)"
        )
    if measured is not None:
        acc, own = from_profile(measured)
        if price_per_hour is not None:
            acc = acc.with_card(price_per_hour=float(price_per_hour))
        acc = _named_engine(_overridden(acc, overrides), engine)
        return Cluster(
            acc,
            devices_per_node,
            LINKS[intra] if intra else own,
            LINKS.get(inter, own),
            headroom_bytes,
            host_memory_bytes=host_memory_bytes,
        )
    acc = ACCELERATORS[accelerator]
    if price_per_hour is not None:
        if not price_per_hour >= 0:
            raise PartitionError(f"price_per_hour must be >= 0 (got {price_per_hour})")
        acc = acc.with_card(price_per_hour=float(price_per_hour))
    acc = _named_engine(_overridden(acc, overrides), engine)
    intra = intra or acc.card.link
    for name in (intra, inter):
        if name not in LINKS:
            raise PartitionError(f"unknown link {name!r}; choose one of {', '.join(LINKS)}")
    return Cluster(
        acc, devices_per_node, LINKS[intra], LINKS[inter], headroom_bytes, host_memory_bytes=host_memory_bytes
    )


def _named_engine(acc: Accelerator, engine: str | None) -> Accelerator:
    """``acc`` under the engine a person named; unnamed, its own (eager) and marked not chosen."""
    return acc if engine is None else acc.with_engine(engine)


def _overridden(acc: Accelerator, overrides: Mapping[str, Any] | None) -> Accelerator:
    """``acc`` on its card with ``overrides`` of its figures (fields of the card: name, memory,
    peak FLOP/s, bandwidth, price). A new peak FLOP/s leaves the datasheet's other dtypes behind
    (FP8 then runs at that peak), and a new peak or bandwidth the kernel curves (the roofline of
    those figures prices the compute)."""
    if not overrides:
        return acc
    changed = {k: v for k, v in overrides.items() if getattr(acc.card, k) != v}
    if "peak_flops" in changed:
        changed["peak_flops_by_dtype"] = {}
    out = acc.with_card(**changed)
    if {"peak_flops", "memory_bandwidth_bytes_per_s"} & set(changed):
        out = dataclasses.replace(out, kernels=None)
    return out


def local_cluster(devices: int, gpu: bool = False, accelerator: str = "h100-80gb") -> Cluster:
    """This machine as the planner sees it, for runs on its local processes: the ``accelerator``
    preset on GPUs; on CPUs the profile ``partition-explorer calibrate`` measured here, else the
    "cpu" device preset of :mod:`partitioner.devices` (its peak FLOP/s, memory bandwidth and link)."""
    if gpu:
        return cluster(accelerator, max(1, devices), headroom_bytes=0)
    from partitioner.device_profile import find_profile

    measured = find_profile("local")
    if measured is not None:
        acc, link = from_profile(measured)
        return Cluster(acc, max(1, devices), link, link, headroom_bytes=0)
    cpu = HARDWARE["cpu"]
    acc = Accelerator(dataclasses.replace(cpu, name="local-cpu", price_per_hour=0.0))
    link = Link("local", cpu.link_bandwidth_bytes_per_s, 5e-6)
    return Cluster(acc, max(1, devices), link, link, headroom_bytes=0)
