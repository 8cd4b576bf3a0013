"""What a calibrated profile is called and how it says when it was measured: ``calibrate`` writes
a profile of its own (``local-<UTC date and time>``, or the ``--name`` given), never the shared
``local`` unless asked by name, so a measurement does not change what other runs read; and every
figure priced by a calibrated profile carries "calibrated <date> at load <x>" (the UTC ISO time and
1-minute load average recorded at measurement). Torch-free."""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partitioner.device_profile import DeviceProfile

__all__ = ["SHARED_NAME", "dated_name", "calibrated_words", "newest_calibrated", "load_now", "utc_now"]

SHARED_NAME = "local"  # the profile `run --calibrate` and the CPU local cluster read


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second: what a profile records as ``measured_at``."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def load_now() -> float:
    """The machine's 1-minute load average (``os.getloadavg``), 0 where there is none. O(1)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else 0.0


def dated_name(at: datetime.datetime | None = None) -> str:
    """The name a calibration is cached under when none is given: ``local-20261128-0450`` (UTC), a
    valid profile name (letters, digits, '-'), sorting by time. O(1)."""
    at = at or datetime.datetime.now(datetime.timezone.utc)
    return f"{SHARED_NAME}-{at.astimezone(datetime.timezone.utc):%Y%m%d-%H%M%S}"


def calibrated_words(profile: DeviceProfile | None) -> str:
    """ "calibrated 2026-11-28T04:50:12+00:00 at load 0.42" of a measured profile; "" for none or
    for one that records no time (the carried GPU presets, profiles written before it was kept)."""
    if profile is None or not profile.measured_at:
        return ""
    return f"calibrated {profile.measured_at} at load {profile.load_average:g}"


def newest_calibrated() -> str | None:
    """The name of the newest cached calibration of this machine: ``local`` or a ``local-<date>``,
    the latest measured first (by its recorded time); None when there is none."""
    from partitioner.device_profile import cached_profiles, find_profile

    mine = [n for n in cached_profiles() if n == SHARED_NAME or n.startswith(f"{SHARED_NAME}-")]
    dated = [(p.measured_at, n) for n in mine if (p := find_profile(n)) is not None]
    return max(dated)[1] if dated else None
