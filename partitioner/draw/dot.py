"""The DOT vocabulary every drawing shares: device colours, quoting, labels with a device bar.

:mod:`partitioner.draw.dag` draws the partition DAG with it, :mod:`partitioner.draw.nodeview` the node
graphs (one partition's nodes, the whole graph collapsed by module, an algorithm's steps).
Pure string building: no UI import, no Graphviz import.
"""

from __future__ import annotations

import html
from typing import Iterable, Mapping, Sequence

from partitioner.devices import Device
from partitioner.plan.records import Partition, Plan

__all__ = [
    "PALETTE",
    "TOL_LIGHT",
    "CRITICAL_COLOUR",
    "WARNING_COLOUR",
    "HIGHLIGHT_COLOUR",
    "UNKNOWN_DEVICE_COLOUR",
    "device_colours",
    "partition_capacity",
    "quote",
    "percent",
    "device_names",
    "shown_name",
    "MAX_NAME_CHARS",
    "fill",
    "bar_label",
    "html_text",
]

# NOTE: [Device palette] Light fills that keep black text readable. The first nine are Paul Tol's
# "light" scheme (https://personal.sron.nl/~pault/#sec:qualitative), made for labelled fills and
# distinct to readers with deuteranopia or protanopia (tests/draw/test_palette.py simulates both);
# then pastels for the rarer plans of more devices. Device i (in logical-id order) gets
# PALETTE[i % 16].
TOL_LIGHT: tuple[str, ...] = (
    "#77aadd",
    "#ee8866",
    "#eedd88",
    "#ffaabb",
    "#99ddff",
    "#44bb99",
    "#bbcc33",
    "#aaaa00",
    "#dddddd",
)
PALETTE: tuple[str, ...] = TOL_LIGHT + ("#cab2d6", "#fccde5", "#ccebc5", "#e5c494", "#bebada", "#80b1d3", "#fb9a99")
CRITICAL_COLOUR = "#d62728"  # critical-path edges and outlines
WARNING_COLOUR = "#ff7f0e"  # partitions on a device over its memory
HIGHLIGHT_COLOUR = "#1f5fd6"  # search hits
UNKNOWN_DEVICE_COLOUR = "#ffffff"  # a device id the plan does not list (hand-edited plans)


def device_colours(devices: Iterable[Device]) -> dict[int, str]:
    """Logical id -> fill colour, stable for a device list (by sorted logical id)."""
    ids = sorted({d.logical_id for d in devices})
    return {lid: PALETTE[i % len(PALETTE)] for i, lid in enumerate(ids)}


def partition_capacity(plan: Plan, partition: Partition) -> int | None:
    """Memory of the smallest device the partition is placed on (None if none is known)."""
    sizes = [d.memory_bytes for d in plan.devices if d.logical_id in partition.device_ids]
    return min(sizes) if sizes else None


def quote(text: str) -> str:
    """A DOT double-quoted string; ``\\n`` in ``text`` stays a DOT line break. ``&`` is written
    ``&amp;``: Graphviz reads entities (``&lt;``) in every label, so a name shows as written."""
    return '"' + text.replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def percent(used: int, capacity: int | None) -> str:
    """``used`` as a share of ``capacity`` (``?`` when unknown)."""
    if capacity is None:
        return "?"
    if capacity == 0:
        return "inf%" if used else "0%"
    return f"{used / capacity:.0%}"


MAX_NAME_CHARS = 60  # of a plan's name (a device, the model) in a drawing: a plan file's names are any length


def shown_name(name: str) -> str:
    """``name`` as a drawing shows it: cut to :data:`MAX_NAME_CHARS` characters, with its length when cut."""
    return name if len(name) <= MAX_NAME_CHARS else f"{name[:MAX_NAME_CHARS]}... ({len(name):,} characters)"


def device_names(plan: Plan, ids: Iterable[int]) -> str:
    """The names of devices ``ids`` of ``plan`` (each cut: :func:`shown_name`), comma-separated."""
    known = {d.logical_id: shown_name(d.name) for d in plan.devices}
    return ", ".join(known.get(i, f"unknown device {i}") for i in ids) or "no device"


def fill(colours: Mapping[int, str], device_ids: Iterable[int]) -> tuple[str, str]:
    """(style, fillcolor) for a partition: striped with one stripe per device when replicated."""
    fills = [colours.get(d, UNKNOWN_DEVICE_COLOUR) for d in device_ids] or [UNKNOWN_DEVICE_COLOUR]
    if len(fills) == 1:
        return "filled", fills[0]
    return "striped", ":".join(fills)


def bar_label(text: str, colours: Sequence[str]) -> str:
    """An HTML-like DOT label: a bar with one cell per device colour above the text."""
    body = "<BR/>".join(html.escape(line) for line in text.split("\n"))
    bar = "".join(f'<TD BGCOLOR="{c}" HEIGHT="10" WIDTH="24"></TD>' for c in colours)
    return (
        f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3"><TR>{bar}</TR>'
        f'<TR><TD COLSPAN="{len(colours)}">{body}</TD></TR></TABLE>>'
    )


def html_text(text: str) -> str:
    """``text`` escaped for an HTML-like DOT label."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
