"""Pure table and text builders for the Plan a cluster page: the best layouts (numbers kept as
numbers, each band beside them as text), the collectives of an opened layout, and a serving
answer's words for what a token is made of. No Streamlit here."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from partitioner.cluster import Collective, LayoutResult, bands
from partitioner.units import GiB, format_bytes, format_seconds

__all__ = ["layouts_table", "collectives_table", "limited_by", "token_breakdown", "TOKEN_PART_WORDS"]


def layouts_table(results: Sequence[LayoutResult], train_tokens: float | None = None) -> pd.DataFrame:
    """One row a layout: numbers stay numbers (seconds, GiB, fractions, dollars), each time-derived
    one with its band's ends (``_low``, ``_high``) and the band as text to show (``step``,
    ``mfu_text``, ``usd_text``); with ``train_tokens``, the days and dollars such a training run
    takes (``train_text``, ``train_usd_text``)."""
    rows = []
    for r in results:
        usd = bands.cost_band(r, r.cost_per_million_tokens)
        mfu_low, mfu_high = r.mfu_band
        row = {
            "devices": r.devices,
            "layout": r.layout.label(),
            "dp": r.layout.dp,
            "tp": r.layout.tp,
            "pp": r.layout.pp,
            "ep": r.layout.ep,
            "zero": r.layout.zero,
            "recompute": r.layout.recompute,
            "step_s": r.step_s,
            "step_low_s": r.step_low_s,
            "step_high_s": r.step_high_s,
            "step": bands.seconds_band(r.step_low_s, r.step_high_s),
            "mfu": r.mfu,
            "mfu_low": mfu_low,
            "mfu_high": mfu_high,
            "mfu_text": bands.mfu_band(r),
            "memory_gib": r.memory_bytes / GiB,
            "limit": r.limit,
            "usd_per_million_tokens": r.cost_per_million_tokens,
            "usd_text": bands.dollars_band(*usd),
        }
        if train_tokens:
            seconds = bands.run_days(r, train_tokens)
            dollars = bands.cost_band(r, r.cost_per_million_tokens * train_tokens / 1e6)
            row["train_days"] = train_tokens / r.tokens_per_s / 86400 if r.tokens_per_s else float("inf")
            row["train_days_low"], row["train_days_high"] = (s / 86400 for s in seconds)
            row["train_text"] = bands.duration_band(*seconds)
            row["train_usd"] = r.cost_per_million_tokens * train_tokens / 1e6
            row["train_usd_text"] = bands.dollars_band(*dollars)
        rows.append(row)
    return pd.DataFrame(rows)


def collectives_table(rows: Sequence[Collective]) -> pd.DataFrame:
    """One row a kind of communication (:func:`partitioner.cluster.collectives`), in words: the
    group, its ranks and link, how many a step (or a token), each one's size and time, their
    total, and what hides them."""
    return pd.DataFrame(
        [
            {
                "collective": r.name,
                "group": f"{r.group}: {r.ranks} ranks, {r.link}",
                "when": r.phase,
                "count": f"{r.count:,.0f}" if float(r.count).is_integer() else f"{r.count:,.2f}",
                "size each": format_bytes(r.bytes_each),
                "time each": format_seconds(r.seconds_each),
                "total": format_seconds(r.seconds),
                "hidden behind": r.overlap or "nothing",
            }
            for r in rows
        ]
    )


# What a serving answer's largest part of a token is (partitioner.cluster.serving.TOKEN_PARTS), in words.
TOKEN_PART_WORDS = {
    "launch": "the host's kernel launches",
    "weights": "reading the weights",
    "KV cache": "reading the KV cache",
    "arithmetic": "arithmetic",
    "communication": "communication",
}


def limited_by(r: LayoutResult, serving: bool) -> str:
    """ "limited by memory" (does not fit), or a serving token's largest part ("most of a token:
    reading the weights"): the one the breakdown beside it shows largest."""
    if serving and r.limit in TOKEN_PART_WORDS:
        return f"most of a token: {TOKEN_PART_WORDS[r.limit]}"
    return f"limited by {r.limit}"


def token_breakdown(r: LayoutResult) -> str:
    """ "Each token 56 ms: reading the weights 40 ms, ... (they add up to it); at full speed reading
    the weights would take 13 ms ...": the parts the time is made of, then the floors under them."""
    x = r.extra
    parts = [(TOKEN_PART_WORDS[k], r.parts_s.get(f"{k} per token", 0.0)) for k in TOKEN_PART_WORDS]
    shown = ", ".join(f"{words} {format_seconds(s)}" for words, s in sorted(parts, key=lambda p: -p[1]) if s > 0)
    return (
        f"Each token {format_seconds(x['seconds_per_token'])}: {shown}. At the card's full bandwidth and "
        f"peak, reading the weights would take {format_seconds(x['weights_read_s_per_token'])}, the KV cache "
        f"{format_seconds(x['kv_read_s_per_token'])} and the arithmetic "
        f"{format_seconds(x['compute_floor_s_per_token'])}; the first token's arithmetic at peak "
        f"{format_seconds(x['prefill_compute_floor_s'])} of {bands.seconds_band(r.step_low_s, r.step_high_s)}."
    )
