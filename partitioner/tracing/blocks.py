"""Find a model's stacks of repeated blocks (Hugging Face's ``model.layers``, ``transformer.h``,
``encoder.block``) and which of their layers are the same block, so that a trace of a few layers
can be repeated to the whole depth (:mod:`partitioner.tracing.repeated`; NOTE: [Tracing a repeated
block once]).

A stack is an ``nn.ModuleList`` whose children are all of one class (the outermost such list: a
mixture of experts' list inside a layer is part of the layer). Two layers are the same block when
their module trees say so: each submodule's class, its parameters' and buffers' names, shapes and
dtypes, its plain settings (numbers, strings, flags), and the layer's entries of every per-layer
list in the model's configs (``layer_types``). A setting that holds the layer's own index in every
layer (``layer_idx``) is the layer's name, not its kind, and is left out. Consecutive layers of one
kind form a run; the first layers of Llama are like the rest (one run), T5's first block holds the
relative position bias (a run of its own), DeepSeek's dense layers come before its MoE ones.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
from torch import nn

__all__ = ["Stack", "BlockPlan", "plan_blocks", "selected_layers", "find_stacks"]

# Config fields that count the layers of a stack (num_hidden_layers, n_layer, num_layers,
# num_decoder_layers): a model's forward may read them (Llama loops over layers[:num_hidden_layers]).
_COUNT_FIELD = re.compile(r"^(n_layers?|.*_layers)$")
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device)


@dataclass(frozen=True)
class Stack:
    """One list of blocks: its module path, its depth, its runs of same-kind layers as (first,
    last) layer numbers, and the layers a trace keeps (NOTE: [Tracing a repeated block once]):
    each run's first, second and last layer, every layer of a run of three or fewer."""

    path: str  # "model.layers"
    length: int
    runs: tuple[tuple[int, int], ...]

    @functools.cached_property
    def keep(self) -> tuple[int, ...]:
        kept: list[int] = []
        for first, last in self.runs:
            kept += range(first, last + 1) if last - first < 3 else (first, first + 1, last)
        return tuple(kept)

    @functools.cached_property
    def check(self) -> tuple[int, ...]:
        """:attr:`keep` and one more layer of each run that :attr:`keep` shortens: the selection
        whose real trace checks the repetition (the expanded shorter trace must equal it)."""
        extra = tuple(first + 2 for first, last in self.runs if last - first >= 3)
        return tuple(sorted(set(self.keep) | set(extra)))

    def run_of(self, layer: int) -> int:
        for i, (first, last) in enumerate(self.runs):
            if first <= layer <= last:
                return i
        raise IndexError(f"layer {layer} is not in {self.path} (0-{self.length - 1})")

    def template(self, layer: int) -> int:
        """The kept layer whose traced nodes layer ``layer`` repeats: itself when kept, else the
        second layer of its run."""
        first, _ = self.runs[self.run_of(layer)]
        return layer if layer in self.keep else first + 1


@dataclass(frozen=True)
class BlockPlan:
    """The stacks of a model, each with its runs (:func:`plan_blocks`)."""

    stacks: tuple[Stack, ...]

    @property
    def layers(self) -> int:
        return sum(s.length for s in self.stacks)

    @property
    def kept(self) -> int:
        return sum(len(s.keep) for s in self.stacks)

    @property
    def checked(self) -> int:
        return sum(len(s.check) for s in self.stacks)

    def describe(self) -> str:
        return "; ".join(
            f"{s.path}: {s.length} layers in {len(s.runs)} run(s) "
            + ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in s.runs)
            for s in self.stacks
        )


def find_stacks(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    found: list[tuple[str, nn.ModuleList]] = []
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2 or not path:
            continue
        if any(path.startswith(f"{outer}.") for outer, _ in found):
            continue  # a list inside a block is part of the block
        if len({type(child) for child in module}) == 1:
            found.append((path, module))
    return found


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def _facts(layer: nn.Module) -> dict[tuple[str, str], Any]:
    """What decides a layer's graph, by (submodule path, what): classes, parameter and buffer
    metadata, plain settings, hooks. O(submodules)."""
    facts: dict[tuple[str, str], Any] = {}
    for path, module in layer.named_modules():
        kind = type(module)
        facts[(path, "class")] = f"{kind.__module__}.{kind.__qualname__}"
        for name, p in module.named_parameters(recurse=False):
            facts[(path, f"param {name}")] = (tuple(p.shape), p.dtype, p.requires_grad)
        for name, b in module.named_buffers(recurse=False):
            facts[(path, f"buffer {name}")] = (tuple(b.shape), b.dtype, name in module._non_persistent_buffers_set)
        hooks = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks)
        facts[(path, "hooks")] = tuple(len(h) for h in hooks)
        for key, value in vars(module).items():
            if not key.startswith("_") and key != "training" and _plain(value):
                facts[(path, key)] = tuple(value) if isinstance(value, list) else value
    return facts


