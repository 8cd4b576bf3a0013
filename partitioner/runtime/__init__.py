"""Torch at the output edge: apply a plan to the traced model (:func:`split`)."""

from __future__ import annotations

from .split import split

__all__ = ["split"]
