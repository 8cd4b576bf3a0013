"""Device specs, presets of real accelerators, and parsing of strings like ``"4x16GiB"``.

A :class:`Device` mirrors the reference ``torch.fx.experimental.partitioner_utils.Device``
(name, available memory, logical id) and adds the optional speeds the roofline cost model needs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from partitioner.device_profile import DeviceProfile, find_profile, is_profile_data, load_profile
from partitioner.errors import DeviceSpecError
from partitioner.hardware import HARDWARE
from partitioner.units import format_bytes, parse_bytes

__all__ = [
    "Device",
    "preset_fields",
    "parse_bytes",
    "format_bytes",
    "parse_devices",
    "devices_from_dicts",
    "MAX_DEVICES",
    "profile_device",
    "with_profile",
    "fewest_devices",
    "preset_profile",
]

# More devices than this is a cluster, not a partitioning question; checks stay linear below it
# and the app's device table stays responsive.
MAX_DEVICES = 4096
MAX_MEMORY_BYTES = 2**60  # 1 EiB a device: beyond any accelerator, and within int64 for tables
MAX_SPEED = 1e300  # a speed the cost model can divide by as a float (10**400 as an int overflows)


@dataclass(frozen=True)
class Device:
    """One accelerator (or host) that partitions can be placed on.

    ``memory_bytes`` is the memory available to partitions; ``logical_id`` is the id plans refer
    to. The speeds are optional: the roofline cost model uses them when given and falls back to
    :data:`DEFAULT_SPEEDS` otherwise.
    """

    name: str
    memory_bytes: int
    logical_id: int
    peak_flops: float | None = None  # FLOP/s at the model's dtype
    memory_bandwidth_bytes_per_s: float | None = None  # device memory bandwidth
    link_bandwidth_bytes_per_s: float | None = None  # device-to-device transfer rate
    kind: str = "custom"  # preset name this device came from, for display
    profile: DeviceProfile | None = None  # measured curves (partition-explorer calibrate), used over the speeds

    def __post_init__(self) -> None:
        if not isinstance(self.logical_id, int) or isinstance(self.logical_id, bool):
            raise DeviceSpecError(f"device {self.name!r}: logical_id must be an integer (got {self.logical_id!r})")
        if not isinstance(self.name, str):
            raise DeviceSpecError(f"device name must be a string (got {self.name!r})")
        if not isinstance(self.memory_bytes, int) or isinstance(self.memory_bytes, bool):
            raise DeviceSpecError(
                f"device {self.name!r}: memory_bytes must be an int (got {self.memory_bytes!r}); "
                "use parse_bytes('16GiB') for strings"
            )
        if not 0 <= self.memory_bytes <= MAX_MEMORY_BYTES:
            raise DeviceSpecError(
                f"device {self.name!r}: memory_bytes must be between 0 and {MAX_MEMORY_BYTES} "
                f"(1 EiB; got {self.memory_bytes}); write the memory of one device, e.g. 80GiB"
            )
        for field in ("peak_flops", "memory_bandwidth_bytes_per_s", "link_bandwidth_bytes_per_s"):
            value = getattr(self, field)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value < float("inf")
                or value > MAX_SPEED
            ):
                raise DeviceSpecError(
                    f"device {self.name!r}: {field} must be a positive number up to {MAX_SPEED:g} or omitted (got {value!r})"
                )

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.profile is None:
            del data["profile"]
        elif self.kind in HARDWARE and self.profile == preset_profile(self.kind, self.profile.engine):
            data["profile"] = self.kind if self.profile.engine == "eager" else f"{self.kind}@{self.profile.engine}"
        else:
            data["profile"] = self.profile.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Device":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DeviceSpecError(f"unknown device field(s) {unknown}; valid fields are {sorted(known)}")
        values = dict(data)
        if isinstance(values.get("memory_bytes"), str):
            values["memory_bytes"] = parse_bytes(values["memory_bytes"])
        if isinstance(values.get("profile"), Mapping):
            values["profile"] = DeviceProfile.from_dict(values["profile"])
        elif isinstance(values.get("profile"), str):
            body, _, engine = values["profile"].partition("@")
            values["profile"] = _named_profile(body)
            if engine:
                values["profile"] = values["profile"].with_engine(engine)
        elif values.get("profile") is not None:
            raise DeviceSpecError(
                f"device field profile must be a profile object or a profile's name or file (got {values['profile']!r})"
            )
        try:
            return cls(**values)
        except TypeError as exc:
            raise DeviceSpecError(f"device {dict(data)!r} is incomplete: {exc}") from None


# Speeds used by the roofline model when a device gives none: a modest accelerator.
DEFAULT_SPEEDS = {
    "peak_flops": 10e12,
    "memory_bandwidth_bytes_per_s": 500e9,
    "link_bandwidth_bytes_per_s": 25e9,
}


def preset_fields(name: str) -> dict[str, Any]:
    """The device type ``name`` (a row of :data:`partitioner.hardware.HARDWARE`, the one table and
    the presets) as the fields of a :class:`Device`: memory, the dense bf16 peak, HBM bandwidth and
    the node's link. A preset's devices carry the card's GPU profile too (:func:`preset_profile`)."""
    card = HARDWARE[name]
    return dict(
        memory_bytes=card.memory_bytes,
        peak_flops=card.peak_flops,
        memory_bandwidth_bytes_per_s=card.memory_bandwidth_bytes_per_s,
        link_bandwidth_bytes_per_s=card.link_bandwidth_bytes_per_s,
    )