def _configs(model: nn.Module) -> list[Any]:
    """The distinct config objects the model's modules hold (a T5 decoder holds its own)."""
    seen: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            seen.setdefault(id(config), config)
    return list(seen.values())


def _per_layer_fields(config: Any, length: int) -> list[str]:
    return sorted(
        k
        for k, v in vars(config).items()
        if not k.startswith("_") and isinstance(v, (list, tuple)) and len(v) == length and _plain(v)
    )


def _counts_layers(values: list[Any]) -> bool:
    return all(type(v) is int for v in values) and values == list(range(len(values)))


def plan_blocks(model: nn.Module) -> BlockPlan | str:
    """The model's stacks and their runs of same-kind layers, or why there is nothing to repeat
    (a string: no stack, every run too short, stacks of one depth cut to different depths).
    O(modules)."""
    stacks = find_stacks(model)
    if not stacks:
        return "no list of same-class blocks"
    configs = _configs(model)
    planned: list[Stack] = []
    for path, modules in stacks:
        length = len(modules)
        facts = [_facts(layer) for layer in modules]
        keys = set().union(*facts)
        # settings holding each layer's own index (layer_idx) name the layer, not its kind
        index = {k for k in keys if k[1] != "class" and _counts_layers([f.get(k) for f in facts])}
        per_layer = [(id(c), f, getattr(c, f)) for c in configs for f in _per_layer_fields(c, length)]
        signatures = [
            (tuple(sorted((k, repr(v)) for k, v in f.items() if k not in index)), tuple(v[i] for _, _, v in per_layer))
            for i, f in enumerate(facts)
        ]
        runs: list[tuple[int, int]] = []
        for i, signature in enumerate(signatures):
            if runs and signatures[runs[-1][0]] == signature:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        planned.append(Stack(path, length, tuple(runs)))
    # a config's layer count and per-layer lists are cut by depth: stacks of one depth, one cut
    if len({(s.length, s.keep, s.check) for s in planned}) != len({s.length for s in planned}):
        return "stacks of one depth would be cut differently (their configs' layer counts are one field)"
    plan = BlockPlan(tuple(planned))
    if plan.kept >= plan.layers:
        return f"no run of same-kind layers is longer than three ({plan.describe()})"
    return plan


@contextlib.contextmanager
def selected_layers(model: nn.Module, plan: BlockPlan, selection: Sequence[Sequence[int]]) -> Iterator[None]:
    """``model`` with each stack cut to the layers ``selection`` names (one sequence a stack, in
    order), and its configs' layer counts and per-layer lists cut alike; all put back on exit.
    Hold :data:`~partitioner.tracing.lock.TRACE_LOCK`: the model changes meanwhile. O(modules)."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for stack, layers in zip(plan.stacks, selection):
            parent_path, _, attr = stack.path.rpartition(".")
            parent = model.get_submodule(parent_path)
            original = getattr(parent, attr)
            undo.append((parent, attr, original))
            setattr(parent, attr, nn.ModuleList([original[i] for i in layers]))
        cuts = {stack.length: list(layers) for stack, layers in zip(plan.stacks, selection)}
        for config in _configs(model):
            for length, layers in cuts.items():
                for field in _per_layer_fields(config, length):
                    value = getattr(config, field)
                    undo.append((config, field, value))
                    object.__setattr__(config, field, type(value)(value[i] for i in layers))
            for key, value in list(vars(config).items()):
                if _COUNT_FIELD.match(key) and isinstance(value, int) and not isinstance(value, bool):
                    if value in cuts:
                        undo.append((config, key, value))
                        object.__setattr__(config, key, len(cuts[value]))
        yield
    finally:
        for owner, attr, value in reversed(undo):
            if isinstance(owner, nn.Module):
                setattr(owner, attr, value)
            else:
                object.__setattr__(owner, attr, value)
