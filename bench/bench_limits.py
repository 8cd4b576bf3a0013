"""How much memory the largest models the app accepts cost, and how a rerun scales with devices.

Prints (1) the process's resident memory after tracing each sample model at its default size and
at the largest width the knob bound allows (sample_models._registry.MAX_PARAMETER_BYTES, found by
bisection on the meta device, which costs no memory), and (2) the app's rerun time (AppTest)
with 4 devices and with the most the sidebar accepts, as a ratio measured in the same run.

    .venv/bin/python bench/bench_limits.py
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from sample_models import _registry as registry

WIDTH = {
    "mlp": "hidden",
    "cnn": "base_channels",
    "transformer": "n_embd",
    "dlrm": "rows_per_table",
    "unet": "base_channels",
    "moe": "expert_hidden",
    "gpt2_small": "n_layer",
}


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def weight_bytes(name: str, **overrides: int) -> int:
    with torch.device("meta"):
        module, _ = registry.spec(name).builder(**overrides)
    return sum(p.numel() * p.element_size() for p in module.parameters())


def largest(name: str) -> int:
    """The largest multiple of the default width knob whose weights stay within the bound
    (multiples keep the model's own divisibility rules, e.g. heads dividing the width)."""
    field = WIDTH[name]
    base = getattr(registry.config_class(name)(), field)

    def fits(k: int) -> bool:
        try:
            return weight_bytes(name, **{field: base * k}) <= registry.MAX_PARAMETER_BYTES
        except ValueError:
            return False

    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return base * low


def main() -> None:
    print(f"{'model':<12} {'knob':<16} {'value':>8} {'weights MiB':>12} {'trace s':>8} {'peak RSS MiB':>13}")
    for name in sample_models.names():
        for value in ("default", "largest"):
            field = WIDTH[name]
            knob = getattr(registry.config_class(name)(), field) if value == "default" else largest(name)
            start = time.perf_counter()
            module, inputs, _ = sample_models.load(name, {field: knob})
            partitioner.trace(module, inputs, name=name)
            took = time.perf_counter() - start
            weights = sum(p.numel() * p.element_size() for p in module.parameters()) / 2**20
            print(f"{name:<12} {field:<16} {knob:>8} {weights:>12.1f} {took:>8.2f} {rss_mib():>13.0f}")
            del module, inputs
    from streamlit.testing.v1 import AppTest

    app = str(ROOT / "explorer" / "app.py")
    at = AppTest.from_file(app, default_timeout=600).run()
    times = {}
    for count in (4, 1024):
        at.number_input(key="dev_count").set_value(count).run()
        at.selectbox(key="mode").set_value("kl_based" if count == 4 else "size_based").run()
        start = time.perf_counter()
        at.number_input(key="transfer_gbps").set_value(10.0 + count % 7).run()  # one rerun, a new plan
        times[count] = time.perf_counter() - start
        assert not at.exception, at.exception
    print(
        f"\napp rerun after a change: 4 devices {times[4]:.2f} s, 1024 devices {times[1024]:.2f} s "
        f"({times[1024] / times[4]:.1f}x)"
    )


if __name__ == "__main__":
    main()
