"""Parsing and formatting of bytes, seconds and rates, and the one dtype table: the one set every
front end uses.

Plans keep integer bytes and float seconds; these functions only read what people type
(``"16GiB"``, ``"25GB"``) and write what people read (``"1.5 KiB"``, ``"22.5 us"``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable

from partitioner.errors import DeviceSpecError, PartitionError

__all__ = [
    "GiB",
    "BYTE_UNITS",
    "parse_bytes",
    "format_bytes",
    "format_seconds",
    "format_rate",
    "parse_rate",
    "format_flops",
    "format_change",
    "format_share",
    "format_signed",
    "DType",
    "DTYPES",
    "PRECISIONS",
    "HALF_FLOATS",
    "dtype",
    "find_dtype",
    "dtype_for_bytes",
    "dominant_dtype",
]

GiB = 2**30  # one gibibyte: every module that counts in GiB imports this one

BYTE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": GiB,
    "TIB": 2**40,
}

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def parse_bytes(text: str | int) -> int:
    """``"16GiB"`` -> 17179869184. Units: B, KB, MB, GB, TB (powers of 10), KiB, MiB, GiB, TiB."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = re.fullmatch(rf"\s*{_NUMBER}\s*([A-Za-z]*)\s*", str(text))
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in BYTE_UNITS:
        raise DeviceSpecError(
            f"cannot read a size from {text!r}; write a number with a unit such as "
            "'512MiB', '16GiB', '1536KiB' or '1000000B'"
        )
    value = float(match.group(1)) * BYTE_UNITS[unit]
    if not math.isfinite(value):
        raise DeviceSpecError(f"size {text!r} is too large to be a memory size; write e.g. '16GiB'")
    return int(round(value))


def parse_rate(text: str | float) -> float:
    """Bytes per second from ``25e9``, ``"25GB"`` or ``"25GB/s"``; must be positive and finite."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        body = str(text).strip()
        body = body[:-2] if body.lower().endswith("/s") else body
        try:
            value = float(body)
        except ValueError:
            value = float(parse_bytes(body))
    if not (math.isfinite(value) and value > 0):
        raise DeviceSpecError(
            f"a transfer rate must be a positive, finite number of bytes per second (got {text!r}); e.g. 25e9 or 25GB"
        )
    return value


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'. For display only; plans keep integer bytes."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{value:.0f} {unit}"
            return f"{value:.0f} {unit}" if abs(value) >= 999.5 else f"{value:.3g} {unit}"  # not 1e+03
        value /= 1024
    return f"{value:.3g} TiB"  # pragma: no cover


def format_seconds(seconds: float | None) -> str:
    """2.25e-05 -> '22.5 us'. For display only; plans keep float seconds."""
    if seconds is None:
        return "-"
    if math.isnan(seconds):
        return "nan"
    if math.isinf(seconds):
        return "inf (cycle)"
    if abs(seconds) < 1e-15:
        return "0 s"
    value = abs(seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if float(f"{value / scale:.3g}") >= 1 or unit == "ns":  # 999.9996 ns rounds to 1 us, not 1e+03 ns
            return f"{seconds:,.0f} s" if value >= 999.5 else f"{seconds / scale:.3g} {unit}"  # not 1.23e+03 s
    return f"{seconds:.3g} s"  # pragma: no cover


def format_rate(rate: float | None) -> str:
    """25e9 -> '25 GB/s'; None or inf -> 'free'."""
    if rate is None or math.isinf(rate):
        return "free"
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.3g} {unit}"
    return f"{rate:.3g} B/s"


def format_flops(n: int) -> str:
    """``n`` floating-point operations in the largest unit that keeps a digit: ``'1.5 GFLOP'``."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} FLOP"


def format_change(fraction: float, more: str = "slower", less: str = "faster", same: str = "the same") -> str:
    """A relative change as a person writes it: ``'12.5% slower'``, ``'3.1% faster'``, or ``same``
    when it rounds to 0.0 % (never ``'-0.0%'``)."""
    if not math.isfinite(fraction):
        return f"infinitely {more}" if fraction > 0 else same
    if abs(fraction) < 0.0005:
        return same
    return f"{abs(fraction):.1%} {more if fraction > 0 else less}"


def format_share(part: float, whole: float) -> str:
    """``part`` of ``whole`` as a percentage that never reads 0.0 % for something: ``'<0.1%'``."""
    if whole <= 0:
        return "-"
    share = part / whole
    if 0 < share < 0.0005:
        return "<0.1%"
    return f"{share:.1%}"


def format_signed(fraction: float) -> str:
    """A signed percentage as a person writes it: ``'+12.5%'``, ``'-3.1%'``, and ``'0%'`` when it
    rounds to 0.0 % (never ``'-0.0%'`` or ``'+0.0%'``)."""
    if math.isnan(fraction):
        return "-"
    if math.isinf(fraction):
        return "+inf" if fraction > 0 else "-inf"
    if abs(fraction) < 0.0005:
        return "0%"
    return f"{fraction:+.1%}"