def preset_profile(name: str, engine: str = "eager") -> DeviceProfile | None:
    """The GPU profile the preset ``name``'s devices carry (None for the host CPU)."""
    from partitioner.profiles import gpu_profile

    return gpu_profile(name, engine)


def _named_profile(body: str) -> DeviceProfile:
    """A profile from a file (``*.json``), a preset's name (its GPU profile), or a name cached by
    ``partition-explorer calibrate``."""
    if body.endswith(".json"):
        return load_profile(body)
    preset = preset_profile(body.lower()) if body.lower() in HARDWARE else None
    if preset is not None:
        return preset
    found = find_profile(body)
    if found is None:
        raise DeviceSpecError(
            f"no device profile named {body!r}; measure one with `partition-explorer calibrate --name {body}`"
        )
    return found


def profile_device(profile: DeviceProfile, logical_id: int) -> Device:
    """A device of the measured type ``profile`` (its best figures as the flat speeds)."""
    link = profile.link
    return Device(
        name=f"{profile.name}_{logical_id}",
        memory_bytes=profile.memory_bytes,
        logical_id=logical_id,
        peak_flops=profile.peak_flops,
        memory_bandwidth_bytes_per_s=profile.memory_bandwidth_bytes_per_s,
        link_bandwidth_bytes_per_s=link.bandwidth_bytes_per_s if link else None,
        kind=profile.name,
        profile=profile,
    )


def with_profile(devices: Iterable[Device], profile: DeviceProfile) -> list[Device]:
    """The same devices (names, ids, memory) measured as ``profile``: its speeds and curves."""
    link = profile.link
    return [
        dataclasses.replace(
            d,
            peak_flops=profile.peak_flops,
            profile=profile,
            memory_bandwidth_bytes_per_s=profile.memory_bandwidth_bytes_per_s,
            link_bandwidth_bytes_per_s=link.bandwidth_bytes_per_s if link else None,
        )
        for d in devices
    ]


def _preset_device(preset: str, logical_id: int) -> Device:
    name = f"{preset}_{logical_id}"
    return Device(
        name=name, logical_id=logical_id, kind=preset, profile=preset_profile(preset), **preset_fields(preset)
    )


