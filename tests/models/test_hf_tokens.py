"""Batch and sequence length for hf: models: settings beside the config's fields, flags on the
command line, checked against the model's positions before anything is built."""

from __future__ import annotations

import pytest

import sample_models
from sample_models import ModelSpecError

TINY = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100}


def test_batch_and_sequence_shape_the_example_input():
    _, inputs, _ = sample_models.load("hf:gpt2", overrides={**TINY, "batch_size": 3, "seq_len": 64})
    assert tuple(inputs[0].shape) == (3, 64)
    _, inputs, _ = sample_models.load("hf:gpt2", overrides=TINY)
    assert tuple(inputs[0].shape) == (1, 32)  # the default what-if: seconds to trace at real size


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"seq_len": 5000}, "seq_len must be at most the model's 1024 positions"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"seq_len": "long"}, "seq_len must be a whole number"),
        ({"batch_size": 4096, "seq_len": 1024}, "at most 1048576 tokens"),
    ],
)
def test_bad_shapes_are_named(bad, message):
    with pytest.raises(ModelSpecError, match=message):
        sample_models.load("hf:gpt2", overrides={**TINY, **bad})


def test_the_command_line_flags_set_them(capsys: pytest.CaptureFixture[str]):
    from cli.main import main

    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    argv = ["plan", "hf:gpt2", *sets, "--batch-size", "2", "--seq-len", "16", "--devices", "2x1GiB", "--out", "-"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "batch_size=2" in out and "seq_len=16" in out
