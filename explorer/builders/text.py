"""Text a person or a model supplied, made safe for Streamlit's Markdown.

``st.markdown``, ``st.error`` and friends render Markdown: a plan file whose model name is
``![m](http://host/pixel.png)`` would make every reviewer's browser fetch that URL. Every string
that did not come from this code goes through :func:`md` before it reaches such a call (or is
shown with ``st.text`` / ``st.code``, which render nothing). Chart labels and hover text go
through :func:`plain`: Plotly reads a few HTML tags (``<a href>``, ``<b>``) and entities in them."""

from __future__ import annotations

import html
import math
import re

__all__ = ["md", "plain", "JOINER", "cut_long_words", "number", "counted", "LONG_WORD"]

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&])")


# NOTE: [Autolinks] GitHub-flavoured Markdown turns bare URLs (http://..., www.x) and e-mail
# addresses into links after escapes are read, so a backslash cannot stop it. Its rule links one
# only after a space, punctuation or the start of the text: an invisible WORD JOINER (U+2060)
# before "http"/"www" and after "@" keeps each as text, and the text reads the same.
_AUTOLINK = re.compile(r"(?i)(?<![^\W_])(?=(?:https?|ftp|www|mailto|xmpp)\b)")
JOINER = "\u2060"


_BREAKS = re.compile(r"[\r\n\t\v\f]")


LONG_WORD = 120  # characters without a space: longer runs are cut where a message shows them
_LONG = re.compile(rf"\S{{{LONG_WORD + 1},}}")


def cut_long_words(text: str) -> str:
    """``text`` with every run of over :data:`LONG_WORD` characters without a space cut to its start
    and its length: a 5,000-character model name echoed in a message takes one line, not screens."""

    def cut(match: re.Match) -> str:
        word = match.group(0)
        tail = re.search(r"[:;,.)\]]*$", word).group(0)  # type: ignore[union-attr]  # the sentence's own
        return f"{word[:60]}... ({len(word) - len(tail):,} characters){tail}"

    return _LONG.sub(cut, text)


def md(text: object) -> str:
    """``text`` with every Markdown and HTML special character escaped and no autolink (NOTE:
    [Autolinks]): shown as written, long words cut (:func:`cut_long_words`)."""
    # One line, no leading blanks: a line break, or a tab or four spaces at the start, would begin
    # a new block (an indented one is code, where the escapes show).
    one_line = cut_long_words(_BREAKS.sub(" ", str(text)).lstrip())
    escaped = _SPECIAL.sub(r"\\\1", one_line)
    return _AUTOLINK.sub(JOINER, escaped).replace("@", "@" + JOINER)


def plain(text: object) -> str:
    """``text`` for a Plotly label or hover text: ``&``, ``<`` and ``>`` escaped, so a tag in a
    name shows as written instead of becoming a link or markup."""
    return html.escape(str(text), quote=False)


def number(value: float) -> str:
    """A count or amount as people write it: ``1,280``, ``1,048,576``, ``0.5``, ``12.35``, never
    ``1.28e+03``; four significant figures at most, and ``1.2 x 10^18`` only from 10^15 up (or
    below 10^-6)."""
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if abs(v) >= 1e15 or abs(v) < 1e-6:
        mantissa, exponent = f"{v:.2e}".split("e")
        return f"{float(mantissa):g} x 10^{int(exponent)}"
    if v.is_integer():
        return f"{int(v):,}"
    decimals = max(0, 3 - math.floor(math.log10(abs(v))))
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def counted(count: int, noun: str) -> str:
    """ "1 device", "4 devices", "1,024 devices": a count with its noun as people write them."""
    return f"{number(count)} {noun}{'' if count == 1 else 's'}"
