"""A trace runs beside the page (NOTE: [A trace runs beside the page] in explorer.compute): the page
says what it waits for and the time so far; a Stop (Streamlit raising from the page's next drawing
call) ends the wait and not the trace, which lands in the cache; a run that comes back meanwhile
waits for the same trace instead of starting another."""

from __future__ import annotations

import threading

import pytest

import sample_models
from explorer import compute
from explorer.builders.config import ModelChoice


class Stopped(Exception):
    """What Streamlit raises in a script that was stopped or rerun (StopException, RerunException)."""


class Line:
    """``st.empty()``: records what it says; raises on its ``stop_at``-th line, as a stopped page does."""

    def __init__(self, said: list[str], stop_at: int | None = None) -> None:
        self.said, self.stop_at = said, stop_at

    def info(self, text: str, icon: str | None = None) -> None:
        self.said.append(text)
        if self.stop_at is not None and len(self.said) >= self.stop_at:
            raise Stopped

    def empty(self) -> None:
        pass


@pytest.fixture
def held_trace(monkeypatch):
    """The mlp sample's loader, held until the test releases it; the loads counted."""
    release, loads = threading.Event(), []
    real = sample_models.load

    def held(name, *args, **kwargs):
        loads.append(name)
        assert release.wait(60), "the test never released the trace"
        return real(name, *args, **kwargs)

    monkeypatch.setattr(sample_models, "load", held)
    return release, loads


def test_a_stop_ends_the_wait_and_the_trace_lands_in_the_cache(monkeypatch, held_trace):
    release, loads = held_trace
    choice = ModelChoice("mlp", (("seed", 7011),))
    said: list[str] = []
    monkeypatch.setattr(compute.st, "empty", lambda: Line(said, stop_at=2))
    with pytest.raises(Stopped):
        compute.trace(choice)
    assert said[0].startswith("Tracing the model. ") and "so far" in said[0]  # what it does, the time so far
    assert choice in compute._TRACING, "the trace goes on after the page stopped waiting"

    # A run that comes back while the trace is going waits for the same one.
    monkeypatch.setattr(compute.st, "empty", lambda: Line([]))
    got: list[object] = []
    again = threading.Thread(target=lambda: got.append(compute.trace(choice)))
    again.start()
    release.set()
    again.join(60)
    assert not again.is_alive() and len(got) == 1
    assert loads == ["mlp"], "traced once: the second run waited for the first trace"
    assert compute.trace(choice) is got[0] and choice not in compute._TRACING  # cached, nothing left running


def test_a_failed_trace_is_raised_to_the_page_that_waits(monkeypatch):
    monkeypatch.setattr(compute.st, "empty", lambda: Line([]))
    with pytest.raises(ValueError, match="n_layer must be > 0"):
        compute.trace(ModelChoice("mlp", (("n_layer", -2),)))
    assert not [t for t in threading.enumerate() if t.name == "trace"]
