"""``partition-explorer cluster --help`` says what the planner does today, and ``--max-nodes``
reaches past Llama 3's 16,384 H100s (2,048 nodes of 8)."""

from __future__ import annotations

import pytest

from cli.main import build_parser, main
from partitioner.cluster.layout_types import RECOMPUTE


@pytest.fixture(scope="module")
def help_text() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return " ".join(sub.choices["cluster"].format_help().split())  # one line: words wrap anywhere


def test_help_names_what_the_planner_does_today(help_text):
    for stale in ("recomputation none or full", "ring collectives"):
        assert stale not in help_text
    for today in (
        "ring, tree or one-shot all-reduce",  # NCCL's choice by size
        "recompute-layers-K",  # partial recomputation, Megatron-LM's --recompute-num-layers
        "min-cut",
        "ceil(layers / pp)",  # uneven stages
        "Every time is a band",
        "within the band of",
        "times assume",
        "4,096 nodes",
    ):
        assert today in help_text, today
    for choice in RECOMPUTE:  # every recomputation the library's table holds
        assert choice in help_text.split("recomputation:", 1)[1], choice


def test_max_nodes_reaches_4096_nodes_and_refuses_more(capsys: pytest.CaptureFixture[str]):
    args = build_parser().parse_args(["cluster", "mlp", "--max-nodes", "4096"])
    assert args.max_nodes == 4096 >= 16384 // 8
    with pytest.raises(SystemExit) as done:
        main(["cluster", "mlp", "--max-nodes", "4097"])
    assert done.value.code == 2 and "must be from 1 to 4,096 (got 4097)" in capsys.readouterr().err
