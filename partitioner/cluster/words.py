"""Layout strings: ``"dp2 tp2 pp2 1f1b mb2 zero1"`` read into a :class:`~partitioner.cluster.layouts.Layout`
(ASCII digits, each setting once), the words the CLI's --open, --export and --run and the page take.
Torch-free."""

from __future__ import annotations

import re
from typing import Any

from partitioner.cluster.layout_types import RECOMPUTE, Layout
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import SCHEDULES

__all__ = ["parse_layout", "SCHEDULE_NAMES", "LAYOUT_WORDS"]

SCHEDULE_NAMES = tuple(SCHEDULES)
MAX_LAYOUT_CHARS = 500  # a layout is a few words: longer is not one
_TOKEN = re.compile(r"^(dp|tp|pp|ep|cp|mb|zero|shard|v)=?([0-9]+)$", re.ASCII)
_FLAGS = {"sp": ("sp", True), "no-sp": ("sp", False), "fp32-grads": ("grad_fp32", True), "offload": ("offload", True)}
LAYOUT_WORDS = (
    "dp2 tp2 pp2 cp2 ep2 mb4 zero3 shard8 (HSDP) 1f1b (or gpipe, interleaved_1f1b with v4, "
    "zero_bubble) recompute-selective (or -full, -none, -layers-4, -min-cut-0.5) no-sp fp32-grads offload"
)


def parse_layout(text: str, batch: int | None = None) -> Layout:
    """A layout from a short string: ``"dp2 tp2"``, ``"dp2 tp2 zero3 mb2"``, ``"dp=4,tp=1"``,
    ``"pp2 1f1b"``, ``"pp4 interleaved_1f1b v4"``, ``"dp8 ep4"``, ``"tp8 cp2 no-sp"``,
    ``"recompute-selective"``, ``"zero3 fp32-grads"``. ASCII digits only; each word once. Without
    ``mb`` and with ``batch`` (the example's rows), a replica's whole share is one microbatch;
    pipeline stages without a schedule run GPipe. The :class:`Layout` checks its own values;
    :func:`partitioner.cluster.layouts.check_layout` checks it against a model. A word that cannot
    act on the layout it is in (``v4`` without a schedule that chooses its chunks, ``sp`` at tp1) is
    refused with the reason."""
    if len(text) > MAX_LAYOUT_CHARS:
        raise PartitionError(
            f"a layout is a few words (got {len(text):,} characters, at most {MAX_LAYOUT_CHARS}); "
            'write e.g. "dp2 tp2 zero3"'
        )
    shown = text if len(text) <= 60 else text[:57] + "..."
    values = _settings(text, shown)
    _check_ranges(values, shown)
    if values.get("pp", 1) > 1 and "schedule" not in values:
        values["schedule"] = "gpipe"
    _check_words_act(values, shown)
    if "microbatch_size" not in values and batch is not None:
        values["microbatch_size"] = max(1, batch // values.get("dp", 1))
    return Layout(**values)


def _settings(text: str, shown: str) -> dict[str, Any]:
    """Each word of ``text`` as a :class:`Layout` field and its value, each field once."""
    values: dict[str, Any] = {}
    for token in filter(None, re.split(r"[\s,]+", text.strip().lower())):
        key, value = _setting(token, shown)
        if key in values:
            raise PartitionError(
                f"a layout names each setting once ({key} twice in {shown!r}, at {token[:40]!r}); write it once"
            )
        values[key] = value
    return values


def _setting(token: str, shown: str) -> tuple[str, Any]:
    """One word as (a :class:`Layout` field, its value): a degree with its digits, a schedule, a
    flag or a recomputation."""
    m = _TOKEN.match(token)
    if m:
        key = {"mb": "microbatch_size", "v": "virtual"}.get(m.group(1), m.group(1))
        if len(m.group(2)) > 8:
            raise PartitionError(f"{key} {m.group(2)} in {shown!r} is beyond any cluster; write at most 8 digits")
        return key, int(m.group(2))
    if token in SCHEDULE_NAMES:
        return "schedule", token
    if token in _FLAGS:
        return _FLAGS[token]
    if token.startswith("recompute-") and (
        token[len("recompute-") :] in RECOMPUTE or token.startswith(("recompute-min-cut-", "recompute-layers-"))
    ):
        return "recompute", token[len("recompute-") :]
    raise PartitionError(
        f"a layout is words like {LAYOUT_WORDS} (got {token[:40]!r} in {shown!r}); "
        f'write e.g. "dp2 tp2 zero3" with ASCII digits'
    )


def _check_ranges(values: dict[str, Any], shown: str) -> None:
    """Degrees at least 1, ZeRO 0-3."""
    for key in ("dp", "tp", "pp", "ep", "cp", "microbatch_size", "virtual"):
        if values.get(key, 1) < 1:
            raise PartitionError(f"{key} must be at least 1 (got {values[key]} in {shown!r})")
    if values.get("zero", 0) not in (0, 1, 2, 3):
        raise PartitionError(f"zero must be 0, 1, 2 or 3 (got {values['zero']} in {shown!r})")


def _check_words_act(values: dict[str, Any], shown: str) -> None:
    """Refuse a word that cannot act on the layout it is in: chunks a rank (``v``) without a
    schedule that chooses them, sequence parallelism without tensor parallelism."""
    chooses = [name for name, sch in SCHEDULES.items() if sch.choose_virtual]
    if "virtual" in values and values.get("schedule") not in chooses:
        raise PartitionError(
            f"v{values['virtual']} sets the chunks a pipeline rank holds, which only {' and '.join(chooses)} "
            f"chooses (the schedule in {shown!r}: {values.get('schedule', 'none')}); add pp2 or more and "
            f"{chooses[0]}, or drop v{values['virtual']}"
        )
    if values.get("sp") is True and values.get("tp", 1) == 1:
        raise PartitionError(
            f"'sp' (sequence parallelism) splits a tensor-parallel group's activations and tp1 has none "
            f"(in {shown!r}); add tp2 or more, or drop 'sp'"
        )
