"""Measure a machine as a device profile (:class:`~partitioner.device_profile.DeviceProfile`, priced
by the cost model like the carried profiles of :mod:`partitioner.profiles`): this host on launched
CPU ranks (:mod:`.host`; the ops one rank times alone in :mod:`.ops`, what torch's distributed
engines add in :mod:`.distributed`, the timing loops in :mod:`.loops`) and a CUDA GPU's kernel
curves (:mod:`.gpu`); what a calibration is called and how it says when it was measured
(:mod:`.naming`). Torch loads inside the measuring functions, on the ranks and workers they
start, so importing this package imports no torch."""

from __future__ import annotations

from partitioner.calibration.gpu import calibrate_gpu
from partitioner.calibration.host import calibrate, local_profile

__all__ = ["calibrate", "calibrate_gpu", "local_profile"]
