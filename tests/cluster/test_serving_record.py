"""The serving planner against published serving rows (bench/bench_serving_record.py: each row's
source named there): the solid rows (card, precision, batch and lengths stated) within 20 %.
Rows the planner misses today are strict expected failures naming why, so a change that brings
one within 20 % says so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_serving_record", ROOT / "bench" / "bench_serving_record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_serving_record", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
# Why a solid row is outside 20 % today (planner / published in the bench's table).
FP8_RATE = "FP8 products priced at the datasheet's 2x bf16 (no FP8 curves measured; cuBLAS reaches less)"
MISSED = {
    ("llama-2-70b", 1024, 128, 128): FP8_RATE,
    ("llama-2-70b", 96, 2048, 128): FP8_RATE,
    (
        "llama-2-70b",
        480,
        128,
        2048,
    ): "TensorRT-LLM 0.6.1's decode at batch 480 over tp4 is 2.6x the planner's roofline-bound step",
    ("llama-2-70b", 64, 2048, 2048): "TensorRT-LLM 0.6.1's decode at batch 64 over tp2 is 2.2x the planner's",
    ("llama-2-7b", 1, 128, 1): "TensorRT-LLM 0.5's first token carries a fixed cost the planner's prefill does not",
    ("llama-2-70b", 1, 128, 1): "TensorRT-LLM 0.5's first token at tp4 is 2x the planner's",
    ("llama-2-70b", 1, 2048, 1): "TensorRT-LLM 0.5's first token carries a fixed cost the planner's prefill does not",
}


def _case(row):
    key = (row.model, row.batch, row.input_tokens, row.output_tokens)
    marks = [pytest.mark.xfail(reason=MISSED[key], strict=True)] if key in MISSED else []
    return pytest.param(row, marks=marks, id=f"{row.source.split()[0]}-{row.model}-b{row.batch}-{key[2]}-{key[3]}")


@pytest.mark.slow
@pytest.mark.parametrize("row", [_case(r) for r in BENCH.ROWS if r.solid])
def test_solid_serving_rows_within_20_percent(row):
    assert BENCH.planned(row) / row.published == pytest.approx(1.0, abs=0.20)


@pytest.mark.slow
@pytest.mark.parametrize("row", [r for r in BENCH.ROWS if not r.solid], ids=lambda r: r.source)
def test_bf16_decode_rows_of_an_unnamed_gpu_within_20_percent(row):
    """SGLang's and vLLM's maintainers' Llama-3-8B at batch 1 (their GPU unnamed, H100 taken)."""
    assert BENCH.planned(row) / row.published == pytest.approx(1.0, abs=0.20)
