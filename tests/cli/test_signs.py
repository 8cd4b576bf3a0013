"""The command line writes signs, zeros and shares as a person would: no "-0.0%", no "0.0%" for
something, no "slower" for a faster split without the reason."""

from __future__ import annotations

import math

import pytest
from cli_helpers import DEVICES

import partitioner
from cli.diff_report import format_diff
from cli.main import main
from cli.report import format_plan_summary
from partitioner.plan.diff import diff_plans
from partitioner.testing.synthetic import synthetic_graph
from partitioner.units import format_seconds, format_signed


def test_signed_percentages_never_read_minus_or_plus_zero():
    assert format_signed(-0.00001) == "0%" and format_signed(0.0) == "0%" and format_signed(0.00049) == "0%"
    assert format_signed(0.125) == "+12.5%" and format_signed(-0.031) == "-3.1%"
    assert format_signed(math.nan) == "-" and format_signed(math.inf) == "+inf"


def test_plan_summary_shares_of_a_large_device_never_read_zero():
    graph = synthetic_graph([(0, 1)], [600, 600])
    plan = partitioner.evaluate_plan(
        graph,
        partitioner.parse_devices("2x16GiB"),
        {"op0": 0, "op1": 1},
        {0: [0], 1: [1]},
        transfer_rate_bytes_per_s=1e9,
    )
    text = format_plan_summary(plan, graph)
    assert "<0.1% of 16 GiB" in text and "0.0%" not in text


@pytest.mark.slow
def test_pipeline_is_never_slower_than_a_simple_split_that_fits(capsys):
    assert main(["pipeline", "mlp", "--devices", "4x1GiB", "--stages", "4", "--microbatches", "8"]) == 0
    out = capsys.readouterr().out
    assert "-0." not in out and "+0.0" not in out
    # The bottleneck-exact split lost 32.6 % to equal layers here: the fill and drain count every
    # stage. The plan is now the fastest that fits of it and the simple splits.
    assert "faster than this split" not in out and "does not fit the devices' memory" not in out
    inference_rows = [line for line in out.splitlines() if line[:1].isdigit()]
    assert inference_rows and all(" 0 s " not in line for line in inference_rows)  # no backward in inference


def test_seconds_never_read_in_exponent_form():
    from partitioner.units import format_seconds

    assert format_seconds(0.999999e-6) == "1 us" and format_seconds(999.4e-9) == "999 ns"
    assert format_seconds(1234.0) == "1,234 s" and format_seconds(-0.9999999e-3) == "-1 ms"
    assert "e+" not in format_seconds(0.9999996) and format_seconds(2.25e-5) == "22.5 us"


def test_a_diff_of_latencies_equal_but_for_rounding_reads_no_minus_zero(graph):
    devices = partitioner.parse_devices(DEVICES)
    a, b = partitioner.partition(graph, devices), partitioner.partition(graph, devices, mode="cost_aware")
    assert a.latency_s == pytest.approx(b.latency_s, rel=1e-12)  # the same path, summed in another order
    text = format_diff(diff_plans(a, b))
    assert f"end-to-end latency: {format_seconds(a.latency_s)}\n" in text
    assert "-0 s" not in text and "+0 s" not in text
