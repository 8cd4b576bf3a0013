"""Text a person or a model supplied, made safe for Streamlit's Markdown.

``st.markdown``, ``st.error`` and friends render Markdown: a plan file whose model name is
``![m](http://host/pixel.png)`` would make every reviewer's browser fetch that URL. Every string
that did not come from this code goes through :func:`md` before it reaches such a call (or is
shown with ``st.text`` / ``st.code``, which render nothing). Chart labels and hover text go
through :func:`plain`: Plotly reads a few HTML tags (``<a href>``, ``<b>``) and entities in them."""

from __future__ import annotations

import html
import re

__all__ = ["md", "plain", "JOINER"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&])")


# NOTE: [Autolinks] GitHub-flavoured Markdown turns bare URLs (http://..., www.x) and e-mail
# addresses into links after escapes are read, so a backslash cannot stop it. Its rule links one
# only after a space, punctuation or the start of the text: an invisible WORD JOINER (U+2060)
# before "http"/"www" and after "@" keeps each as text, and the text reads the same.
_AUTOLINK = re.compile(r"(?i)(?<![^\W_])(?=(?:https?|ftp|www|mailto|xmpp)\b)")
JOINER = "\u2060"


_BREAKS = re.compile(r"[\r\n\t\v\f]")


def md(text: object) -> str:
    """``text`` with every Markdown and HTML special character escaped and no autolink (NOTE:
    [Autolinks]): shown as written."""
    # One line, no leading blanks: a line break, or a tab or four spaces at the start, would begin
    # a new block (an indented one is code, where the escapes show).
    one_line = _BREAKS.sub(" ", str(text)).lstrip()
    escaped = _SPECIAL.sub(r"\\\1", one_line)
    return _AUTOLINK.sub(JOINER, escaped).replace("@", "@" + JOINER)


def plain(text: object) -> str:
    """``text`` for a Plotly label or hover text: ``&``, ``<`` and ``>`` escaped, so a tag in a
    name shows as written instead of becoming a link or markup."""
    return html.escape(str(text), quote=False)
