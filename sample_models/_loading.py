"""One front door for models, shared by the app and the command line: ``load(spec, overrides)``.

``spec`` is a sample model name (``"transformer"``), a person's factory
(``"package.module:factory"``) or a Hugging Face architecture (``"hf:llama"``,
``"hf:llama-3-8b"``). The same spec and overrides give the same module and the same
:func:`label`, so a plan's ``model`` field does not depend on which front end made it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from typing import Any, Callable, Mapping

from torch import Tensor, nn

from sample_models import _registry as registry
from sample_models._common import MAX_GRAPH_OPS, make_config
from sample_models._user import LoaderError, ModelSpecError, load_factory

__all__ = [
    "load",
    "label",
    "with_published_dtype",
    "parse_overrides",
    "is_factory",
    "is_hf",
    "ModelSpecError",
    "weight_scale",
    "graph_ops",
    "GRAPH_OPS",
]

Loaded = tuple[nn.Module, tuple[Tensor, ...], dict[str, Any]]

# Each sample model's traced operations (placeholders and output included) as a function of its
# config, with the fields that multiply them (NOTE: [Graph size caps]); counted from the models'
# forward code and checked against their traces (tests/models/test_size_caps.py).
GRAPH_OPS: dict[str, tuple[tuple[str, ...], Callable[[Any], int]]] = {
    "mlp": (("n_layer",), lambda c: 2 * c.n_layer + 1),
    "cnn": (("n_stage", "blocks_per_stage"), lambda c: 8 + 8 * c.n_stage * c.blocks_per_stage + c.n_stage - 1),
    "transformer": (("n_layer",), lambda c: 14 + 25 * c.n_layer),
    "dlrm": (("n_tables", "n_mlp_layer"), lambda c: 11 + 3 * c.n_tables + 4 * c.n_mlp_layer),
    "unet": (("depth",), lambda c: 7 + 11 * c.depth),
    "moe": (("n_layer", "n_experts"), lambda c: 2 + c.n_layer * (14 + 3 * c.n_experts)),
    "gpt2_small": (("n_layer",), lambda c: 14 + 25 * c.n_layer),
}


def graph_ops(name: str, overrides: Mapping[str, Any]) -> int:
    """The operations sample model ``name`` traces to with ``overrides``, from its config alone
    (nothing is built; O(1)). Raises ValueError for overrides its config refuses."""
    _, count = GRAPH_OPS[name]
    return int(count(make_config(registry.config_class(name), dict(overrides), model=name)))


def _check_graph_size(name: str, overrides: Mapping[str, Any]) -> None:
    if name not in GRAPH_OPS:
        return
    ops = graph_ops(name, overrides)
    if ops > MAX_GRAPH_OPS:
        fields = GRAPH_OPS[name][0]
        given = ", ".join(f"{f}={overrides[f]}" for f in fields if f in overrides) or "its settings"
        raise ModelSpecError(
            f"model {name!r} with {given} would trace {ops:,} operations; a graph is built and traced "
            f"only up to {MAX_GRAPH_OPS:,} operations (a few ms each, so a trace ends within a minute or "
            f"two): lower {' or '.join(fields)}, or load your own model as package.module:factory"
        )


def is_factory(spec: str) -> bool:
    return ":" in spec and not is_hf(spec)


def is_hf(spec: str) -> bool:
    return spec.startswith("hf:")


def with_published_dtype(spec: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``overrides`` with an hf: preset's published dtype filled in when none is given
    (``hf:llama-3-8b`` -> ``{"dtype": "bf16"}``), so the same model has the same name, bytes and
    trace on every page and command however it was asked for; other specs unchanged."""
    overrides = dict(overrides or {})
    if is_hf(spec) and "dtype" not in overrides:
        from sample_models import _hf as hf

        if spec[3:].strip() in hf.PRESETS:
            overrides["dtype"] = hf.published_dtype(spec[3:])
    return overrides


def label(spec: str, overrides: Mapping[str, Any] | None = None) -> str:
    """``"transformer(n_layer=2)"``: the name a plan records for ``spec`` with ``overrides``; an hf:
    preset's names its dtype (``"hf:llama-3-8b(dtype=bf16)"``) given or not."""
    shown = ",".join(f"{k}={v}" for k, v in sorted(with_published_dtype(spec, overrides).items()))
    return f"{spec}({shown})" if shown else spec


def weight_scale(spec: str, overrides: Mapping[str, Any] | None = None) -> float:
    """What a traced graph's parameter bytes are multiplied by (``Graph.with_weight_bytes``):
    below 1 for hf: models with quantized weights (``dtype=int8``), else 1."""
    if not is_hf(spec):
        return 1.0
    from sample_models import _hf as hf

    return hf.weight_scale(overrides or {})


