"""One set of layout rules for --open, --export and --run, applied before any search or process:
a Layout checks its own values, check_layout checks it against the model, the batch and the
cluster, and parse_layout reads ASCII digits and each word once."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import partitioner
import sample_models
from partitioner import PartitionError, cluster
from partitioner.cluster.layouts import check_layout
from partitioner.cluster.run.compose import parse_layout


@pytest.mark.parametrize(
    "values, match",
    [
        (dict(tp=0), r"tp must be a whole number in \[1, 1048576\] \(got 0\)"),
        (dict(dp=True), r"dp must be a whole number"),
        (dict(pp=2.0), r"pp must be a whole number"),
        (dict(cp=1 << 21), r"cp must be a whole number"),
        (dict(zero=4), r"zero must be 0, 1, 2 or 3 \(got 4\)"),
        (dict(schedule="zigzag"), r"schedule must be one of none, gpipe, 1f1b, interleaved_1f1b"),
        (dict(recompute="sometimes"), r"recompute must be one of none, selective, full or min-cut-B"),
        (dict(recompute="min-cut-1.5"), r"min-cut-B with B in \[0, 1\]"),
        (dict(schedule="interleaved_1f1b", pp=2, virtual=1), r"at least 2 chunks"),
        (dict(dp=1024, tp=1024, pp=2), r"beyond 1048576"),
    ],
)
def test_a_layout_checks_its_own_values(values, match):
    with pytest.raises(PartitionError, match=match):
        cluster.Layout(**values)


@pytest.mark.parametrize(
    "text, match",
    [
        ("dp\u0663", r"got 'dp\u0663'.*ASCII digits"),  # an Arabic-Indic three
        ("dp2 dp4", r"each setting once \(dp twice"),
        ("tp99999999999999999999", r"at most 8 digits"),
        ("1f1b gpipe pp2", r"schedule twice"),
    ],
)
def test_parse_layout_reads_ascii_digits_and_each_word_once(text, match):
    with pytest.raises(PartitionError, match=match):
        parse_layout(text)


def test_parse_layout_reads_the_new_words():
    lay = parse_layout("dp2 tp8 pp4 interleaved_1f1b v4 cp2 no-sp fp32-grads zero3 recompute-selective")
    assert lay == cluster.Layout(
        dp=2,
        tp=8,
        pp=4,
        schedule="interleaved_1f1b",
        virtual=4,
        cp=2,
        sp=False,
        grad_fp32=True,
        zero=3,
        recompute="selective",
    )
    assert parse_layout(lay.label()) == lay  # the label reads back


@pytest.fixture(scope="module")
def gpt():
    module, inputs, kwargs = sample_models.load(
        "hf:gpt2", overrides={"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 1000}
    )
    return cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs))


def test_check_layout_names_every_rule_broken(gpt):
    w = cluster.Workload(global_batch=12, seq_len=30)
    with pytest.raises(PartitionError) as err:
        check_layout(gpt, cluster.Layout(dp=8, tp=8, pp=3, schedule="1f1b", ep=2, cp=4), w, max_devices=64)
    text = str(err.value)
    for rule in (
        "tp8 must divide the attention heads and the widths (4 heads",
        "pp3 must divide the 4 layers",
        "ep2 must divide the experts (none: a dense model)",
        "cp4 must divide the sequence (30 tokens)",
        "global batch (12) must divide over dp8 x mb1",
        "needs 768 devices and the cluster has 64",
    ):
        assert rule in text, rule
    check_layout(
        gpt, cluster.Layout(dp=2, tp=4, pp=2, schedule="1f1b", cp=2), cluster.Workload(global_batch=16, seq_len=32), 32
    )


def _cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "cluster",
            "mlp",
            "--set",
            "n_layer=4",
            "--set",
            "hidden=32",
            "--max-nodes",
            "1",
            "--global-batch",
            "16",
            "--seq-len",
            "8",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, time.perf_counter() - began


@pytest.mark.parametrize(
    "args, match",
    [
        (("--open", "dp\u0663"), "ASCII digits"),
        (("--open", "dp2 dp4"), "each setting once"),
        (("--open", "tp99999999999999999999"), "at most 8 digits"),
        (("--open", "tp3", "--export", "megatron"), "tp3 must divide the attention heads and the widths (width 32"),
        (("--open", "dp8 tp8"), "needs 64 devices and the cluster has 8"),
        (("--run", "dp2 ep2"), "ep2 must divide the experts (none: a dense model)"),
        (("--run", "tp3"), "tp3 must divide"),
        (("--run", "dp2 shard2 zero3"), "shard2 is planned but not run here"),
    ],
)
def test_the_command_line_refuses_before_it_searches_or_starts_a_process(args, match):
    done, seconds = _cli(*args)
    assert done.returncode == 2, done.stderr
    assert match in done.stderr and "Traceback" not in done.stderr
    assert "searched" not in done.stdout and "local processes" not in done.stdout
    assert seconds < 60  # a refusal, not a run (a --run that starts ranks takes longer than this here)


def test_the_command_line_says_when_an_answer_sits_at_the_searchs_edge(capsys: pytest.CaptureFixture[str]):
    from cli.main import main

    args = ["cluster", "mlp", "--set", "n_layer=4", "--set", "hidden=32", "--global-batch", "16", "--seq-len", "8"]
    assert main([*args, "--max-nodes", "1"]) == 0
    out = capsys.readouterr().out
    fastest = next(line for line in out.splitlines() if line.startswith("fastest:"))
    at_edge = fastest.startswith("fastest: 8 devices")
    assert ("at the largest size searched (8 devices)" in out) == at_edge and (not at_edge or "--max-nodes" in out)
