"""Trace once: traced graphs kept on disk by model, config and the versions the trace depends on.

A trace of a real-size model costs tens of seconds (Llama-3-70B: about 6 s to build on meta
weights and 27 s to trace here), and the app, the command line and every new server process used
to pay it again. :func:`cached_trace` keeps the :class:`~partitioner.graph.Graph`'s data (the
plain arrays every algorithm reads) as JSON, its example inputs with ``torch.save``, under a key
that holds everything the trace depends on (NOTE: [Trace cache key]). A graph read back is a
:class:`CachedGraph`: its traced module is rebuilt only when something asks for it (a split, a
real run, sharding), because an exported ``GraphModule`` cannot be pickled and hf: models at real
size hold meta weights anyway.

The folder is ``$PARTITION_EXPLORER_CACHE`` (``off`` turns the cache off), else
``$XDG_CACHE_HOME/partition-explorer/traces`` (``~/.cache/...``); the oldest entries go past
:data:`MAX_ENTRIES`. Writes are atomic (``os.replace``), so two processes sharing the folder
never read half an entry.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from partitioner.errors import TraceError
from partitioner.graph import Graph, ModelInfo, Node
from partitioner.tracing import lock as _lock

__all__ = [
    "cached_trace",
    "CachedGraph",
    "model_key",
    "cache_dir",
    "versions",
    "module_loaded",
    "weights_on_meta",
    "SCHEMA",
    "MAX_ENTRIES",
    "ENV",
]

logger = logging.getLogger(__name__)

SCHEMA = 1  # the entry's own format; a change makes every older entry a miss
MAX_ENTRIES = 64
ENV = "PARTITION_EXPLORER_CACHE"
# The packages whose source a trace depends on: the tracer and the models' own definitions.
SOURCE_PACKAGES = ("partitioner", "sample_models")

# NOTE: [Trace cache key]
# A cached graph is served only for the same model spec and overrides (which fix the input
# shapes: batch_size and seq_len are overrides, and a sample model's inputs follow from its
# config), under the same Python, torch and transformers versions and the same source of this
# package and of the sample models (a hash of every .py file). Anything else is a miss, so a
# changed tracer, FLOP formula or model definition can never serve a stale graph. A person's own
# factory (package.module:factory) runs code of theirs we cannot hash: it is never cached.


def cache_dir() -> Path | None:
    """The cache folder, or None when ``$PARTITION_EXPLORER_CACHE`` is ``off``."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in ("off", "0", "no", "false"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "partition-explorer" / "traces"


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    h = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            continue
        for root in found.submodule_search_locations:
            for path in sorted(Path(root).rglob("*.py")):
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:20]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def versions() -> dict[str, str]:
    """What every trace depends on besides the model: Python, torch, transformers and the hash of
    this package's and the sample models' source."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "source": _source_hash(),
    }


def model_key(spec: str, overrides: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cache key of model ``spec`` with ``overrides`` (NOTE: [Trace cache key]); None for a
    person's own factory, which is never cached."""
    if ":" in spec and not spec.startswith("hf:"):
        return None
    return {
        "schema": SCHEMA,
        "spec": spec,
        "overrides": sorted([str(k), json.dumps(v, sort_keys=True, default=str)] for k, v in overrides.items()),
        **versions(),
    }