def parse_devices(spec: str) -> list[Device]:
    """Read a device list from a short spec.

    Forms (comma-separated groups; logical ids are assigned in order from 0):
      ``"4x16GiB"``        four devices of 16 GiB each
      ``"2xa100-40gb"``    two preset devices; ``"a100-40gb"`` one
      ``"2x16GiB,1x8GiB"`` heterogeneous groups
      ``"2xlocal"``        two devices of a profile cached by ``partition-explorer calibrate``
      ``"2xprofile.json"`` two devices of the profile in that file
      ``"2xh100-80gb@graphs"`` two H100s timed for an engine with CUDA graphs and fused kernels
                           (``@eager``, the default: plain PyTorch; see partitioner.kernels.ENGINES)
      a path to a JSON file holding a list of device dicts (see :meth:`Device.from_dict`), or a
      profile (one device)
    """
    text = spec.strip()
    if not text:
        raise DeviceSpecError("device spec is empty; write e.g. '4x16GiB' or '2xa100-40gb'")
    if _names_devices_file(text):
        return _read_devices_file(text)
    devices: list[Device] = []
    # Each group is checked whole before its devices are made, so the first bad group is the one
    # reported, and the ids run on from the groups before it.
    for group in (g.strip() for g in text.split(",")):
        count, body = _group_count_and_body(spec, group, len(devices))
        body, engine = _engine_suffix(body, group)
        make = _device_maker(spec, group, body, engine)
        devices += [make(lid) for lid in range(len(devices), len(devices) + count)]
    return devices


def _names_devices_file(text: str) -> bool:
    """Whether ``text`` is a devices (or profile) file rather than groups. A counted group such as
    ``"2xprofile.json"`` is groups unless a file of that very name exists."""
    path = Path(text)
    counted = re.fullmatch(r"\d+\s*[xX*]\s*\S.*", text) is not None and not path.exists()
    return not counted and (text.endswith(".json") or bool(path.suffix and path.exists()))


