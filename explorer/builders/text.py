"""Text a person or a model supplied, made safe for Streamlit's Markdown.

``st.markdown``, ``st.error`` and friends render Markdown: a plan file whose model name is
``![m](http://host/pixel.png)`` would make every reviewer's browser fetch that URL. Every string
that did not come from this code goes through :func:`md` before it reaches such a call (or is
shown with ``st.text`` / ``st.code``, which render nothing). Chart labels and hover text go
through :func:`plain`: Plotly reads a few HTML tags (``<a href>``, ``<b>``) and entities in them."""

from __future__ import annotations

import html
import re

__all__ = ["md", "plain"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&])")


def md(text: object) -> str:
    """``text`` with every Markdown and HTML special character escaped (shown as written)."""
    return _SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")


def plain(text: object) -> str:
    """``text`` for a Plotly label or hover text: ``&``, ``<`` and ``>`` escaped, so a tag in a
    name shows as written instead of becoming a link or markup."""
    return html.escape(str(text), quote=False)