@dataclass(frozen=True)
class DType:
    """One element type: its names, its size, and what each reader needs of it (the loader, the
    cluster planner, the calibration, the hardware table's datasheet key)."""

    name: str  # canonical: torch's attribute name (torch.bfloat16 -> "bfloat16")
    short: str  # what people type: "bf16"
    bits: int  # bits an element takes (int4: 4, packed two to a byte)
    peak_key: str  # the key of Hardware.peak_flops_by_dtype for its matrix rate
    aliases: tuple[str, ...] = ()  # further names read as this type ("half", "float8")
    loads_as: str = ""  # what the Hugging Face loader builds: "" loads as itself, "bfloat16" weight-only
    precision: bool = False  # a precision the cluster planner trains and serves in (bf16 mixed, fp8, fp32 full)
    calibrated: bool = False  # ``calibrate`` measures its matrix products on the host
    gpu_calibrated: bool = False  # ``calibrate --gpu`` measures its matmul curves (a GPU profile's dtypes)

    @property
    def bytes(self) -> int:
        """One element's bytes in memory (torch's ``element_size()``; int4 is stored a byte each)."""
        return max(1, self.bits // 8)

    @property
    def floating(self) -> bool:
        """A floating-point format (int8 and int4 are quantised integers)."""
        return not self.name.startswith("int")

    @property
    def torch_name(self) -> str:
        """The attribute of ``torch`` the loader builds (``getattr(torch, d.torch_name)``)."""
        return self.loads_as or self.name

    @property
    def weight_scale(self) -> float:
        """The share of its ``loads_as`` bytes a weight-only format's weights take (1 otherwise)."""
        return self.bits / 16 if self.loads_as else 1.0

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, self.short, *self.aliases)

    @property
    def label(self) -> str:
        """How a page names a training precision: ``"bf16 (mixed)"`` keeps fp32 master weights."""
        return f"{self.short} (mixed)" if self.bytes < 4 else self.short


# torch's dtypes (torch.finfo for the float formats); fp8/int8/int4 as the loader reads them:
# weights only, the model computing in bf16 (NOTE: weight_scale in sample_models/_hf.py).
DTYPES: tuple[DType, ...] = (
    DType("float32", "fp32", 32, "float32", ("float", "f32"), precision=True, calibrated=True, gpu_calibrated=True),
    DType("bfloat16", "bf16", 16, "bfloat16", (), precision=True, calibrated=True, gpu_calibrated=True),
    DType("float16", "fp16", 16, "float16", ("half", "f16"), gpu_calibrated=True),
    DType("float8_e4m3fn", "fp8", 8, "float8", ("float8", "float8_e4m3"), loads_as="bfloat16", precision=True),
    DType("float8_e5m2", "fp8_e5m2", 8, "float8", loads_as="bfloat16"),
    DType("float64", "fp64", 64, "float64", ("double",)),
    DType("int8", "int8", 8, "int8", (), loads_as="bfloat16"),
    DType("int4", "int4", 4, "int4", (), loads_as="bfloat16"),
)
# The precisions the cluster planner trains and serves in, bf16 mixed precision (the default) first,
# then the smaller before the larger: fp8 (FP8 products, bf16 weights and fp32 master and state in
# training, NOTE: [FP8 training state] in partitioner.cost.training; 1-byte weights and KV cache in
# serving), fp32.
PRECISIONS: tuple[DType, ...] = tuple(
    sorted((d for d in DTYPES if d.precision), key=lambda d: (d.name != "bfloat16", d.bytes))
)
# The 16-bit floating types (bf16, fp16): the mixed precisions an engine switches on by name
# (Megatron-LM's --bf16 / --fp16, DeepSpeed's "bf16" / "fp16" blocks).
HALF_FLOATS: tuple[str, ...] = tuple(d.short for d in DTYPES if d.bits == 16 and d.floating)
_BY_NAME = {n.lower(): d for d in DTYPES for n in d.names}


def find_dtype(text: object) -> DType | None:
    """The dtype named ``text`` (``"bf16"``, ``"bfloat16"``, ``"torch.bfloat16"``, ``torch.bfloat16``
    alike), or None. O(1)."""
    return _BY_NAME.get(str(text).strip().lower().removeprefix("torch."))


def dtype(text: object, among: Iterable[DType] | None = None) -> DType:
    """The dtype named ``text``; raises :class:`PartitionError` naming the valid choices (those of
    ``among`` when given: e.g. the training precisions)."""
    choices = tuple(among) if among is not None else DTYPES
    found = find_dtype(text)
    if found is None or found not in choices:
        raise PartitionError(f"unknown dtype {text!r}; choose one of {', '.join(d.short for d in choices)}")
    return found


def dtype_for_bytes(element_bytes: int) -> DType:
    """The floating type a workload of ``element_bytes`` computes in: 1 fp8, 2 bf16, 4 fp32, 8 fp64."""
    for d in DTYPES:  # the first of each size: fp32, bf16, fp8 (e4m3), fp64
        if d.bytes == element_bytes and d.bits == 8 * element_bytes and d.floating:
            return d
    raise PartitionError(f"no floating type of {element_bytes} bytes; use 1 (fp8), 2 (bf16), 4 (fp32) or 8 (fp64)")


def dominant_dtype(names: Iterable[object], default: str = "float32") -> DType:
    """The most frequent known dtype of ``names`` (a graph's node dtypes; integers such as token ids
    and unknown names apart), the first seen on a tie; ``default`` when none is known. O(len)."""
    counts: dict[DType, int] = {}
    for n in names:
        d = find_dtype(n) if n is not None else None
        if d is not None and d.floating:
            counts[d] = counts.get(d, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else dtype(default)
