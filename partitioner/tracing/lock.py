"""The one lock every trace in this process runs under (NOTE: [Tracing and threads]).

NOTE: [Tracing and threads]
torch.fx's ``symbolic_trace`` patches ``torch.nn.Module.__call__`` and ``__getattr__`` and
module-level functions for as long as it traces, and ``torch.export`` installs global modes; the
tracer here also pauses the cycle collector and quiets the root logger. None of that is per
thread, so two traces at once in one process race: six threads tracing the mlp sample saw
"module is not installed as a submodule", "CURRENT_PATCHER is None", and once a graph of 30 ops
where the model has 15 (the other thread's modules recorded into it), with no error. So
:func:`partitioner.trace` holds this lock for the whole trace, as does a cached graph tracing its
module again (:mod:`partitioner.tracing.cache`) and the app around its trace cache. It is
re-entrant: a caller that holds it (the app) may call :func:`partitioner.trace` inside.
"""

from __future__ import annotations

import threading

__all__ = ["TRACE_LOCK"]

TRACE_LOCK = threading.RLock()
