"""One set of layout rules for --open, --export and --run, applied before any search or process:
a Layout checks its own values, check_layout checks it against the model, the batch and the
cluster, and parse_layout reads ASCII digits and each word once."""

from __future__ import annotations

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
        (dict(recompute="sometimes"), r"recompute must be one of none, selective, full, layers-K"),
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
        check_layout(gpt, cluster.Layout(dp=8, tp=8, pp=8, schedule="1f1b", ep=2, cp=4), w, max_devices=64)
    text = str(err.value)
    for rule in (
        "tp8 must divide the attention heads and the widths (4 heads",
        "pp8 need a layer each (or the embedding or the head) and the model has 4 layers",
        "ep2 must divide the experts (none: a dense model)",
        "cp4 must divide the sequence (30 tokens)",
        "global batch (12) must divide over dp8 x mb1",
        "needs 2048 devices and the cluster has 64",
    ):
        assert rule in text, rule
    check_layout(
        gpt, cluster.Layout(dp=2, tp=4, pp=2, schedule="1f1b", cp=2), cluster.Workload(global_batch=16, seq_len=32), 32
    )
    # uneven stages run (NOTE: [Uneven stages]): 4 layers over 3 stages, the busiest holding 2
    check_layout(gpt, cluster.Layout(pp=3, schedule="1f1b"), cluster.Workload(global_batch=3, seq_len=32))


MLP = ("mlp", "--set", "n_layer=4", "--set", "hidden=32")
SEARCH = ("--max-nodes", "1", "--global-batch", "16", "--seq-len", "8")


@pytest.fixture(scope="module")
def small_mlp():
    """The small MLP as the command line loads it, traced once for every case of this file."""
    from cli.inputs import load_model

    return load_model(MLP[0], MLP[2::2])


@pytest.fixture
def cli(small_mlp, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``partition-explorer cluster mlp ... ARGS`` in this process on the shared trace: (exit
    status, stdout, stderr, whether the model was loaded). A search or a process started fails the
    case: the refusals below come before either."""
    import cli.cluster
    import partitioner.cluster.run.checked
    from cli.main import main

    loaded: list[str] = []

    def load_model(spec: str, sets=(), devices=""):
        assert (spec, tuple(sets)) == (MLP[0], MLP[2::2])  # the one model these cases share
        loaded.append(spec)
        return small_mlp

    def started(*args, **kwargs):
        raise AssertionError("a search or a process started before the layout was refused")

    monkeypatch.setattr(cli.cluster, "load_model", load_model)
    monkeypatch.setattr(cli.cluster.cluster, "search", started)
    monkeypatch.setattr(partitioner.cluster.run.checked, "check_layout", started)

    def run(*args: str) -> tuple[int, str, str, bool]:
        code = main(["cluster", *MLP, *SEARCH, *args])
        out, err = capsys.readouterr()
        return code, out, err, bool(loaded)

    return run


@pytest.mark.parametrize(
    "args, match, traced",
    [
        (("--open", "dp\u0663"), "ASCII digits", False),
        (("--open", "dp2 dp4"), "each setting once", False),
        (("--open", "tp99999999999999999999"), "at most 8 digits", False),
        (("--open", "dp2 zigzag"), "'zigzag'", False),
        (("--run", "dp2 dp4"), "each setting once", False),
        (("--run", "zero9"), "zero must be 0, 1, 2 or 3", False),
        (("--open", "dp8 tp8"), "needs 64 devices and the cluster has 8", False),
        (
            ("--open", "tp3", "--export", "megatron"),
            "tp3 must divide the attention heads and the widths (width 32",
            True,
        ),
        (("--run", "dp2 ep2"), "ep2 must divide the experts (none: a dense model)", True),
        (("--run", "tp3"), "tp3 must divide", True),
        (("--run", "dp2 shard2 zero3"), "shard2 is planned but not run here", True),
    ],
)
def test_the_command_line_refuses_before_it_searches_or_starts_a_process(cli, args, match, traced):
    """Words are read before the model is loaded and traced (minutes for a large model); the rules
    that need the model after the trace, before any search or process."""
    code, out, err, loaded = cli(*args)
    assert code == 2, err
    assert match in err and "Traceback" not in err
    assert "searched" not in out and "local processes" not in out
    assert loaded == traced


def test_the_command_line_says_when_an_answer_sits_at_the_searchs_edge(
    small_mlp, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    import cli.cluster
    from cli.main import main

    monkeypatch.setattr(cli.cluster, "load_model", lambda *args, **kwargs: small_mlp)
    assert main(["cluster", *MLP, *SEARCH]) == 0
    out = capsys.readouterr().out
    fastest = next(line for line in out.splitlines() if line.startswith("fastest:"))
    at_edge = fastest.startswith("fastest: 8 devices")
    assert ("at the largest size searched (8 devices)" in out) == at_edge and (not at_edge or "--max-nodes" in out)
