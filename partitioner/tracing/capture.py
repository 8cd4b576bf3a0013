"""From a model to a torch.fx GraphModule: ``symbolic_trace``, falling back to ``torch.export``
(without the checks and stack traces export adds), with an error naming the user's failing line
and the fix; tied parameters read through one name so their bytes count once."""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import traceback
from typing import Any, Iterator
from unittest import mock

import torch
import torch.fx as fx

from partitioner.errors import TraceError

__all__ = ["to_graph_module", "user_frame", "no_stack_traces", "merge_tied_attributes"]

logger = logging.getLogger(__name__)


def user_frame(exc: BaseException) -> str:
    """The deepest traceback frame outside torch: where the user's model failed to trace."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    user = [f for f in frames if not f.filename.startswith(ours) and not f.filename.startswith("<")]
    if not user:
        return ""
    f = user[-1]
    return f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}"


def to_graph_module(
    model: torch.nn.Module, example_inputs: tuple[Any, ...], example_kwargs: dict[str, Any]
) -> fx.GraphModule:
    if isinstance(model, fx.GraphModule):
        return model
    if not isinstance(model, torch.nn.Module):
        raise TraceError(f"trace() needs an nn.Module or a torch.fx.GraphModule (got {type(model).__name__})")
    try:
        if example_kwargs:  # symbolic_trace cannot bind keyword inputs: torch.export can
            raise TypeError("keyword inputs are traced with torch.export")
        return fx.symbolic_trace(model)
    except Exception as fx_exc:  # data-dependent control flow, unsupported Python, ...
        logger.info("symbolic_trace failed (%s); falling back to torch.export", fx_exc)
        fx_where = "" if example_kwargs else user_frame(fx_exc)
        try:
            with no_stack_traces():
                exported = torch.export.export(
                    model, tuple(example_inputs), kwargs=example_kwargs or None, strict=False
                )
            gm = exported.module()
            if not isinstance(gm, fx.GraphModule):  # pragma: no cover - torch API guard
                raise TypeError(f"torch.export gave a {type(gm).__name__}, not a GraphModule")
            return _without_export_checks(gm)
        except Exception as export_exc:
            where = fx_where or user_frame(export_exc)
            unflattenable = "pytree" in str(export_exc)
            fix = (
                "Fix: the model's outputs hold an object torch.export cannot flatten (a cache, a "
                "custom class): return tensors only (for Hugging Face models, use_cache=False)."
                if unflattenable
                else "Fix: remove Python control flow that depends on tensor values (use "
                "torch.where / torch.cond), or mark the helper with torch.fx.wrap, "
                "or pass an already traced torch.fx.GraphModule."
            )
            raise TraceError(
                f"could not trace {type(model).__name__}: "
                + (
                    ""
                    if example_kwargs
                    else f"torch.fx.symbolic_trace failed with {type(fx_exc).__name__}: "
                    f"{str(fx_exc).splitlines()[0] if str(fx_exc) else ''}" + (f" at {where}" if where else "") + "; "
                )
                + f"torch.export failed with {type(export_exc).__name__}: "
                + (str(export_exc).splitlines()[0] if str(export_exc) else "")
                + (
                    f" at {export_where}"
                    if (export_where := user_frame(export_exc)) and export_where != fx_where
                    else ""
                )
                + ". "
                + fix
            ) from export_exc


@contextlib.contextmanager
def no_stack_traces() -> Iterator[None]:
    """torch.export without the Python stack it records on every node (``node.meta["stack_trace"]``,
    which nothing here reads): capturing and symbolizing it was a quarter of export's time."""
    switch = "do_not_emit_stack_traces"  # torch 2.11 has no such switch: nothing to set there
    with (
        mock.patch.object(torch.fx.config, switch, True)
        if hasattr(torch.fx.config, switch)
        else contextlib.nullcontext()
    ):
        yield


def _without_export_checks(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` without the checks torch.export adds (the input guard ``_guards_fn`` and the
    ``_assert_*`` metadata asserts): they compute nothing the model returns, and left in they
    would be nodes, pipeline stage boundaries, device-map keys and boxes of their own. O(N)."""
    for node in reversed(list(gm.graph.nodes)):
        if node.users:
            continue
        guard = node.op == "call_module" and str(node.target).startswith("_guards")
        check = node.op == "call_function" and getattr(node.target, "__name__", str(node.target)).startswith("_assert")
        if guard or check:
            gm.graph.erase_node(node)
            if guard and hasattr(gm, str(node.target)):
                gm.delete_submodule(str(node.target))
    gm.graph.lint()
    gm.recompile()
    return gm


def merge_tied_attributes(gm: fx.GraphModule) -> tuple[tuple[str, ...], ...]:
    """One ``get_attr`` node per tensor: a parameter reached under two names (GPT-2's LM head
    tied to its embedding) is read through the first name, so its bytes count once. Returns the
    groups of names that were one tensor. O(N)."""
    first: dict[int, fx.Node] = {}
    groups: dict[int, list[str]] = {}
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        try:
            value = operator.attrgetter(str(node.target))(gm)
        except AttributeError:
            continue
        if not isinstance(value, torch.Tensor):
            continue
        key = id(value)
        if key not in first:
            first[key] = node
            groups[key] = [str(node.target)]
            continue
        groups[key].append(str(node.target))
        node.replace_all_uses_with(first[key])
        gm.graph.erase_node(node)
    tied = tuple(tuple(names) for names in groups.values() if len(names) > 1)
    if tied:
        gm.recompile()
        logger.info("tied parameters counted once: %s", tied)
    return tied
