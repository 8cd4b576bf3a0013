"""The one dtype table (partitioner.units.DTYPES): each type's bytes are torch's, every name reads
back to its record, and a wrong name is refused with the choices (the CLI with exit 2)."""

import pytest
import torch

from partitioner import PartitionError
from partitioner.units import DTYPES, PRECISIONS, dominant_dtype, dtype, dtype_for_bytes, find_dtype


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.short)
def test_bytes_are_torchs_element_size(d):
    assert d.bytes == torch.empty((), dtype=getattr(torch, d.name)).element_size()
    assert torch.empty((), dtype=getattr(torch, d.torch_name)).is_floating_point()  # what the loader builds
    assert d.floating == getattr(torch, d.name).is_floating_point


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.short)
def test_every_name_reads_back(d):
    for name in d.names:
        assert find_dtype(name) is d and find_dtype(name.upper()) is d and dtype(f"torch.{name}") is d
    assert find_dtype(getattr(torch, d.name)) is d  # str(torch.bfloat16) is "torch.bfloat16"


def test_torchs_own_aliases():
    assert find_dtype(torch.half) is dtype("fp16") and find_dtype(torch.float) is dtype("fp32")
    assert find_dtype(torch.double) is dtype("float64")


def test_the_planners_precisions_put_bf16_mixed_first_and_include_fp8():
    """bf16 mixed precision is the default a page and the CLI offer first; fp8 is served at 1 byte a
    weight and trained with bf16 weights and fp32 master and state (NOTE: [FP8 training state])."""
    assert [d.short for d in PRECISIONS] == ["bf16", "fp8", "fp32"]
    assert [d.label for d in PRECISIONS] == ["bf16 (mixed)", "fp8 (mixed)", "fp32"]
    assert [d.bytes for d in PRECISIONS] == [2, 1, 4]


def test_sizes_and_the_traced_type():
    assert [dtype_for_bytes(n).short for n in (1, 2, 4, 8)] == ["fp8", "bf16", "fp32", "fp64"]
    assert dominant_dtype(["int64", "bfloat16", "float32", "bfloat16", None]).name == "bfloat16"
    assert dominant_dtype(["int64"]).name == "float32"  # token ids alone: the default
    assert dtype("int4").weight_scale == 0.25 and dtype("fp8").weight_scale == 0.5 and dtype("bf16").weight_scale == 1


def test_a_wrong_name_names_the_choices():
    with pytest.raises(PartitionError, match=r"unknown dtype 'bf15'; choose one of fp32, bf16, fp16, fp8"):
        dtype("bf15")
    with pytest.raises(PartitionError, match=r"unknown dtype 'fp16'; choose one of bf16, fp8, fp32$"):
        dtype("fp16", PRECISIONS)
    with pytest.raises(PartitionError, match="no floating type of 3 bytes"):
        dtype_for_bytes(3)


@pytest.mark.parametrize(
    "argv, said",
    [
        (["cluster", "mlp", "--precision", "fp16"], ("--precision: invalid choice: 'fp16'", "bf16", "fp8", "fp32")),
        (["cluster", "mlp", "--optimizer", "adamw"], ("--optimizer: invalid choice: 'adamw'", "adam", "sgd", "none")),
        (["plan", "mlp", "--dtype", "bf15"], ("--dtype: invalid choice: 'bf15'", *(d.short for d in DTYPES))),
    ],
)
def test_the_cli_refuses_a_wrong_name_with_exit_2(argv, said, capsys: pytest.CaptureFixture[str]):
    from cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert all(part in err for part in said)
