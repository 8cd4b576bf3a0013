"""explorer.builders.text: md keeps any string as text under a CommonMark renderer
(markdown-it-py, with GFM's tables and strikethrough), and plain keeps tags out of Plotly labels."""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from explorer.builders.text import JOINER, md, plain

RENDER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
HOSTILE = [
    "![m](http://127.0.0.1:9/b.png)",
    "[x](javascript:alert(1))",
    "<img src=x onerror=alert(1)>",
    "**bold** _em_ `code` ~~s~~",
    "# heading",
    "- item\n1. item",
    "| a | b |\n|---|---|",
    "&lt;&amp;",
    "<http://127.0.0.1:9/auto>",
    "a\\*b",
    "$x^2$",
    ":smile: :material/home:",
    "[ref]: http://x",
]


def rendered_text(source: str) -> tuple[str, str]:
    """The HTML markdown-it makes of ``source`` and the text a reader sees in it."""
    out = RENDER.render(source)
    return out, html.unescape(re.sub(r"<[^>]+>", "", out)).strip()


def test_hostile_strings_render_as_themselves():
    for text in HOSTILE:
        out, seen = rendered_text(md(text))
        assert not re.search(r"<(a|img|em|strong|code|h\d|li|table|del|script)\b", out), (text, out)
        assert seen.replace(JOINER, "") == text.replace("\n", " ").strip(), (text, out)


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("\\`*_{}[]()#+-.!|<>~$:&@ \nawh/tp1=\"'"))
        | st.characters(exclude_characters="\x00" + JOINER),
        max_size=40,
    )
)  # CommonMark writes U+0000 as U+FFFD; the word joiner is md's own escape, dropped from what is seen
def test_any_string_renders_as_itself(text):
    out, seen = rendered_text(md(text))
    assert "<a " not in out and "<img" not in out
    assert seen.replace(JOINER, "").split() == text.split()  # the same words, spaces aside


def test_bare_urls_and_addresses_get_a_word_joiner_against_autolinks():
    assert md("see http://x.org") == f"see {JOINER}http\\://x\\.org"
    assert md("www.x.org") == f"{JOINER}www\\.x\\.org"
    assert md("me@x.org") == f"me@{JOINER}x\\.org"
    assert md("xhttp") == "xhttp"  # inside a word GFM links nothing


def test_plain_escapes_tags_for_plotly():
    assert plain('<a href="http://x">dev</a> & co') == '&lt;a href="http://x"&gt;dev&lt;/a&gt; &amp; co'
