"""Optional libraries (transformers, accelerate, ortools) imported once, under one lock.

NOTE: [Optional imports and threads]
The app's sessions are threads of one process, and a fresh server meets its first Hugging Face
pages from several of them at once. ``transformers`` is a lazy module: ``transformers.AutoConfig``
imports its submodule on first access, and a second thread arriving while the first is inside
that import saw a half-made module ("module 'transformers' has no attribute 'AutoConfig'": 4 of 5
cluster sessions on a restarted server failed so). :func:`load` imports a library and resolves
the names asked for under one re-entrant lock, once per process; later calls return the module
without the lock. :data:`LOCK` is also held around the first uses that import more lazily
(``AutoConfig.for_model`` and ``from_config`` import the architecture's own modules).
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Sequence

__all__ = ["load", "LOCK", "TRANSFORMERS_NAMES"]

LOCK = threading.RLock()
_LOADED: dict[tuple[str, tuple[str, ...]], ModuleType] = {}

# What the project reads from transformers: resolved together on its first import.
TRANSFORMERS_NAMES = (
    "AutoConfig",
    "AutoModel",
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "activations",
    "modeling_rope_utils",
    "logging",
)


def load(name: str, names: Sequence[str] = ()) -> ModuleType:
    """Module ``name`` (``"transformers"``, ``"accelerate"``, ``"ortools.sat.python.cp_model"``),
    imported and its attributes ``names`` resolved under :data:`LOCK` the first time, so no thread
    sees it half made. Raises ImportError (or the AttributeError of a missing name) as ``import``
    does; a failure is not remembered, so a later call tries again. O(1) after the first call."""
    key = (name, tuple(names))
    found = _LOADED.get(key)
    if found is not None:
        return found
    with LOCK:
        found = _LOADED.get(key)
        if found is None:
            found = importlib.import_module(name)
            for attribute in names:
                getattr(found, attribute)  # a lazy module imports the attribute's submodule now
            _LOADED[key] = found
    return found
