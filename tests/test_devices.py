import json

import pytest

import partitioner
from partitioner import Device, DeviceSpecError, parse_bytes, parse_devices


@pytest.mark.parametrize(
    "text, expected",
    [
        ("16GiB", 16 * 2**30),
        ("1536KiB", 1536 * 1024),
        ("512MiB", 512 * 2**20),
        ("100B", 100),
        ("1.5GiB", int(1.5 * 2**30)),
        ("2GB", 2 * 10**9),
        ("125", 125),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


def test_parse_bytes_rejects_unknown_unit():
    with pytest.raises(DeviceSpecError, match="cannot read a size from '12XB'"):
        parse_bytes("12XB")


def test_parse_devices_homogeneous_and_ids():
    devices = parse_devices("4x1536KiB")
    assert [d.logical_id for d in devices] == [0, 1, 2, 3]
    assert {d.memory_bytes for d in devices} == {1536 * 1024}


def test_parse_devices_heterogeneous_and_presets():
    devices = parse_devices("2x16GiB,1xa100-40gb")
    assert [d.memory_bytes for d in devices] == [16 * 2**30, 16 * 2**30, 40 * 2**30]
    assert devices[2].kind == "a100-40gb" and devices[2].peak_flops == partitioner.PRESETS["a100-40gb"].peak_flops


def test_parse_devices_file(tmp_path):
    path = tmp_path / "devs.json"
    path.write_text(json.dumps([{"memory_bytes": "1GiB"}, {"preset": "t4-16gb", "name": "t4"}]))
    devices = parse_devices(str(path))
    assert devices[0] == Device("dev_0", 2**30, 0)
    assert devices[1].name == "t4" and devices[1].logical_id == 1


def test_parse_devices_bad_group_names_the_fix():
    with pytest.raises(DeviceSpecError, match="neither a size .* nor a preset"):
        parse_devices("2xwarp-drive")


def test_device_rejects_negative_memory():
    with pytest.raises(DeviceSpecError, match="memory_bytes must be between 0 and"):
        Device("d", -1, 0)


def test_changes_and_shares_read_as_a_person_writes_them():
    from partitioner.units import format_change, format_share

    assert format_change(-0.00001) == "the same" and format_change(0.0) == "the same"
    assert format_change(0.125) == "12.5% slower" and format_change(-0.031) == "3.1% faster"
    assert format_share(1, 16 * 2**30) == "<0.1%" and format_share(0, 10) == "0.0%"
    assert format_share(5, 10) == "50.0%"