def load(spec: str, overrides: Mapping[str, Any] | None = None, reload: bool = False) -> Loaded:
    """Build ``spec`` with ``overrides``; returns ``(module, example_inputs, example_kwargs)``.

    Raises :class:`LoaderError` (a ``ValueError``) naming the spec and the fix: an unknown
    name, a bad override, a factory that fails. A factory runs its own code: only load one a
    person asked for.
    """
    spec = str(spec).strip()
    overrides = dict(overrides or {})
    if is_hf(spec):
        from sample_models import _hf as hf

        return hf.load_hf(spec[3:], overrides)
    if is_factory(spec):
        if overrides:
            raise ModelSpecError(
                f"size overrides apply to sample and hf: models only; {spec!r} is a factory: "
                "change its arguments in the factory function instead"
            )
        module, inputs = load_factory(spec, reload=reload)
        return module, inputs, {}
    _check_known(spec)
    try:
        _check_graph_size(spec, overrides)  # before anything is built (NOTE: [Graph size caps])
        module, inputs = registry.build(spec, **overrides)
    except LoaderError:
        raise
    except (TypeError, ValueError) as exc:
        raise ModelSpecError(str(exc)) from None
    return module, inputs, {}


def trace_loaded(spec: str, overrides: Mapping[str, Any] | None, loaded: Loaded, name: str) -> Any:
    """The ``partitioner.Graph`` of what :func:`load` returned for ``spec``: traced with its example
    kwargs, its parameter bytes scaled to the stored dtype (:func:`weight_scale`). An hf: model's
    repeated layers are traced once a kind of layer and repeated to its depth, node for node the
    graph a whole trace gives (NOTE: [Tracing a repeated block once] in
    partitioner/tracing/repeated.py); its module is traced when first asked for."""
    from partitioner import trace

    module, inputs, kwargs = loaded
    scale = weight_scale(spec, overrides)  # quantized weights (hf: dtype=int8)
    if is_hf(spec):
        from partitioner.tracing.repeated import trace_repeated

        graph, _ = trace_repeated(module, inputs, name=name, example_kwargs=kwargs or None, weight_scale=scale)
        return graph
    graph = trace(module, inputs, name=name, example_kwargs=kwargs or None)
    return graph if scale == 1.0 else graph.with_weight_bytes(scale)


def _check_known(spec: str) -> None:
    names = registry.names()
    if spec not in names:
        close = difflib.get_close_matches(spec, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ModelSpecError(
            f"unknown model {spec!r}; {hint}give a sample model ({', '.join(names)}), a Hugging "
            "Face architecture as hf:<model_type>, or your own factory as package.module:factory "
            "(a function returning (module, example_inputs))"
        )


def parse_overrides(spec: str, items: typing.Sequence[str], where: str = "--set") -> dict[str, Any]:
    """``["n_layer=4", "bias=false"]`` -> ``{"n_layer": 4, "bias": False}``, typed by the sample
    model's config dataclass (hf: models take JSON-like values). ``where``: what a message calls the
    place the pairs were written (the app's "Config fields")."""
    if is_hf(spec):  # dicts and lists as canonical JSON text: hashable (the app's cache key)
        return with_published_dtype(spec, {k: _hashable(_convert(v, None)) for k, v in _pairs(items, where)})
    if is_factory(spec):
        if items:
            raise ModelSpecError(
                f"--set applies to sample and hf: models only; {spec!r} is a factory: change its "
                "arguments in the factory function instead"
            )
        return {}
    _check_known(spec)
    cls = registry.config_class(spec)
    hints = typing.get_type_hints(cls)
    listing = ", ".join(
        f"{f.name} ({getattr(hints[f.name], '__name__', hints[f.name])}, default {f.default!r})"
        for f in dataclasses.fields(cls)
    )
    values: dict[str, Any] = {}
    for key, raw in _pairs(items):
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ModelSpecError(f"model {spec!r} has no setting {key!r}; {hint}its settings are: {listing}")
        kind = hints[key]
        try:
            values[key] = _convert(raw, kind)
        except ValueError:
            name = getattr(kind, "__name__", str(kind))
            article = "an" if name[:1] in ("a", "e", "i", "o", "u") else "a"
            raise ModelSpecError(
                f"--set {key}={raw}: {key} of model {spec!r} must be {article} {name} "
                f"(e.g. {key}={ {bool: 'true', int: '4', float: '0.5'}.get(kind, 'VALUE') })"
            ) from None
    return values


def _pairs(items: typing.Sequence[str], where: str = "--set") -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, raw = str(item).partition("=")
        if not sep or not key.strip():
            if where == "--set":
                raise ModelSpecError(f"--set expects KEY=VALUE (got {item!r}); e.g. --set n_layer=4")
            raise ModelSpecError(f"{where} take field=value pairs, separated by spaces (got {item!r}); e.g. n_layer=4")
        out.append((key.strip(), raw.strip()))
    return out


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _convert(raw: str, kind: Any) -> Any:
    if kind is bool:
        low = raw.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if kind is int:
        return int(raw, 0) if raw.lower().startswith(("0x", "0b", "0o")) else int(raw)
    if kind is float:
        return float(raw)
    if kind is str:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
