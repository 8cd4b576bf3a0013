"""Torch at the output edge: apply a plan to the traced model (:func:`split`), and run it for real
on one process per device with torch.distributed (:func:`run.run`, the launcher in
:mod:`.launch`, node timings for calibration in :mod:`.calibrate`)."""

from __future__ import annotations

from .split import split

__all__ = ["split"]
