"""Measured curves: sorted ``(x, seconds)`` points read by log-log interpolation, their one
validator, and the alpha-beta fit of message times. Shared by device profiles
(:mod:`partitioner.device_profile`) and GPU kernel curves (:mod:`partitioner.kernels`). Torch-free."""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from partitioner.errors import DeviceSpecError

__all__ = [
    "Curve",
    "MAX_CURVE_POINTS",
    "MAX_PROFILE_POINTS",
    "AlphaBeta",
    "fit_alpha_beta",
    "check_curve",
    "check_length",
    "real",
    "text",
    "named_items",
    "interp",
    "interp_through_zero",
]

Curve = tuple[tuple[float, float], ...]  # (x, seconds) sorted by x
MAX_CURVE_POINTS = 10_000  # a measured curve has tens of points; more is not a measurement
# All of one profile's curves, pairs and rows together (NOTE: [Bounded profiles]).
MAX_PROFILE_POINTS = 20_000

# NOTE: [Bounded profiles]
# A profile is read from a file anyone can write, by the command line and by the app's cached
# device types: every list in it has a length limit, checked before a value of it is read, and
# all its curves together hold at most MAX_PROFILE_POINTS points, so reading the largest accepted
# profile costs O(MAX_PROFILE_POINTS log MAX_PROFILE_POINTS) (the measured H100 profile holds
# about 600 points). A refusal names the list, its length, its limit and the command that
# measures it again. Numbers are JSON numbers: a boolean or a string is refused, never converted.


def check_length(owner: str, what: str, value: Any, limit: int, unit: str, remedy: str) -> int:
    """``len(value)``, or a :class:`DeviceSpecError` naming the list ``what``, its length, ``limit``
    and ``remedy`` when it is longer (or not a list). O(1)."""
    if not isinstance(value, (list, tuple, dict)):
        raise DeviceSpecError(
            f"{owner}: {what} must be a list (got {type(value).__name__}); measure it again with `{remedy}`"
        )
    if len(value) > limit:
        raise DeviceSpecError(
            f"{owner}: {what} has {len(value):,} {unit} (at most {limit:,}; a measurement makes tens); "
            f"measure it again with `{remedy}`"
        )
    return len(value)


def real(owner: str, what: str, value: Any) -> float:
    """``value`` as a float when it is a JSON number; a boolean, a string or anything else is
    refused with :class:`DeviceSpecError` (``true`` is not 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DeviceSpecError(f"{owner}: {what} must be a number (got {type(value).__name__} {_short(value)})")
    try:
        return float(value)
    except OverflowError:
        raise DeviceSpecError(f"{owner}: {what} is out of range (got {_short(value)})") from None


def text(owner: str, what: str, value: Any) -> str:
    """``value`` when it is a JSON string; anything else is refused, never converted."""
    if not isinstance(value, str):
        raise DeviceSpecError(f"{owner}: {what} must be text (got {type(value).__name__} {str(value)[:40]!r})")
    return value


def named_items(owner: str, what: str, value: Any) -> list[tuple[Any, Any]]:
    """The (name, value) pairs of a JSON object of curves by name; anything else is refused."""
    if not isinstance(value, Mapping):
        raise DeviceSpecError(f"{owner}: {what} must be an object of curves by name (got {type(value).__name__})")
    return list(value.items())


def _short(value: Any, limit: int = 80) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown):,} characters)"


def check_curve(owner: str, what: str, points: Iterable[Any], remedy: str = "partition-explorer calibrate") -> Curve:
    """``points`` as a sorted curve, or a :class:`DeviceSpecError` naming ``owner`` (``"profile 'x'"``),
    the curve, the rule and the command that measures it again. O(n log n), n at most
    :data:`MAX_CURVE_POINTS` (checked before a point is read)."""
    if not isinstance(points, (list, tuple)):
        points = list(points) if not isinstance(points, (str, bytes, dict)) and hasattr(points, "__iter__") else points
    check_length(owner, what, points, MAX_CURVE_POINTS, "points", remedy)
    try:
        out = tuple(sorted((real(owner, what, x), real(owner, what, y)) for x, y in points))
    except DeviceSpecError:
        raise
    except (TypeError, ValueError):
        raise DeviceSpecError(f"{owner}: {what} must be a list of [x, seconds] pairs (got {_short(points)})") from None
    if not out or any(not (x > 0 and 0 < y < 3600 and math.isfinite(x) and math.isfinite(y)) for x, y in out):
        raise DeviceSpecError(
            f"{owner}: {what} needs positive, finite [x, seconds] pairs below an hour (got {_short(points)}); "
            f"measure it again with `{remedy}`"
        )
    return out


def interp(curve: Curve, x: float, xs: Sequence[float] | None = None) -> float:
    """Seconds at ``x`` on a sorted ``(x, seconds)`` curve: log-log between points, the end
    points' rate beyond the last, the first point's time below it (a smaller problem is not
    faster than the smallest measured: launch and latency bound). O(log n)."""
    keys = xs if xs is not None else [p[0] for p in curve]
    if x <= keys[0]:
        return curve[0][1]
    if x >= keys[-1]:
        return curve[-1][1] * x / keys[-1]
    i = bisect.bisect_right(keys, x)
    (x0, y0), (x1, y1) = curve[i - 1], curve[i]
    if x0 == x1:
        return y1
    f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))


_XS: dict[int, tuple[Curve, list[float]]] = {}


def interp_through_zero(curve: Curve, x: float) -> float:
    """As :func:`interp`, but below the first point the first point's throughput (a profile's
    curves start above any launch cost, which the profile adds once). O(log n): the curve's x
    values are kept per curve."""
    xs = _XS.get(id(curve))
    if xs is None or xs[0] is not curve:
        xs = (curve, [p[0] for p in curve])
        if len(_XS) > 4096:
            _XS.clear()
        _XS[id(curve)] = xs
    keys = xs[1]
    if x <= keys[0]:
        return curve[0][1] * x / keys[0]
    return interp(curve, x, keys)


@dataclass(frozen=True)
class AlphaBeta:
    """Seconds to move ``n`` bytes: ``latency_s + n / bandwidth_bytes_per_s``."""

    latency_s: float
    bandwidth_bytes_per_s: float

    def seconds(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> AlphaBeta:
    """An alpha-beta fit robust to a noisy, shared machine: the latency is the median time of the
    smaller half of the messages, the per-byte time the median of (t - latency) / bytes over the
    larger half (at least 1 ns a MB). O(n log n). A least-squares line lets one slow large
    message move the latency by milliseconds."""
    if not points:
        raise DeviceSpecError("an alpha-beta fit needs at least one (bytes, seconds) point")
    ordered = sorted(points)
    half = max(1, len(ordered) // 2)
    alpha = statistics.median(y for _, y in ordered[:half])
    large = [(x, y) for x, y in ordered[half:] if x > 0] or ordered[-1:]
    per_byte = statistics.median(max(y - alpha, 0.0) / max(x, 1.0) for x, y in large)
    return AlphaBeta(max(alpha, 1e-9), 1.0 / max(per_byte, 1e-15))
