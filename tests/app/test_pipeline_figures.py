"""The Pipeline page's schedule: transfers drawn where ranks wait for them, labels only where they
fit, the legend clear of the axis title, and the bubble explained (zero bubble's above all)."""

from __future__ import annotations

import pytest

from explorer.builders import pipeline_figures
from partitioner import pipeline


def test_transfers_are_drawn_on_the_receiving_rank():
    sim = pipeline.simulate([0.01, 0.02, 0.01], microbatches=4, schedule="1f1b", transfer_s=[0.003, 0.004])
    moved = pipeline_figures.transfers(sim, [0.003, 0.004])
    assert len(moved) == 2 * 2 * 4  # two boundaries, forward and backward, every microbatch
    ends = {(e.stage, e.kind.value, e.microbatch): e for e in sim.timeline}
    for rank, start, end, what in moved:
        assert end - start in (pytest.approx(0.003), pytest.approx(0.004))
        mb = int(what.split("microbatch ")[1].split()[0])
        stage = int(what.rsplit(" ", 1)[1])
        assert ends[(stage, "F" if what.startswith("activations") else "B", mb)].start_s >= end - 1e-12
    fig = pipeline_figures.schedule_figure(sim, 3, [0.003, 0.004])
    strip = next(t for t in fig.data if t.name.startswith("transfer"))
    assert len(strip.x) == len(moved) and strip.marker.pattern.shape == "/"
    assert pipeline_figures.transfers(pipeline.simulate([0.01, 0.01], 2, "gpipe"), 0.0) == []


def test_labels_hide_when_they_do_not_fit_and_the_legend_clears_the_axis_title():
    sim = pipeline.simulate([0.01] * 4, microbatches=64, schedule="gpipe")
    fig = pipeline_figures.schedule_figure(sim, 4)
    assert fig.layout.uniformtext.mode == "hide" and fig.layout.uniformtext.minsize >= 10
    assert fig.layout.legend.y >= 1 and fig.layout.legend.yanchor == "bottom"  # above the plot, not over "time"


def test_the_bubble_note_explains_zero_bubble_at_inference_and_in_training():
    def both(training: bool, m: int) -> tuple:
        zb = pipeline.simulate([0.01, 0.03, 0.01, 0.02], m, "zero_bubble", transfer_s=0.002, training=training)
        il = pipeline.simulate([0.01, 0.03, 0.01, 0.02], m, "interleaved_1f1b", transfer_s=0.002, training=training)
        return zb, il

    zb, il = both(False, 4)
    note = pipeline_figures.bubble_note(zb, False, il)
    assert "no backward" in note and f"{zb.bubble_fraction:.1%}" in note and f"{il.bubble_fraction:.1%}" in note
    zb, il = both(True, 8)
    assert zb.bubble_fraction < il.bubble_fraction
    assert "in the gaps" in pipeline_figures.bubble_note(zb, True, il)
    assert "idle share of 2 ranks" in pipeline_figures.bubble_note(il, True, zb)


def test_the_pipeline_page_explains_zero_bubbles_bubble():
    from app_helpers import errors, shown, start

    at = start()
    at.switch_page("views/pipeline.py").run()
    at.selectbox(key="pp_schedule").set_value("zero_bubble").run()
    assert not at.exception and not errors(at)
    notes = [shown(c.value) for c in at.caption if "idle share" in c.value]
    assert len(notes) == 1 and "no backward" in notes[0] and "interleaved" in notes[0]
    bubble = next(m.value for m in at.metric if m.label == "Bubble")
    assert bubble in notes[0]


def test_idle_time_splits_into_fill_drain_and_gaps():
    sim = pipeline.simulate([0.01, 0.01], microbatches=1, schedule="gpipe", training=False)
    fill, drain, between = pipeline_figures.idle_parts(sim)
    assert (fill, drain, between) == pytest.approx((0.5, 0.5, 0.0))  # one microbatch: all fill and drain
    stages = [0.02, 0.01, 0.01, 0.01, 0.01, 0.03, 0.01, 0.01]  # unequal, slow transfers: zero bubble idles more
    zb = pipeline.simulate(stages, 8, "zero_bubble", transfer_s=0.02, training=True)
    il = pipeline.simulate(stages, 8, "interleaved_1f1b", transfer_s=0.02, training=True)
    assert zb.bubble_fraction > il.bubble_fraction and sum(pipeline_figures.idle_parts(zb)) == pytest.approx(1.0)
    note = pipeline_figures.bubble_note(zb, True, il)
    assert "idles no less" in note and "is the fill" in note and f"{il.bubble_fraction:.1%}" in note
