"""The cluster planner against the published record, row by row: what each paper printed beside
what the planner computes for the same model and layout, and their ratio.

Sources (their numbers are written below, never the planner's):
- Rajbhandari et al. 2020, "ZeRO", Figure 1 / sec. 3: 7.5B parameters on 64 devices, mixed-precision
  Adam: 120, 31.4, 16.6, 1.88 GB a device for stages 0-3.
- DeepSpeed's own estimators, called here: ``estimate_zero2_model_states_mem_needs`` and
  ``estimate_zero3_model_states_mem_needs`` (no offload) on a traced Llama.
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 4
  and Table 2: a GPT layer keeps 34 s b h / t bytes with sequence parallelism, s b h (10 + 24 / t)
  without, 2 s b h with full recomputation; Table 3's models (22B, 175B, 530B, 1T) at t 8, s 2048.
- A Llama block: 2 (6h + 2k + 4f) s b bytes (the same accounting for RMSNorm, GQA and SwiGLU).
- Megatron-LM's ``theoretical_memory_usage``: interleaving v chunks deep multiplies the first
  rank's pp microbatches in flight by 1 + (pp - 1) / (pp v) (``interleaved_schedule_memory_penalty``).
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", Table 1: ten GPT models on A100-80GB (s 2048, vocabulary 51200), their t, p, GPUs,
  batch and achieved TFLOP/s a GPU.
- Llama Team 2024, "The Llama 3 Herd of Models", Table 4: Llama 3 405B on H100s, TP/CP/PP/DP,
  sequence, batch and BF16 MFU.

- The search's own picks (``--picks``): the fastest and the cheapest layout the search returns at the
  published run's GPU count beside that run's MFU or tokens a second a GPU, with the band: Llama 3's
  Table 4, torchtitan's ``docs/performance.md`` (Llama 3.1 8B, 8 H100s, FSDP, local batch 2,
  selective AC: 5,762 tokens a second a GPU eager; their H100s ran at 500 W with 96 GB of HBM2e,
  not the preset's 700 W SXM card), and the Llama 3 model card's H100-hours (15T tokens: 1.3M for
  8B, 6.4M for 70B; they include restarts and evaluation, so they bound the rate from below).

Memory rows are exact accounting; time rows (TFLOP/s, MFU) depend on the planner's compute model
(the measured kernel curves of the GPU presets): the ratio column says where it stands. Time rows
trace each model at full depth on meta weights (``--full-depth``; minutes for the largest); without
it the time rows are skipped.

    .venv/bin/python bench/bench_cluster_record.py
    .venv/bin/python bench/bench_cluster_record.py --full-depth --max-layers 48
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import partitioner  # noqa: E402
import sample_models  # noqa: E402
from partitioner import cluster  # noqa: E402
from partitioner.pipeline.steps import step_simulator  # noqa: E402

GiB, MiB = 2**30, 2**20

# Narayanan et al. 2021, Table 1: (params B, heads, hidden, layers, t, p, GPUs, batch, TFLOP/s a GPU).
NARAYANAN_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# Korthikanti et al. 2022, Table 3: (name, heads, hidden, layers).
KORTHIKANTI_TABLE3 = [
    ("22B", 64, 6144, 48),
    ("175B", 96, 12288, 96),
    ("530B", 128, 20480, 105),
    ("1T", 160, 25600, 128),
]
# Llama 3, Table 4: (GPUs, TP, CP, PP, DP, sequence, sequences a DP rank, BF16 MFU).
LLAMA3_TABLE4 = [
    (8192, 8, 1, 16, 64, 8192, 32, 0.43),
    (16384, 8, 1, 16, 128, 8192, 16, 0.41),
    (16384, 8, 16, 16, 8, 131072, 16, 0.38),
]
A100_80 = cluster.cluster("a100-80gb") if "a100-80gb" in cluster.ACCELERATORS else None


def _gpt(hidden: int, heads: int, layers: int = 2) -> cluster.ModelProfile:
    module, inputs, kwargs = sample_models.load(
        "hf:gpt2",
        overrides={"n_layer": layers, "n_embd": hidden, "n_head": heads, "vocab_size": 51200, "dtype": "bf16"},
    )
    return cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs))


def _llama(layers: int = 2, **sizes: int) -> tuple[cluster.ModelProfile, object]:
    module, inputs, kwargs = sample_models.load(
        "hf:llama", overrides={"num_hidden_layers": layers, **sizes, "dtype": "bf16"}
    )
    return cluster.profile(partitioner.trace(module, inputs, example_kwargs=kwargs)), module


def _row(*cells: object) -> str:
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, (56, 12, 12, 10)))


def zero_rows() -> list[str]:
    p = cluster.ModelProfile(
        name="7.5B",
        tokens0=1,
        seq0=1,
        weight_bytes=15 * 10**9,
        param_count=75 * 10**8,
        element_bytes=2,
        layers=1,
        hidden_bytes_per_token=0.0,
        kv_bytes_per_token=0.0,
        act_bytes_per_token=0.0,
        flops_per_token=0.0,
        attention_flops_per_token=0.0,
    )
    big = cluster.Cluster(cluster.Accelerator.custom("big", 2**50, 1e15, 1e12, 1.0), devices_per_node=8)
    out = []
    for stage, published in enumerate((120.0, 31.4, 16.6, 1.88)):
        r = cluster.evaluate(
            p, cluster.Workload(global_batch=64, seq_len=1), big, cluster.Layout(dp=64, zero=stage), step_simulator()
        )
        ours = sum(r.memory[k] for k in ("weights", "gradients", "optimizer")) / 1e9
        out.append(_row(f"ZeRO Fig. 1, stage {stage} (GB)", published, f"{ours:.3g}", f"{ours / published:.3f}"))
    return out


def deepspeed_rows() -> list[str]:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    p, module = _llama(
        hidden_size=512,
        intermediate_size=1376,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=32000,
        head_dim=64,
    )
    total = sum(t.numel() for t in module.parameters())
    largest = max(sum(t.numel() for t in m.parameters(recurse=False)) for m in module.modules())
    out = []
    for n in (8, 64, 512):
        for zero, ds in (
            (2, estimate_zero2_model_states_mem_needs(total, 8, n // 8, cpu_offload=False)[1]),
            (3, estimate_zero3_model_states_mem_needs(total, largest, 8, n // 8, cpu_offload=False)[1]),
        ):
            r = cluster.evaluate(
                p,
                cluster.Workload(global_batch=n, seq_len=1),
                A100_80,
                cluster.Layout(dp=n, zero=zero, grad_fp32=True),
                step_simulator(),
            )
            ours = sum(v for k, v in r.memory.items() if k in ("weights", "gradients", "optimizer", "gathered layer"))
            out.append(
                _row(
                    f"DeepSpeed ZeRO-{zero} estimator, {n} GPUs (MB)",
                    f"{ds / 1e6:.1f}",
                    f"{ours / 1e6:.1f}",
                    f"{ours / ds:.3f}",
                )
            )
    return out


def activation_rows() -> list[str]:
    out = []
    s = 2048
    for name, heads, hidden, _ in KORTHIKANTI_TABLE3:
        p = _gpt(hidden, heads)
        for label, tp, sp, published in (
            ("t8 SP", 8, True, 34 * s * hidden / 8),
            ("t8 no SP", 8, False, s * hidden * (10 + 24 / 8)),
            ("full recompute t1", 1, False, 2 * s * hidden),
        ):
            ours = (
                p.saved.input_bytes_per_token(2, tp, sp)
                if "full" in label
                else p.saved.layer_bytes_per_token(2, s, tp, sp)
            ) * s
            out.append(
                _row(
                    f"Korthikanti {name} a layer, {label} (MiB)",
                    f"{published / MiB:.1f}",
                    f"{ours / MiB:.1f}",
                    f"{ours / published:.3f}",
                )
            )
    p, _ = _llama(
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=1000,
        head_dim=128,
    )
    published = 2 * (6 * 4096 + 2 * 1024 + 4 * 14336) * 4096
    ours = p.saved.layer_bytes_per_token(2, 4096) * 4096
    out.append(
        _row(
            "Llama-3-8B a layer at s 4096 (MiB)",
            f"{published / MiB:.0f}",
            f"{ours / MiB:.0f}",
            f"{ours / published:.3f}",
        )
    )
    out += interleaving_rows(p)
    return out


def interleaving_rows(p: cluster.ModelProfile) -> list[str]:
    """Megatron-LM's ``interleaved_schedule_memory_penalty`` (after Korthikanti et al. 2022): the
    first rank's activations under interleaved 1F1B over 1F1B's, 1 + (pp - 1) / (pp v)."""
    out = []
    c = cluster.cluster("h100-80gb")
    for pp, v in ((4, 2), (8, 2), (8, 4), (16, 4)):
        q = dataclasses.replace(p, layers=pp * v * 2, _cache={})
        w = cluster.Workload(global_batch=4 * pp, seq_len=4096)

        def activations(schedule: str, virtual: int = 2) -> float:
            lay = cluster.Layout(tp=8, pp=pp, schedule=schedule, virtual=virtual)
            return cluster.evaluate(q, w, c, lay, step_simulator()).memory["activations"]

        ours = activations("interleaved_1f1b", v) / activations("1f1b")
        published = 1 + (pp - 1) / (pp * v)
        out.append(
            _row(
                f"Megatron interleaving penalty pp{pp} v{v} (x)",
                f"{published:.3f}",
                f"{ours:.3f}",
                f"{ours / published:.3f}",
            )
        )
    return out


def narayanan_rows(full_depth: bool, max_layers: int) -> list[str]:
    out = []
    for params, heads, hidden, layers, tp, pp, gpus, batch, tflops in NARAYANAN_TABLE1:
        deep = full_depth and layers <= max_layers
        p = _gpt(hidden, heads, layers if deep else 2)
        if not deep:
            p = dataclasses.replace(p, layers=layers, param_count=int(params * 1e9), _cache={})
        dp = gpus // (tp * pp)
        lay = cluster.Layout(dp=dp, tp=tp, pp=pp, schedule="1f1b" if pp > 1 else "none", recompute="full", sp=False)
        r = cluster.evaluate(p, cluster.Workload(global_batch=batch, seq_len=2048), A100_80, lay, step_simulator())
        out.append(
            _row(
                f"Narayanan {params}B {lay.label()} fits",
                "yes",
                "yes" if r.fits else "NO",
                f"{r.memory_bytes / GiB:.1f} GiB",
            )
        )
        if deep:  # Megatron's eq. 3 FLOPs with recomputation (4 passes) over the step, a GPU
            flops = 96 * batch * 2048 * layers * hidden**2 * (1 + 2048 / (6 * hidden) + 51200 / (16 * layers * hidden))
            ours = flops / r.step_s / gpus / 1e12
            out.append(_row(f"Narayanan {params}B TFLOP/s a GPU", tflops, f"{ours:.0f}", f"{ours / tflops:.2f}"))
    return out


def llama3_rows(full_depth: bool) -> list[str]:
    sizes = dict(
        hidden_size=16384,
        intermediate_size=53248,
        num_attention_heads=128,
        num_key_value_heads=8,
        vocab_size=128256,
        head_dim=128,
    )
    p, _ = _llama(126 if full_depth else 2, **sizes)
    if not full_depth:
        p = dataclasses.replace(p, layers=128, param_count=405_000_000_000, _cache={})
    else:  # 126 layers; the first and last stages hold one fewer (Meta's balance): 128 slots
        p = dataclasses.replace(p, layers=128, _cache={})
    c = cluster.cluster("h100-80gb")
    out = []
    for gpus, tp, cp, pp, dp, seq, per_rank, mfu in LLAMA3_TABLE4:
        lay = cluster.Layout(dp=dp, tp=tp, pp=pp, cp=cp, schedule="interleaved_1f1b", zero=1, recompute="full")
        r = cluster.evaluate(p, cluster.Workload(global_batch=dp * per_rank, seq_len=seq), c, lay, step_simulator())
        out.append(
            _row(
                f"Llama 3 {gpus} GPUs cp{cp} fits 80 GB",
                "yes",
                "yes" if r.fits else "NO",
                f"{r.memory_bytes / GiB:.1f} GiB",
            )
        )
        if full_depth:
            out.append(_row(f"Llama 3 {gpus} GPUs cp{cp} MFU", f"{mfu:.0%}", f"{r.mfu:.1%}", f"{r.mfu / mfu:.2f}"))
    return out


LLAMA3_405B_SETS = [
    "hidden_size=16384",
    "intermediate_size=53248",
    "num_attention_heads=128",
    "num_key_value_heads=8",
    "vocab_size=128256",
    "head_dim=128",
    "num_hidden_layers=126",
]
# (model, sets, GPUs, sequence, global batch, published, "mfu" or "tps", source, solid, published degrees)
PUBLISHED_RUNS = [
    (
        "llama-3-405b",
        LLAMA3_405B_SETS,
        8192,
        8192,
        2048,
        0.43,
        "mfu",
        "Llama 3 Table 4",
        True,
        "dp64 tp8 pp16 interleaved_1f1b mb1 zero1 recompute-full",
    ),
    (
        "llama-3-405b",
        LLAMA3_405B_SETS,
        16384,
        8192,
        2048,
        0.41,
        "mfu",
        "Llama 3 Table 4",
        True,
        "dp128 tp8 pp16 interleaved_1f1b mb1 zero1 recompute-full",
    ),
    (
        "llama-3-405b",
        LLAMA3_405B_SETS,
        16384,
        131072,
        128,
        0.38,
        "mfu",
        "Llama 3 Table 4 (CP16)",
        False,
        "dp8 tp8 pp16 cp16 interleaved_1f1b mb1 zero1 recompute-full",
    ),
    (
        "llama-3-8b",
        [],
        8,
        8192,
        16,
        5762.0,
        "tps",
        "torchtitan performance.md (500 W H100 96 GB)",
        False,
        "dp8 mb2 zero3 recompute-selective",
    ),
    ("llama-3-8b", [], 64, 8192, 512, 15e12 / (1.3e6 * 3600), "tps", "Llama 3 model card (with downtime)", False, ""),
    ("llama-3-70b", [], 512, 8192, 512, 15e12 / (6.4e6 * 3600), "tps", "Llama 3 model card (with downtime)", False, ""),
]


def picks_rows(runs: list | None = None) -> tuple[list[str], list[tuple[str, float, bool]]]:
    """The search's fastest and cheapest layouts beside each published run (see the module doc),
    and the planner's best layout of the published degrees. Full-depth traces (the repeated block
    traced once)."""
    from cli.inputs import load_model
    from partitioner.cluster.words import parse_layout

    out: list[str] = []
    ratios: list[tuple[str, float, bool]] = []
    c = cluster.cluster("h100-80gb")
    for name, sets, gpus, seq, batch, published, kind, source, solid, opened in runs or PUBLISHED_RUNS:
        spec = "hf:llama" if name == "llama-3-405b" else f"hf:{name}"
        p = cluster.profile(load_model(spec, [*sets, "dtype=bf16"], devices="1x80GiB").graph)
        w = cluster.Workload(global_batch=batch, seq_len=seq)
        found = cluster.search(p, w, c, [gpus])
        rows = [("fastest", found.fastest), ("cheapest", found.cheapest)]
        if opened:  # the published degrees; the schedule's depth, recomputation and ZeRO the planner's best
            degrees = parse_layout(opened)
            same = [
                r
                for r in found.fitting
                if (r.layout.dp, r.layout.tp, r.layout.pp, r.layout.cp)
                == (degrees.dp, degrees.tp, degrees.pp, degrees.cp)
            ]
            rows.append(("published degrees", same[0] if same else None))
        for what, r in rows:
            if r is None:
                out.append(_row(f"{name} {gpus} GPUs s{seq} {what}: nothing fits", published, "-", "-"))
                continue
            ours = r.mfu if kind == "mfu" else r.tokens_per_s / gpus
            low, high = r.mfu_band if kind == "mfu" else (x / gpus for x in r.tokens_per_s_band)
            fmt = (lambda x: f"{x:.1%}") if kind == "mfu" else (lambda x: f"{x:,.0f}")
            label = f"{name} {gpus} GPUs s{seq} {what} {r.layout.label()} [{source}]"
            if kind == "mfu":  # the published MFU does not say how it counts attention: both
                label += f" (causal-counted MFU {r.mfu_causal:.1%}: {r.mfu_causal / published:.2f})"
            out.append(_row(label, fmt(published), f"{fmt(ours)} ({fmt(low)}-{fmt(high)})", f"{ours / published:.2f}"))
            ratios.append((label, ours / published, solid))
    return out, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full-depth", action="store_true", help="trace every layer for the time rows (slow)")
    parser.add_argument("--max-layers", type=int, default=48, help="with --full-depth: skip deeper Table 1 models")
    parser.add_argument("--picks", action="store_true", help="the search's picks beside published runs (traces)")
    args = parser.parse_args()
    began = time.perf_counter()
    print(_row("row (source)", "published", "planner", "ratio"))
    print(_row("-" * 56, "-" * 12, "-" * 12, "-" * 10))
    for rows in (
        zero_rows(),
        deepspeed_rows(),
        activation_rows(),
        narayanan_rows(args.full_depth, args.max_layers),
        llama3_rows(args.full_depth),
        picks_rows()[0] if args.picks else [],
    ):
        for line in rows:
            print(line)
    print(f"\n{time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
