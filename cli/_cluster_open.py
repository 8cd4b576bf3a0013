"""``partition-explorer cluster --open``: one layout as the page opens it, whether or not it is
among the best: its memory by kind, its step band, its time by cause and its collectives."""

from __future__ import annotations

from typing import Any

from cli.report import format_table
from partitioner import cluster
from partitioner.cluster.bands import duration_band, host_memory_line, mfu_band, run_days, seconds_band, tokens_band
from partitioner.units import format_bytes, format_seconds

__all__ = ["checked_layout", "idle_words", "open_layout", "json_opened"]


def idle_words(text: str, layout: cluster.Layout, budgets: tuple[float, ...]) -> list[str]:
    """The words of the layout string ``text`` that cannot act on ``layout`` (parsed from it) with
    the budgets --min-cut-budgets will measure (``budgets``), each with its reason and fix; the
    words that cannot act on the layout itself are refused by its parser. Read before the model is
    loaded: none of it needs the model. O(1)."""
    from partitioner.cluster.rules import min_cut_label

    broken = []
    if layout.recompute.startswith("min-cut-") and layout.recompute not in {min_cut_label(b) for b in budgets}:
        measured = ", ".join(f"{b:g}" for b in budgets) or "none"
        budget = layout.recompute.removeprefix("min-cut-")
        broken.append(
            f"'recompute-{layout.recompute}' reads the min-cut measured at budget {budget} and "
            f"--min-cut-budgets measures {measured}; add --min-cut-budgets {budget}"
        )
    return broken


def checked_layout(
    layout: cluster.Layout, prof: cluster.ModelProfile, work: cluster.Workload, max_devices: int
) -> cluster.Layout:
    """``--open``'s layout (its words read before the trace), checked against the model, the
    batch and the cluster (--max-nodes) before any search: the rules --run applies before it
    starts a process."""
    from partitioner.cluster.layouts import check_layout
    from partitioner.cluster.rules import min_cut_shares

    check_layout(prof, layout, work, max_devices)
    if layout.recompute.startswith("min-cut-"):  # a budget the sweep did not measure: before the search
        min_cut_shares(prof, layout.recompute)
    return layout


def open_layout(
    layout: cluster.Layout, prof: cluster.ModelProfile, work: cluster.Workload, target: cluster.Cluster
) -> cluster.LayoutResult:
    """``--open``: one layout's memory by kind, time by cause and collectives, printed."""
    from partitioner.pipeline.steps import step_simulator

    r = cluster.evaluate(prof, work, target, layout, step_simulator())
    print()
    rate = "tokens/s trained" if work.kind == "training" else "tokens/s generated"
    print(
        f"{r.layout.label()} on {r.devices} x {target.accelerator.name}: {'fits' if r.fits else 'does NOT fit'}, "
        f"{format_bytes(int(r.memory_bytes))} of {format_bytes(target.accelerator.memory_bytes)} a device; "
        f"{seconds_band(r.step_low_s, r.step_high_s)} a {'step' if work.kind == 'training' else 'first token'} "
        f"(MFU {mfu_band(r)}, {tokens_band(*r.tokens_per_s_band)} {rate}"
        + (
            f", {work.train_tokens:.3g} tokens in {duration_band(*run_days(r, work.train_tokens))}"
            if work.kind == "training"
            else ""
        )
        + f"), limited by {r.limit}"
    )
    if r.assumes:
        print(f"the time assumes: {'; '.join(r.assumes)}")
    print(
        "memory per device: " + ", ".join(f"{k.replace('_', ' ')} {format_bytes(int(v))}" for k, v in r.memory.items())
    )
    if host_memory_line(r):
        print(host_memory_line(r))
    print("time by cause: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in r.parts_s.items() if v > 0))
    rows = [
        [
            c.name,
            f"{c.group} ({c.ranks})",
            c.link,
            c.phase,
            f"{c.count:,.0f}",
            format_bytes(int(c.bytes_each)),
            format_seconds(c.seconds_each),
            format_seconds(c.seconds),
            c.overlap or "-",
        ]
        for c in cluster.collectives(prof, work, target, r.layout)
    ]
    if rows:
        print(
            format_table(
                ["collective", "group", "link", "when", "count", "size each", "time each", "total", "hidden behind"],
                rows,
            )
        )
    else:
        print("no collectives: one device")
    return r


def json_opened(
    opened: cluster.LayoutResult, prof: cluster.ModelProfile, work: cluster.Workload, target: cluster.Cluster
) -> dict[str, Any]:
    """``--out`` with ``--open``: the opened layout with each of its collectives."""
    return {
        **opened.to_dict(),
        "collectives": [
            {**c.__dict__, "seconds": c.seconds} for c in cluster.collectives(prof, work, target, opened.layout)
        ],
    }
