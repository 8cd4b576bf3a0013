"""Kept for code outside this repository that imports ``partitioner.runtime.calibrate``: the host's
calibration moved to :mod:`partitioner.calibration.host` (issue 55: calibration in a package of
its own, so that :mod:`partitioner.runtime` is torch at the output edge only). Import from there;
these names are the same objects."""

from __future__ import annotations

from partitioner.calibration.host import MESSAGE_BYTES, CalibrationRank, calibrate, local_profile

__all__ = ["calibrate", "local_profile", "CalibrationRank", "MESSAGE_BYTES"]
