"""Where measured device profiles are kept: the cache folder and its switch (torch-free,
no profile parsing; :mod:`partitioner.device_profile` reads and writes the files)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

from partitioner.errors import DeviceSpecError

__all__ = ["cache_dir", "cache_off", "profile_path", "cached_profiles", "is_profile_data", "PROFILE_KIND", "NAME"]

PROFILE_KIND = "device-profile"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def cache_dir() -> Path:
    """Where named profiles live: ``$PARTITION_EXPLORER_CACHE/profiles``, else
    ``$XDG_CACHE_HOME/partition-explorer/profiles``, else ``~/.cache/partition-explorer/profiles``."""
    root = os.environ.get("PARTITION_EXPLORER_CACHE")
    if root:
        return Path(os.devnull) / "profiles" if cache_off() else Path(root) / "profiles"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "partition-explorer" / "profiles"


def cache_off() -> bool:
    """Whether ``PARTITION_EXPLORER_CACHE=off`` turned the cache off (no profile is read or kept)."""
    return os.environ.get("PARTITION_EXPLORER_CACHE", "").strip().lower() == "off"


def profile_path(name: str) -> Path:
    if not NAME.match(name):
        raise DeviceSpecError(f"profile name must be 1-64 letters, digits, '_', '.', '-' (got {name!r})")
    if cache_off():
        raise DeviceSpecError(
            "the profile cache is off (PARTITION_EXPLORER_CACHE=off): write the profile to a "
            "file with --out FILE and use FILE as the device type, or set the variable to a folder"
        )
    return cache_dir() / f"{name}.json"


def cached_profiles() -> list[str]:
    """Names of the profiles in :func:`cache_dir`, sorted."""
    folder = cache_dir()
    if cache_off():
        return []
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def is_profile_data(data: Any) -> bool:
    return isinstance(data, Mapping) and data.get("kind") == PROFILE_KIND
