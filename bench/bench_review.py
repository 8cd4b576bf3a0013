"""The review of the configs torchtitan ships, against the throughput torchtitan publishes for
them (docs/performance.md), with the review's band: the ratio is the review's point over the
published figure, and "in band" whether the published figure lies in the band.

    PYTHONPATH=. .venv/bin/python bench/bench_review.py

Rows (each config restated in tests/review/fixtures, its source named there):
- Llama 3 8B, FSDP over 64 A100 80GB, local batch 1, selective op checkpointing: 2,973 tokens/s a GPU.
- Llama 3.1 405B, FSDP + TP 8 over 128 H100s, local batch 2, full checkpointing, Float8 and async
  TP under torch.compile: 185 tokens/s a GPU. torchtitan ran 94 GB H100s at a 500 W power limit;
  the review prices the 80 GB, 700 W card (h100-80gb), so it is expected to run faster.
"""

from __future__ import annotations

import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.inputs import load_model  # noqa: E402
from partitioner import cluster, review  # noqa: E402

FIXTURES = ROOT / "tests" / "review" / "fixtures"
RUNS = [
    ("torchtitan_llama3_8b_64xa100.toml", "a100-80gb", 2973.0, "8B, 64 A100, FSDP, selective op"),
    ("torchtitan_llama3_405b_128xh100.toml", "h100-80gb", 185.0, "405B, 128 H100, FSDP+TP8, float8"),
]


def main() -> int:
    print(f"{'run':38} {'published':>10} {'review (band)':>22} {'ratio':>6} {'in band':>8} {'fits':>5} {'s':>5}")
    for name, accelerator, published, label in RUNS:
        began = time.perf_counter()
        job = review.read_job((FIXTURES / name).read_text(), name)
        model = load_model(job.model or "", [*job.model_sets, "dtype=bf16"], devices="")
        target = cluster.cluster(accelerator + (f"@{job.engine}" if job.engine else ""))
        rv = review.review_job(cluster.profile(model.graph, model.label), job, target, top=1)
        low, high = (t / rv.result.devices for t in rv.result.tokens_per_s_band)
        point = rv.result.tokens_per_s / rv.result.devices
        inside = "yes" if low <= published <= high else "no"
        print(
            f"{label:38} {published:>10,.0f} {point:>8,.0f} ({low:,.0f}-{high:,.0f}) {point / published:>6.2f} "
            f"{inside:>8} {'yes' if rv.fits else 'NO':>5} {time.perf_counter() - began:>5.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
