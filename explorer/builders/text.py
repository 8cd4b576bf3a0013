"""Text a person or a model supplied, made safe for Streamlit's Markdown.

``st.markdown``, ``st.error`` and friends render Markdown: a plan file whose model name is
``![m](http://host/pixel.png)`` would make every reviewer's browser fetch that URL. Every string
that did not come from this code goes through :func:`md` before it reaches such a call (or is
shown with ``st.text`` / ``st.code``, which render nothing)."""

from __future__ import annotations

import re

__all__ = ["md"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&])")


def md(text: object) -> str:
    """``text`` with every Markdown and HTML special character escaped (shown as written)."""
    return _SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")
