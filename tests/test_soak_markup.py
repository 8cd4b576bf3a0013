"""The soak's markup sweep, its pure parts (no browser, no server): every surface builds a link or
names a field, every payload points at the beacon, and the longest echo is measured exactly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from explorer.builders import links
from explorer.state import HF_MODEL

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("soak_markup", ROOT / "bench" / "soak_markup.py")
assert spec is not None and spec.loader is not None
markup = importlib.util.module_from_spec(spec)
sys.modules["soak_markup"] = markup  # its dataclasses look their module up
spec.loader.exec_module(markup)

BEACON = "http://127.0.0.1:4321"


def test_the_sweep_has_at_least_30_surfaces_each_named_once():
    names = [s.name for s in markup.surfaces()]
    assert len(names) >= 30
    assert len(set(names)) == len(names)
    assert markup.HF_MODEL == HF_MODEL


@pytest.mark.parametrize("kind", ["md-image", "md-link", "html-img", "script", "dot"])
def test_a_markup_payload_points_at_the_beacon_under_its_tag(kind):
    text = markup.payload(kind, BEACON, "s3dot")
    assert f"{BEACON}/s3dot/" in text


def test_the_long_payload_is_longer_than_a_note_shows():
    assert len(markup.payload("long", BEACON, "t")) == markup.LONG_CHARS > links.SHOWN_CHARS  # cut in a note


def test_an_unknown_payload_kind_names_the_valid_ones():
    with pytest.raises(ValueError, match="one of md-image, md-link"):
        markup.payload("svg", BEACON, "t")


@pytest.mark.parametrize("surface", [s for s in markup.surfaces() if s.how == "link"], ids=lambda s: s.name)
def test_a_link_surface_carries_the_payload_exactly_once_and_opens_an_app_page(surface):
    text = markup.payload("dot", BEACON, "s1dot")
    url = urlsplit(markup.link(surface, text))
    assert url.path in ("/", "/learn", "/pipeline", "/sharding", "/training", "/cluster")
    pairs = parse_qsl(url.query, keep_blank_values=True)
    assert sum(text in key or text in value for key, value in pairs) == 1
    assert markup.HOLE not in url.query


def test_a_page_key_goes_to_its_own_page():
    for surface in markup.surfaces():
        if surface.how == "link" and surface.path not in ("/", "/learn"):
            key = surface.params[-1][0]
            page = next(p for p, prefix in links.PAGE_PREFIXES.items() if key.startswith(prefix))
            assert surface.path == f"/{page}"


@pytest.mark.parametrize(
    ("text", "shown", "longest"),
    [
        ("abc", "xxabxx", 2),
        ("abc", "zzz", 0),
        ("W" * 5000, "note: " + "W" * 60 + "... (5,000 characters)", 60),
        ("[x](http://h/l)", "shown [x](http://h/l) as text", 15),
    ],
)
def test_the_longest_echo_is_the_longest_part_of_the_payload_shown(text, shown, longest):
    assert markup.longest_echo(text, shown) == longest


def test_chosen_surfaces_are_those_a_word_names():
    assert markup.chosen() == markup.surfaces()
    picked = markup.chosen("review, job")
    assert picked and all("review" in s.name or "job" in s.name for s in picked)
    assert {s.how for s in picked} == {"paste", "upload", "job"}
