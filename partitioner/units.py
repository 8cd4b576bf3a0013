"""Parsing and formatting of bytes, seconds and rates: the one set every front end uses.

Plans keep integer bytes and float seconds; these functions only read what people type
(``"16GiB"``, ``"25GB"``) and write what people read (``"1.5 KiB"``, ``"22.5 us"``).
"""

from __future__ import annotations

import math
import re

from partitioner.errors import DeviceSpecError

__all__ = [
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
]

BYTE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
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