def _read_devices_file(text: str) -> list[Device]:
    """The devices of the JSON file ``text``: a list of device objects, an object holding them
    under ``"devices"``, or one measured profile (one device)."""
    path = Path(text)
    if not path.exists():
        raise DeviceSpecError(f"devices file {text!r} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte order mark is no part of it
    except json.JSONDecodeError as exc:
        raise DeviceSpecError(f"devices file {text!r} is not valid JSON: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceSpecError(
            f"cannot read devices file {text!r} ({type(exc).__name__}: {exc}); give a readable "
            "JSON file holding a list of devices"
        ) from None
    except RecursionError:
        raise DeviceSpecError(f"devices file {text!r} is nested too deeply; write a flat list of devices") from None
    if is_profile_data(data):
        return [profile_device(DeviceProfile.from_dict(data), 0)]
    if isinstance(data, dict):
        data = data.get("devices", data)
    if not isinstance(data, list):
        raise DeviceSpecError(f"devices file {text!r} must hold a list of device objects")
    return devices_from_dicts(data)


def _group_count_and_body(spec: str, group: str, devices_before: int) -> tuple[int, str]:
    """``"4x16GiB"`` -> (4, "16GiB"); no count is one device. Refuses an empty group, a count
    below 1, and a count that takes the spec past :data:`MAX_DEVICES` after ``devices_before``."""
    if not group:
        raise DeviceSpecError(
            f"device spec {spec!r} has an empty group (a stray comma); write groups like '4x16GiB' or '2x16GiB,1x8GiB'"
        )
    match = re.fullmatch(r"(?:(\d+)\s*[xX*]\s*)?(.+)", group)
    if match is None:  # pragma: no cover - the pattern matches any non-empty string
        raise DeviceSpecError(f"cannot read device group {group!r}; write e.g. '4x16GiB'")
    count = int(match.group(1)) if match.group(1) else 1
    if count < 1:
        raise DeviceSpecError(f"device count must be >= 1 in {group!r}")
    if devices_before + count > MAX_DEVICES:
        raise DeviceSpecError(
            f"device spec {spec!r} describes more than {MAX_DEVICES} devices; plan for at most "
            f"{MAX_DEVICES} (e.g. one node's devices) and replicate the plan"
        )
    return count, match.group(2).strip()


def _device_maker(spec: str, group: str, body: str, engine: str) -> Callable[[int], Device]:
    """How to make a device of the type ``body`` (a preset, a measured profile or a size) under
    ``engine`` ("" for none) from its logical id. Every refusal comes here, before any device of
    the group is made."""
    preset = body.lower()
    if preset in HARDWARE:
        if not engine:
            return lambda lid: _preset_device(preset, lid)
        curves = preset_profile(preset)
        if curves is None:
            raise DeviceSpecError(
                f"device group {group!r}: {body!r} has no kernel curves to run under an "
                f"engine; engines apply to GPU types ({', '.join(_gpu_presets())})"
            )
        timed = curves.with_engine(engine)
        # A preset under another engine keeps its figures (memory, speeds); only its curves change.
        return lambda lid: dataclasses.replace(_preset_device(preset, lid), profile=timed)
    if body.endswith(".json") or find_profile(body) is not None:
        measured = _named_profile(body)
        if engine:
            measured = measured.with_engine(engine)
        return lambda lid: profile_device(measured, lid)
    memory = _group_memory(spec, group, body)
    if engine:
        raise DeviceSpecError(
            f"device group {group!r}: an engine applies to a device type with kernel curves "
            f"(a GPU preset or a measured profile), not to a size"
        )
    return lambda lid: Device(name=f"dev_{lid}", memory_bytes=memory, logical_id=lid)


def _group_memory(spec: str, group: str, body: str) -> int:
    """The memory of one device of a group sized by ``body`` (e.g. "16GiB"), refusing a body that
    is no size (naming the presets and profiles it could have been) and a device of 0 B."""
    try:
        memory = parse_bytes(body)
    except DeviceSpecError:
        raise DeviceSpecError(
            f"cannot read device group {group!r}: {body!r} is neither a size "
            f"(e.g. '16GiB') nor a preset ({', '.join(sorted(HARDWARE))}) nor a measured profile "
            "(`partition-explorer calibrate --name NAME`, then NAME or its .json file)"
        ) from None
    if memory == 0:
        raise DeviceSpecError(
            f"device memory must be more than 0 B in {spec!r} (group {group!r} gives 0 B); a device "
            "with no memory holds nothing: write its memory, e.g. '4x16GiB'"
        )
    return memory


def _gpu_presets() -> list[str]:
    return [name for name, card in HARDWARE.items() if card.accelerator]


def _engine_suffix(body: str, group: str) -> tuple[str, str]:
    """``"h100-80gb@graphs"`` -> ("h100-80gb", "graphs"); no suffix -> (body, "")."""
    if "@" not in body:
        return body, ""
    from partitioner.kernels import ENGINES

    name, _, engine = body.rpartition("@")
    if engine not in ENGINES:
        raise DeviceSpecError(
            f"device group {group!r}: unknown engine {engine!r}; write NAME@ENGINE with ENGINE one "
            f"of {', '.join(ENGINES)} (eager, the default, is what a plain PyTorch model runs)"
        )
    return name.strip(), engine


def devices_from_dicts(items: Iterable[Mapping[str, Any]]) -> list[Device]:
    """Build devices from dicts, filling ``name`` and ``logical_id`` by position when missing."""
    devices: list[Device] = []
    for i, item in enumerate(items):
        if i >= MAX_DEVICES:
            raise DeviceSpecError(f"at most {MAX_DEVICES} devices can be planned for; describe fewer")
        if not isinstance(item, Mapping):
            raise DeviceSpecError(f"device #{i} must be an object, got {type(item).__name__}")
        values = dict(item)
        preset = values.pop("preset", None)
        if preset is not None:
            if str(preset).lower() not in HARDWARE:
                raise DeviceSpecError(f"unknown preset {preset!r}; valid presets are {sorted(HARDWARE)}")
            values = {**preset_fields(str(preset).lower()), "kind": str(preset).lower(), **values}
            if preset_profile(str(preset).lower()) is not None:
                values.setdefault("profile", str(preset).lower())
        values.setdefault("logical_id", i)
        values.setdefault("name", f"dev_{values['logical_id']}")
        device = Device.from_dict(values)
        if device.memory_bytes == 0:
            raise DeviceSpecError(
                f"device #{i} ({device.name!r}): memory_bytes must be more than 0 (got 0); a device with no "
                'memory holds nothing: give its memory, e.g. "memory_bytes": "16GiB"'
            )
        devices.append(device)
    return devices


def fewest_devices(need_bytes: int, devices: Iterable[Device]) -> int | None:
    """A lower bound on the devices a model of ``need_bytes`` needs: the fewest of ``devices``,
    largest first, whose memory adds up to it (no plan stores less than the model once); None when
    all of them together hold less. O(n log n)."""
    held = 0
    for count, device in enumerate(sorted(devices, key=lambda d: -d.memory_bytes), start=1):
        held += device.memory_bytes
        if held >= need_bytes:
            return count
    return None
