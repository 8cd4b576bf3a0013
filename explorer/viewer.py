"""The graph viewer: Graphviz lays a DOT graph out on the server, the browser pans and zooms it.

One ``st.components.v2`` component (inline JavaScript and CSS shipped in ``explorer/static``, no
build step, no network at run time): the SVG's view box follows the wheel and drags, so labels
are redrawn sharp at any zoom; hovering shows the tooltips the DOT builders write; a click on a
node whose id matches ``clickable`` comes back to Python. Layouts are cached by DOT source, so a
rerun that draws the same graph costs nothing, and the browser keeps each viewer's zoom while
the layout is the same. # NOTE: [Viewer] written by hand: the maintained Streamlit graph
components (streamlit-agraph, streamlit-flow) lay graphs out in the browser without Graphviz's
ranks, and none pans a server-side SVG; the script is 170 lines with no dependency.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Callable

import streamlit as st

from explorer.builders.text import md
from partitioner import PartitionError
from partitioner.draw.dag import render_dot

__all__ = ["show_graph", "svg_of", "svg_size"]

_NAME = "partition_explorer.graph_viewer"
_component: Any = None


def _asset(name: str) -> str:
    return resources.files("explorer").joinpath("static", name).read_text(encoding="utf-8")


def _mount() -> Any:
    global _component
    if _component is None:
        _component = st.components.v2.component(_NAME, css=_asset("viewer.css"), js=_asset("viewer.js"))
    return _component


@st.cache_data(max_entries=48, show_spinner=False)
def svg_of(dot: str) -> str:
    """The SVG of ``dot`` laid out by Graphviz, without the XML prolog (cached by source)."""
    svg = render_dot(dot, "svg").decode("utf-8")
    return svg[svg.find("<svg") :]


def svg_size(svg: str) -> tuple[float, float]:
    """(width, height) of an SVG from :func:`svg_of` in its own units (its view box)."""
    import re

    found = re.search(r'viewBox="[\d.\-]+ [\d.\-]+ ([\d.]+) ([\d.]+)"', svg)
    return (float(found.group(1)), float(found.group(2))) if found else (0.0, 0.0)


def show_graph(
    dot: str,
    *,
    key: str,
    height: int = 560,
    clickable: str | None = None,
    focus: str | None = None,
    hint: str | None = None,
    on_click: Callable[[str], None] | None = None,
    span: tuple[float, float] | None = None,
    sync: str | None = None,
) -> None:
    """Draw ``dot`` in the pan-and-zoom viewer.

    ``clickable``: a regular expression for the node ids (DOT ``id`` attributes) a click sends to
    ``on_click``; ``focus``: a node id to zoom onto (a search hit); ``height``: the most pixels the
    viewer takes (a small graph takes less); ``span``: the SVG (width, height) several viewers share,
    so they open at one scale, each whole (the largest :func:`svg_size` of them); ``sync``: viewers
    given the same name pan and zoom together. A Graphviz failure is shown as an error,
    not raised.
    """
    try:
        svg = svg_of(dot)
    except PartitionError as exc:
        st.error(md(exc))
        return
    data = {
        "svg": svg,
        "view": key,
        "height": height,
        "clickable": clickable,
        "focus": focus,
        "span": span,
        "sync": sync,
        "hint": hint or ("scroll to zoom, drag to pan, hover for details" + (", click to open" if clickable else "")),
    }

    def clicked() -> None:
        value = st.session_state.get(key, {})
        target = getattr(value, "clicked", None) or (value.get("clicked") if isinstance(value, dict) else None)
        if on_click is not None and isinstance(target, str):  # the viewer sends only ids matching clickable
            on_click(target)

    _mount()(key=key, data=data, on_clicked_change=clicked)