def _digest(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


# Tracing patches module-level functions (torch.fx) and installs global modes (torch.export), so two
# traces at once in one process race: every trace takes this lock, the app's sessions around their
# trace cache, and a cached graph to trace its module again (NOTE: [Tracing and threads] in
# partitioner/tracing/lock.py).
TRACE_LOCK = _lock.TRACE_LOCK


class CachedGraph(Graph):
    """A :class:`Graph` read from the cache: nodes, figures and model facts as traced; the traced
    module is rebuilt by ``rebuild`` (a fresh trace) the first time ``graph_module`` is read, and
    checked to be the same graph (same fingerprint)."""

    def __init__(
        self,
        nodes: list[Node],
        name: str,
        example_inputs: tuple[Any, ...] | None,
        rebuild: Callable[[], Graph] | None,
        meta_weights: bool | None = None,
    ) -> None:
        self._rebuild = rebuild
        self._module: Any = None
        self.meta_weights = meta_weights  # whether the module's weights are on meta; None: not known
        super().__init__(nodes, None, example_inputs, name=name)

    @property  # type: ignore[override]
    def graph_module(self) -> Any:
        if self._module is None and self._rebuild is not None:
            with TRACE_LOCK:  # the app's sessions are threads: one traces, the others wait and read it
                rebuild = self._rebuild
                if self._module is None and rebuild is not None:
                    logger.info("tracing %s again for its module (the cache keeps its data only)", self.name)
                    fresh = rebuild()
                    self._rebuild = None
                    if fresh.fingerprint() != self.fingerprint():
                        raise TraceError(
                            f"tracing {self.name!r} again gave another graph than the cached one "
                            f"(fingerprint {fresh.fingerprint()} against {self.fingerprint()}); "
                            f"clear the trace cache ({cache_dir()}) and open the model again"
                        )
                    if self.example_inputs is None:
                        self.example_inputs = fresh.example_inputs
                    self._module = fresh.graph_module
        return self._module

    @graph_module.setter
    def graph_module(self, value: Any) -> None:
        self._module = value


def weights_on_meta(graph: Graph) -> bool | None:
    """Whether ``graph``'s module holds its weights on the meta device (a large hf: model: shapes,
    no values, so nothing can run it), known without tracing it again where the graph recorded it
    (a repeated trace, a cache entry); None when the graph has no module or it is not known."""
    if not module_loaded(graph):
        return graph.meta_weights if isinstance(graph, CachedGraph) else None
    module = graph.graph_module
    if module is None:
        return None
    return any(t.is_meta for t in (*module.parameters(), *module.buffers()))


def module_loaded(graph: Graph) -> bool:
    """Whether ``graph`` holds its traced module now (reading it would not trace again)."""
    return graph._module is not None if isinstance(graph, CachedGraph) else graph.graph_module is not None


def _encode(graph: Graph) -> dict[str, Any]:
    info = graph.model_info
    return {
        "name": graph.name,
        "nodes": [
            [
                nd.name,
                nd.op,
                nd.target,
                list(nd.inputs),
                nd.module_path,
                None if nd.shape is None else list(nd.shape),
                nd.dtype,
                nd.output_bytes,
                nd.param_bytes,
                nd.flops,
                nd.is_embedding,
            ]
            for nd in graph.nodes
        ],
        "tied_parameters": [list(t) for t in graph.tied_parameters],
        "repeated_weights": [[v, f, b] for v, (f, b) in sorted(graph.repeated_weights.items())],
        "unpriced_ops": [list(u) for u in graph.unpriced_ops],
        "model_info": {
            "module_classes": {k: list(v) for k, v in info.module_classes.items()},
            "tp_plan": dict(info.tp_plan),
            "no_split_modules": list(info.no_split_modules),
            "tied_weights": dict(info.tied_weights),
        },
        "fingerprint": graph.fingerprint(),
        "meta_weights": weights_on_meta(graph),
        "named_parameters": None
        if graph.named_parameters is None
        else [[n, list(shape), size] for n, shape, size in graph.named_parameters],
    }


def _decode(
    data: Mapping[str, Any], example_inputs: tuple[Any, ...] | None, rebuild: Callable[[], Graph] | None
) -> CachedGraph:
    nodes = [
        Node(
            name=n[0],
            op=n[1],
            target=n[2],
            inputs=tuple(n[3]),
            module_path=n[4],
            shape=None if n[5] is None else tuple(n[5]),
            dtype=n[6],
            output_bytes=n[7],
            param_bytes=n[8],
            flops=n[9],
            is_embedding=n[10],
        )
        for n in data["nodes"]
    ]
    graph = CachedGraph(nodes, data["name"], example_inputs, rebuild, meta_weights=data.get("meta_weights"))
    graph.tied_parameters = tuple(tuple(t) for t in data["tied_parameters"])
    graph.repeated_weights = {v: (f, b) for v, f, b in data["repeated_weights"]}
    graph.unpriced_ops = tuple((str(t), int(c)) for t, c in data["unpriced_ops"])
    info = data["model_info"]
    graph.model_info = ModelInfo(
        module_classes={k: tuple(v) for k, v in info["module_classes"].items()},
        tp_plan=dict(info["tp_plan"]),
        no_split_modules=tuple(info["no_split_modules"]),
        tied_weights=dict(info["tied_weights"]),
    )
    records = data.get("named_parameters")
    if records is not None:
        graph.named_parameters = tuple((str(n), tuple(shape), int(size)) for n, shape, size in records)
    if graph.fingerprint() != data["fingerprint"]:
        raise ValueError("fingerprint differs")
    return graph


def _atomic_write(path: Path, write: Callable[[Any], None], binary: bool) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(folder: Path, digest: str, key: Mapping[str, Any], rebuild: Callable[[], Graph] | None) -> CachedGraph | None:
    path = folder / f"{digest}.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") != json.loads(json.dumps(key)):
            return None
        inputs = None
        if data.get("inputs"):
            loaded = torch.load(folder / f"{digest}.pt", weights_only=True)
            inputs = tuple(loaded)
        graph = _decode(data["graph"], inputs, rebuild)
    except Exception as exc:  # a damaged or foreign file is a miss, written again after the trace
        logger.warning("trace cache entry %s unreadable (%s); tracing again", path, exc)
        return None
    os.utime(path)  # the least recently used go first
    return graph


def _write(folder: Path, digest: str, key: Mapping[str, Any], graph: Graph) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    inputs = tuple(graph.example_inputs or ())
    saved = bool(inputs) and all(isinstance(t, torch.Tensor) and t.device.type != "meta" for t in inputs)
    if saved:
        _atomic_write(folder / f"{digest}.pt", lambda f: torch.save(list(inputs), f), binary=True)
    entry = {"key": key, "inputs": saved, "graph": _encode(graph)}
    _atomic_write(folder / f"{digest}.json", lambda f: json.dump(entry, f, separators=(",", ":")), binary=False)
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in entries[: max(0, len(entries) - MAX_ENTRIES)]:
        old.unlink(missing_ok=True)
        old.with_suffix(".pt").unlink(missing_ok=True)


def cached_trace(key: Mapping[str, Any] | None, build: Callable[[], Graph]) -> Graph:
    """The graph ``build()`` traces, from the disk cache when an entry has exactly ``key`` (see
    :func:`model_key`; None: never cached). A hit is a :class:`CachedGraph` whose module ``build``
    makes again on first use; a miss traces, stores and returns the fresh graph. An unwritable
    folder only logs. O(N) JSON for N nodes (Llama-3-70B's 5,588 nodes: well under a second)."""
    folder = cache_dir()
    if key is None or folder is None:
        return build()
    digest = _digest(key)
    hit = _read(folder, digest, key, build)
    if hit is not None:
        logger.info("trace of %s read from the cache (%s)", hit.name, folder)
        return hit
    graph = build()
    try:
        _write(folder, digest, key, graph)
    except OSError as exc:
        logger.warning(
            "could not write the trace cache in %s (%s); set %s to a writable folder or 'off'", folder, exc, ENV
        )
    return graph
