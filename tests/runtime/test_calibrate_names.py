"""``calibrate`` writes a profile of its own (``local-<UTC date-time>`` or ``--name``), never the
shared ``local`` unless named, and a calibrated profile says when and at what load it was measured
wherever it prices something (partitioner.calibration.naming)."""

from __future__ import annotations

import dataclasses
import datetime
import re

import pytest
from test_calibrate import _profile as _box

from cli.main import main
from partitioner import cluster
from partitioner.calibration.naming import calibrated_words, dated_name, newest_calibrated
from partitioner.device_profile import DeviceProfile, find_profile, profile_path


def _profile(name: str, measured_at: str = "2026-01-01T00:00:00+00:00", load: float = 1.5) -> DeviceProfile:
    """test_calibrate's measured box, dated ``measured_at`` at ``load``."""
    return dataclasses.replace(_box(name), load_average=load, measured_at=measured_at)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARTITION_EXPLORER_CACHE", str(tmp_path))
    return tmp_path / "profiles"


def test_the_default_name_is_dated_and_a_valid_profile_name(cache):
    at = datetime.datetime(2026, 11, 28, 4, 50, 12, tzinfo=datetime.timezone.utc)
    assert dated_name(at) == "local-20261128-045012"
    assert profile_path(dated_name()).parent == cache
    assert re.fullmatch(r"local-\d{8}-\d{6}", dated_name())


def test_a_profile_says_when_and_at_what_load():
    assert calibrated_words(_profile("box")) == "calibrated 2026-01-01T00:00:00+00:00 at load 1.5"
    assert calibrated_words(dataclasses.replace(_profile("box"), measured_at="")) == ""
    assert calibrated_words(None) == ""


def test_calibrate_writes_its_own_profile_and_leaves_local_alone(cache, monkeypatch, capsys):
    import partitioner.calibration.host as host

    shared = _profile("local", "2025-06-01T00:00:00+00:00", 0.1)
    shared.save(profile_path("local"))
    measured = []

    def fake(name, processes=4, *, timeout_s=180.0, progress=None):
        measured.append(name)
        return _profile(name, "2026-11-28T04:50:12+00:00", 3.25)

    monkeypatch.setattr(host, "calibrate", fake)
    assert main(["calibrate", "--processes", "2"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"local-\d{8}-\d{6}", measured[0])
    assert find_profile(measured[0]) is not None and find_profile("local") == shared
    assert "calibrated 2026-11-28T04:50:12+00:00 at load 3.25" in out and f"2x{measured[0]}" in out
    assert newest_calibrated() == measured[0]  # the newest by its recorded time
    assert main(["calibrate", "--show"]) == 0 and len(measured) == 1  # shown, not measured again
    assert "at load 3.25" in capsys.readouterr().out
    assert main(["calibrate", "--name", "local", "--processes", "2"]) == 0  # named: the shared one replaced
    assert measured[-1] == "local" and find_profile("local").load_average == 3.25


def test_a_cluster_on_a_calibrated_profile_says_so(cache):
    _profile("box").save(profile_path("box"))
    target = cluster.cluster("box", devices_per_node=2)
    assert "calibrated 2026-01-01T00:00:00+00:00 at load 1.5" in target.accelerator.assumes
    assert "calibrated" not in cluster.cluster("h100-80gb").accelerator.assumes
