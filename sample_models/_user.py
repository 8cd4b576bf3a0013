"""Load a person's own model from an import path ``package.module:factory``.

The factory is a callable taking no arguments that returns either

* ``(module, example_inputs)``, where ``module`` is an ``nn.Module`` and ``example_inputs`` is
  a tensor or a tuple/list of tensors (the positional arguments of ``module.forward``), or
* a bare ``nn.Module`` with an attribute ``example_inputs`` holding the same.

Example, in ``my_models.py`` on ``sys.path``::

    def small_mlp():
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        return model, (torch.randn(2, 8),)

and then ``load_factory("my_models:small_mlp")``.

Security: loading imports the module and calls the factory, which runs arbitrary code with the
permissions of the process. Call :func:`load_factory` only with an import path given by the
person running the tool: a command-line argument, or an app setting that the operator has
enabled. Never pass it a path that came from a web request or a shared file.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from types import ModuleType
from typing import Any

from torch import Tensor, nn

__all__ = ["LoaderError", "ModelSpecError", "load_factory", "parse_spec"]


class LoaderError(ValueError):
    """A model factory could not be loaded or returned something unusable."""


class ModelSpecError(LoaderError):
    """A model spec or a size override could not be read; the message names the fix."""


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``"package.module:factory"`` into ``("package.module", "factory")``."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise LoaderError(
            f"model factory must be written 'package.module:factory' with one colon "
            f"(got {spec!r}); for example 'my_models:build_model'"
        )
    module_name, attr = (part.strip() for part in spec.split(":"))
    if not module_name or not attr:
        raise LoaderError(
            f"model factory {spec!r} needs both a module and a factory name around the colon; "
            "for example 'my_models:build_model'"
        )
    return module_name, attr


def _import(module_name: str, spec: str, reload: bool = False) -> ModuleType:
    try:
        if reload and module_name in sys.modules:
            importlib.invalidate_caches()
            return importlib.reload(sys.modules[module_name])
        return importlib.import_module(module_name)
    except ImportError as e:
        raise LoaderError(
            f"cannot import module {module_name!r} (from {spec!r}): {e}; check the spelling "
            "and that its folder is on PYTHONPATH (or run from that folder)"
        ) from e
    except SystemExit as e:
        raise LoaderError(
            f"importing module {module_name!r} (from {spec!r}) called sys.exit({e.code!r}); "
            "a model module must not exit: move that code under `if __name__ == '__main__':`"
        ) from None
    except Exception as e:  # the module's own code failed while importing
        raise LoaderError(
            f"importing module {module_name!r} (from {spec!r}) raised "
            f"{type(e).__name__}: {e}; fix the module so that it imports cleanly"
        ) from e


def _callables(module: ModuleType) -> list[str]:
    """Public callables defined in ``module`` itself (not imported into it), sorted."""
    found = []
    for name, value in vars(module).items():
        if name.startswith("_") or not callable(value):
            continue
        if getattr(value, "__module__", None) == module.__name__:
            found.append(name)
    return sorted(found)


def _resolve(module: ModuleType, attr: str, spec: str) -> Any:
    obj: Any = module
    for part in attr.split("."):  # "module:Class.factory" is allowed
        if not hasattr(obj, part):
            choices = _callables(module)
            close = difflib.get_close_matches(attr, choices, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            listing = ", ".join(choices) if choices else "none"
            raise LoaderError(
                f"module {module.__name__!r} has no attribute {attr!r} (from {spec!r}); "
                f"{hint}callables defined there: {listing}"
            )
        obj = getattr(obj, part)
    return obj


def _as_inputs(value: Any, where: str) -> tuple[Tensor, ...]:
    if isinstance(value, Tensor):
        return (value,)
    if isinstance(value, (tuple, list)):
        bad = [f"#{i}: {type(v).__name__}" for i, v in enumerate(value) if not isinstance(v, Tensor)]
        if not bad:
            return tuple(value)
        raise LoaderError(
            f"{where} must hold only tensors, but these are not: {', '.join(bad)}; "
            "pass the forward's positional arguments as tensors"
        )
    raise LoaderError(f"{where} must be a tensor or a tuple/list of tensors (got {type(value).__name__})")


def load_factory(spec: str, reload: bool = False) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """Import ``package.module:factory``, call ``factory()`` and return ``(module, inputs)``.

    ``inputs`` is always a tuple of tensors. Every failure raises :class:`LoaderError` naming
    the spec, what went wrong and the fix. Runs the factory's code: see the module docstring.
    ``reload`` imports the module again, so an edited file takes effect.
    """
    module_name, attr = parse_spec(spec)
    module = _import(module_name, spec, reload)
    factory = _resolve(module, attr, spec)
    if not callable(factory):
        raise LoaderError(
            f"{spec!r} names a value of type {type(factory).__name__}, not a callable; point it "
            "at a function that takes no arguments and returns (module, example_inputs)"
        )
    try:
        result = factory()
    except SystemExit as e:
        raise LoaderError(
            f"factory {spec!r} called sys.exit({e.code!r}); it must return (module, example_inputs)"
        ) from None
    except Exception as e:
        raise LoaderError(
            f"factory {spec!r} raised {type(e).__name__}: {e}; it must take no arguments and "
            "return (module, example_inputs)"
        ) from e
    expected = "return (module, example_inputs) or an nn.Module with an example_inputs attribute"
    if isinstance(result, nn.Module):
        if not hasattr(result, "example_inputs"):
            raise LoaderError(
                f"factory {spec!r} returned a {type(result).__name__} without an example_inputs attribute; {expected}"
            )
        return result, _as_inputs(result.example_inputs, f"{spec!r}'s example_inputs")
    if isinstance(result, (tuple, list)) and len(result) == 2:
        model, inputs = result
        if not isinstance(model, nn.Module):
            raise LoaderError(
                f"factory {spec!r} returned a pair whose first item has type "
                f"{type(model).__name__}, not an nn.Module; {expected}"
            )
        return model, _as_inputs(inputs, f"the example inputs returned by {spec!r}")
    raise LoaderError(f"factory {spec!r} returned {_describe(result)}; {expected}")


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a value of type {type(value).__name__}"
