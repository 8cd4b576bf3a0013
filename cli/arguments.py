"""The command line's argparse side: the types of its numeric flags (rates, bounded numbers, time
limits) and the arguments every model-reading or cost-reading command shares. The element types
``--dtype`` offers are the dtype table's (:data:`partitioner.units.DTYPES`)."""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from partitioner import PartitionError
from partitioner.units import DTYPES, parse_rate

__all__ = [
    "rate",
    "bounded",
    "time_limit",
    "positive_float",
    "MAX_SECONDS",
    "add_model_arguments",
    "add_cost_arguments",
]


def rate(text: str) -> float:
    """argparse type of --transfer-rate: bytes per second, a number or a size like 25GB."""
    try:
        return parse_rate(text)
    except PartitionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_SECONDS = 86_400.0  # the longest time limit taken (a day); longer ones overflow the clocks waiting on them


def bounded(kind: type, low: float, high: float) -> Callable[[str], Any]:
    """argparse type: a ``kind`` (int or float) from ``low`` to ``high``, finite; the message gives
    the value and the range (argparse puts the flag before it, so it names the field too)."""
    what = "a whole number" if kind is int else "a number"
    shown = f"{low:,} to {high:,}" if kind is int else f"{low:g} to {high:g}"

    def parse(text: str) -> Any:
        try:
            value = int(text) if kind is int else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} from {shown}, got {text!r}") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be from {shown} (got {text})")
        return value

    parse.__name__ = what
    return parse


def time_limit(text: str) -> float:
    """argparse type of a time limit in seconds: above 0, at most :data:`MAX_SECONDS`."""
    value = positive_float(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"a time limit must be above 0 and at most {MAX_SECONDS:,.0f} seconds (a day; got {text})"
        )
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


class _SetAction(argparse.Action):
    """``--dtype bf16`` is ``--set dtype=bf16`` (hf: models); ``--batch-size`` and ``--seq-len``
    likewise set ``batch_size`` and ``seq_len``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        key = self.dest.replace("-", "_")
        namespace.set = [*(getattr(namespace, "set", None) or []), f"{key}={values}"]


def add_model_arguments(p: argparse.ArgumentParser, optional: bool = False, tokens: bool = True) -> None:
    p.add_argument(
        "model",
        metavar="MODEL",
        nargs="?" if optional else None,
        help="a sample model name, hf:<model type or preset> (hf:llama, hf:llama-3-8b), or "
        "package.module:factory" + (" (needed for pipeline-split-spec)" if optional else ""),
    )
    p.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a model setting, repeatable: --set n_layer=4 --set bias=false (hf: models: "
        "fields of the transformers config)",
    )
    p.add_argument(
        "--dtype",
        action=_SetAction,
        metavar="DTYPE",
        choices=[d.short for d in DTYPES],
        help="hf: models: the weights' type ("
        + ", ".join(d.short for d in DTYPES if d.loads_as)
        + ": weights only; activations bf16)",
    )
    if tokens:
        p.add_argument(
            "--batch-size",
            dest="batch_size",
            action=_SetAction,
            metavar="N",
            help="hf: models: sequences in the example input (default 1)",
        )
        p.add_argument(
            "--seq-len",
            dest="seq_len",
            action=_SetAction,
            metavar="N",
            help="hf: models: tokens per sequence in the example input (default 32)",
        )


def add_cost_arguments(p: argparse.ArgumentParser, partitioning: bool = True) -> None:
    p.add_argument(
        "--transfer-rate",
        metavar="BYTES_PER_S",
        type=rate,
        help="device-to-device transfer rate, e.g. 25e9 or 25GB "
        + (
            "(default: the slowest device link given, else transfers are free)"
            if partitioning
            else "(default: the rate recorded in the plan)"
        ),
    )
    p.add_argument(
        "--node-latency",
        metavar="FILE",
        help='measured node latencies: JSON {"node": [mem_s, compute_s]} or CSV '
        "name,mem_s,compute_s (other nodes keep the roofline estimate)",
    )
    p.add_argument(
        "--cost-model",
        choices=["physical", "torch"] + ([] if partitioning else ["both"]),
        default=None if not partitioning else "physical",
        help="physical (default: a device runs one partition at a time, shared tensors "
        "stored once) or torch (the numbers torch.fx's partitioner_utils computes)"
        + ("" if partitioning else "; both: check under each, side by side (default: the plan's own)"),
    )
    if partitioning:
        p.add_argument("--saturate-host", action="store_true", help="replicate the plan onto idle devices")
        p.add_argument(
            "--force-partition", action="store_true", help="partition even when the whole model fits one device"
        )
        p.add_argument(
            "--search-budget", type=int, metavar="N", help="cap the cost-model evaluations of cost_aware and kl_based"
        )
        p.add_argument(
            "--time-limit",
            type=time_limit,
            metavar="SECONDS",
            help="the optimal mode's solver time limit (default 10; at most a day)",
        )
