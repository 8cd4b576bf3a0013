"""``partition-explorer cluster``: every time as its band (low-high), never a lone point, in the
answers, the table, ``--open`` and the JSON; an answer within another's band says so; what the
times assume is printed. The library's bands are given here by hand (dataclasses.replace), so the
tests hold whether or not the planner computes them yet."""

from __future__ import annotations

import json
import re

import pytest

from partitioner import cluster
from partitioner.cluster.bands import band, duration_band, mfu_band, run_days, seconds_band, tokens_band, within_band
from tests.band_helpers import banded, banded_plan

MLP = ("mlp", "--set", "n_layer=4", "--set", "hidden=32")
SEARCH = ("--max-nodes", "2", "--global-batch", "16", "--seq-len", "8", "--top", "5")
ASSUMES = ("eager PyTorch <kernels>", "MFU: causal attention FLOPs")
RANGE = re.compile(r"(\d[\d,.]*)-(\d[\d,.]*)")


@pytest.mark.parametrize(
    "low, high, text",
    [
        (12.3, 15.1, "12-15"),  # two figures of the high end
        (0.8, 1.1, "0.8-1.1"),
        (12.31, 12.36, "12.3-12.4"),  # more figures where two write both ends alike
        (123456.0, 150000.0, "120,000-150,000"),
        (26.94, 26.94, "26.9"),  # no width: one number
        (0.0, 0.0, "0"),
    ],
)
def test_a_band_is_written_to_the_figures_that_tell_its_ends_apart(low, high, text):
    assert band(low, high) == text


def test_each_unit_is_chosen_by_the_high_end():
    assert seconds_band(0.0008, 0.0012) == "0.8-1.2 ms"
    assert duration_band(12 * 86400, 15 * 86400) == "12-15 days"
    assert duration_band(3000, 3500) == "50-58 minutes"
    assert duration_band(3000, 4000) == "0.8-1.1 hours"
    assert tokens_band(1.2e6, 1.45e6) == "1.2-1.4 M"


def _banded(r: cluster.LayoutResult, width: float | None) -> cluster.LayoutResult:
    """``r`` with a band of +-``width`` of its step (None: no band) and :data:`ASSUMES`."""
    return banded(r, width, width or 0.0, ASSUMES)


def _banded_plan(found: cluster.ClusterPlan, width: float | None) -> cluster.ClusterPlan:
    return banded_plan(found, width, width or 0.0, ASSUMES)


@pytest.fixture(scope="module")
def small_mlp():
    from cli.inputs import load_model

    return load_model(MLP[0], MLP[2::2])


@pytest.fixture
def banded_cli(small_mlp, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """The command line in this process on the shared trace, every result given a band of
    +-``width`` of its step; returns (exit status, stdout, the plan the search answered)."""
    import cli.cluster
    from cli.main import main

    search, evaluate = cluster.search, cluster.evaluate
    answered: list[cluster.ClusterPlan] = []
    monkeypatch.setattr(cli.cluster, "load_model", lambda *args, **kwargs: small_mlp)

    def run(width: float | None, *args: str) -> tuple[int, str, cluster.ClusterPlan]:
        def banded_search(*a, **k):
            answered.append(_banded_plan(search(*a, **k), width))
            return answered[-1]

        monkeypatch.setattr(cluster, "search", banded_search)
        monkeypatch.setattr(cluster, "evaluate", lambda *a, **k: _banded(evaluate(*a, **k), width))
        code = main(["cluster", *MLP, *SEARCH, *args])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out, answered[-1]

    return run


def _line(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


@pytest.mark.parametrize("width", [0.2, 0.001])
def test_the_answers_print_each_time_as_its_band_and_which_answers_overlap(banded_cli, width):
    code, out, found = banded_cli(width)
    assert code == 0
    within = within_band(found)
    for title, r in (("fewest devices", found.fewest_devices), ("fastest", found.fastest)):
        assert r is not None
        line = _line(out, f"{title}:")
        assert f"step {seconds_band(r.step_low_s, r.step_high_s)}," in line
        assert f"MFU {mfu_band(r)}," in line and f"take {duration_band(*run_days(r, 1e12))}" in line
        step = RANGE.search(line.split("step ", 1)[1])
        assert step is not None  # low-high, not a lone point
        others = [t for t, o in (("fastest", found.fastest), ("cheapest", found.cheapest)) if o.layout != r.layout]
        overlapping = [t for t in others if r.overlaps(getattr(found, t))]
        assert ("within the band of" in line) == bool(overlapping) == bool(within[title])
        assert all(t in line.split("within the band of", 1)[-1] for t in overlapping)
    assert _line(out, "times assume:") == f"times assume: {'; '.join(ASSUMES)}"
    fastest = found.fastest
    assert fastest is not None
    row = next(line for line in out.splitlines() if fastest.layout.label() in line and "days" in line)
    assert seconds_band(fastest.step_low_s, fastest.step_high_s) in row and mfu_band(fastest) in row


def test_the_bands_of_narrow_and_wide_answers_differ(banded_cli):
    """The band printed is the result's: widen it and the printed ends move apart."""
    narrow = _line(banded_cli(0.01)[1], "fastest:")
    wide = _line(banded_cli(0.3)[1], "fastest:")
    ends = [RANGE.search(line.split("step ", 1)[1]).groups() for line in (narrow, wide)]
    (a, b), (c, d) = ([float(x.replace(",", "")) for x in pair] for pair in ends)
    assert c < a <= b < d


def test_open_prints_its_band_and_assumptions_and_the_json_carries_them(banded_cli, tmp_path):
    out_file = tmp_path / "plan.json"
    code, out, found = banded_cli(0.2, "--open", "dp2 tp2", "--out", str(out_file))
    assert code == 0
    opened = _line(out, "dp2 tp2 pp1 mb1 on 4 x h100-80gb")
    assert RANGE.search(opened.split("a device; ", 1)[1].split(" a step")[0])  # the step as low-high
    assert "MFU " in opened and "tokens/s trained" in opened and "tokens in " in opened
    assert _line(out, "the time assumes:") == f"the time assumes: {'; '.join(ASSUMES)}"
    data = json.loads(out_file.read_text())
    for key in ("fastest", "cheapest", "fewest_devices", "opened"):
        r = data[key]
        assert r["step_low_s"] < r["step_s"] < r["step_high_s"] and r["mfu_low"] < r["mfu"] < r["mfu_high"]
        assert r["assumes"] == list(ASSUMES)
    assert data["fastest"]["step_low_s"] == pytest.approx(found.fastest.step_low_s)
    assert all(r["step_low_s"] < r["step_high_s"] for r in data["best"])


def test_inference_prints_tokens_a_second_as_bands(banded_cli):
    code, out, found = banded_cli(0.2, "--inference", "--generate", "4")
    assert code == 0
    line = _line(out, "fastest:")
    assert "time to first token " in line and re.search(r"; [\d.,]+-[\d.,]+ tokens/s per sequence", line)
    r = found.fastest
    row = next(line for line in out.splitlines() if r.layout.label() in line and line[0].isdigit())
    assert tokens_band(*r.tokens_per_s_band) in row


def test_an_answer_without_a_band_says_it_is_a_point(banded_cli):
    """Where the library gives no band (band_s (0, 0)), the answer says so instead of looking sure."""
    no_band = _line(banded_cli(None)[1], "fastest:")
    assert no_band.endswith("a point: the planner gives no band for this answer")
    assert "a point" not in _line(banded_cli(0.1)[1], "fastest:")
