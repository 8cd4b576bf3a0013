"""load_factory: a good factory in both return styles, and every way a spec can be wrong."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from sample_models._user import LoaderError, load_factory, parse_spec

BODY = """
import torch
from torch import nn


def good():
    return nn.Linear(4, 2), (torch.randn(3, 4),)


def good_list():
    return [nn.Linear(4, 2), [torch.randn(3, 4)]]


def good_tensor():
    return nn.Linear(4, 2), torch.randn(3, 4)


def bare():
    model = nn.Linear(4, 2)
    model.example_inputs = (torch.randn(3, 4),)
    return model


class Factories:
    @staticmethod
    def nested():
        return good()


def bare_without_inputs():
    return nn.Linear(4, 2)


def raises():
    raise RuntimeError("weights file missing")


def needs_argument(width):
    return nn.Linear(width, 2), (torch.randn(3, width),)


def returns_int():
    return 3


def returns_triple():
    return nn.Linear(4, 2), (torch.randn(3, 4),), "extra"


def not_a_module():
    return "model", (torch.randn(3, 4),)


def bad_inputs():
    return nn.Linear(4, 2), (torch.randn(3, 4), "text")


def bad_inputs_type():
    return nn.Linear(4, 2), {"x": torch.randn(3, 4)}


NOT_CALLABLE = 42
"""


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh module of factories on sys.path; returns its (unique) module name."""
    name = f"user_models_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(BODY))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


GOOD = ["good", "good_list", "good_tensor", "bare", "Factories.nested"]


@pytest.mark.parametrize("factory", GOOD)
def test_good_factories(factories: str, factory: str) -> None:
    model, inputs = load_factory(f"{factories}:{factory}")
    assert isinstance(model, torch.nn.Module)
    assert isinstance(inputs, tuple) and len(inputs) == 1
    assert isinstance(inputs[0], torch.Tensor)
    assert model(*inputs).shape == (3, 2)


def test_parse_spec() -> None:
    assert parse_spec("pkg.models:build") == ("pkg.models", "build")
    assert parse_spec(" pkg.models : build ") == ("pkg.models", "build")


@pytest.mark.parametrize("spec", ["no_colon", "a:b:c", ":build", "module:", ""])
def test_malformed_spec(spec: str) -> None:
    with pytest.raises(LoaderError, match="package.module:factory|module and a factory"):
        load_factory(spec)


def test_module_not_importable() -> None:
    with pytest.raises(LoaderError, match="cannot import module 'no_such_module_xyz'.*No module"):
        load_factory("no_such_module_xyz:build")


def test_module_import_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("raise KeyError('config')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LoaderError, match=f"importing module '{name}'.*raised KeyError"):
        load_factory(f"{name}:build")


def test_module_missing_dependency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"needs_dep_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import not_installed_dep_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LoaderError, match="not_installed_dep_xyz"):
        load_factory(f"{name}:build")


def test_attribute_missing_lists_callables(factories: str) -> None:
    with pytest.raises(LoaderError, match="has no attribute 'goood'") as info:
        load_factory(f"{factories}:goood")
    message = str(info.value)
    assert "did you mean 'good'" in message
    assert "bare" in message and "returns_int" in message
    assert "Linear" not in message  # imported names are not listed


def test_not_callable(factories: str) -> None:
    with pytest.raises(LoaderError, match="names a value of type int, not a callable"):
        load_factory(f"{factories}:NOT_CALLABLE")


def test_factory_raises(factories: str) -> None:
    with pytest.raises(LoaderError, match="raised RuntimeError: weights file missing"):
        load_factory(f"{factories}:raises")


def test_factory_needs_arguments(factories: str) -> None:
    with pytest.raises(LoaderError, match="raised TypeError.*width"):
        load_factory(f"{factories}:needs_argument")


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("returns_int", "returned a value of type int"),
        ("returns_triple", "returned a tuple of 3 items"),
        ("not_a_module", "first item has type str, not an nn.Module"),
        ("bare_without_inputs", "without an example_inputs attribute"),
        ("bad_inputs", r"only tensors, but these are not: #1: str"),
        ("bad_inputs_type", "tensor or a tuple/list of tensors \\(got dict\\)"),
    ],
)
def test_wrong_return_type(factories: str, factory: str, message: str) -> None:
    with pytest.raises(LoaderError, match=message):
        load_factory(f"{factories}:{factory}")


def test_loader_error_is_value_error() -> None:
    assert issubclass(LoaderError, ValueError)
