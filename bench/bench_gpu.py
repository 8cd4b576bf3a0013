"""Predicted against measured on a real GPU: forward passes, training steps and decode of real-width
Hugging Face configs (the project's hf: presets, a few layers at full width), 128 to 16k tokens.

Run where a CUDA GPU is at hand (torch with CUDA, transformers installed):

    PYTHONPATH=. python3 bench/bench_gpu.py                # every case (a few minutes)
    PYTHONPATH=. python3 bench/bench_gpu.py --quick        # one size per model
    PYTHONPATH=. python3 bench/bench_gpu.py --preset h200-141gb --engine eager

Measured: the model built from its config on the GPU with random weights (bf16, ``sdpa``), CUDA
events, the median of several runs after warm-up. Forward: ``model(ids)`` without a cache, under
``no_grad``. Training: forward with labels, backward, then mixed precision's step as Megatron-LM and
DeepSpeed run it (the planner's assumption): bf16 gradients copied to fp32 master weights, torch's
default ``AdamW`` step (foreach) on them, the master copied back to the bf16 weights. Decode: one token a sequence against a KV cache of ``seq`` tokens,
``model(next, past_key_values=cache)`` in a loop, per token. Predicted: the forward by Explore's own
number (``partition(graph, 1 x preset, "size_based").latency_s``), the training step and decode by
the cluster planner (``--open "dp1 tp1 pp1 mbB"``), both from the preset's kernel curves under the
named engine. The preset is the GPU's (H100 -> h100-80gb, H200 -> h200-141gb) unless given.
Prints one row a case (predicted, measured, error) and the median and worst absolute error; with
``$OUT`` set, also writes ``$OUT/bench_gpu.json``. ``--dry-run`` runs tiny configs on the CPU to
check the script itself (its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

# (preset, overrides at full width, [(batch, seq)...], kinds)
CASES = [
    ("llama-3-8b", dict(num_hidden_layers=4), [(1, 128), (1, 2048), (2, 4096)], ("forward", "train", "decode")),
    ("gpt2-xl", dict(n_layer=8), [(1, 128), (2, 1024), (16, 1024)], ("forward", "train", "decode")),
    ("bert-large", dict(num_hidden_layers=8), [(1, 128), (4, 512), (32, 512)], ("forward", "train")),
    ("mixtral-8x7b", dict(num_hidden_layers=2), [(1, 128), (1, 2048)], ("forward", "decode")),
]
DRY = [
    (
        "llama",
        dict(
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=2,
            vocab_size=256,
        ),
        [(1, 16)],
        ("forward", "train", "decode"),
    )
]


def _timed(fn: Callable[[], Any], device: str, reps: int = 7, warmup: int = 2) -> float:
    """The median of ``reps`` timed runs after ``warmup`` (CUDA events on a GPU): the calibration's timer."""
    from partitioner.runtime.calibrate_gpu import timer

    return timer(torch, device, warmup)(fn, reps)


def _build(name: str, overrides: dict, device: str) -> tuple[Any, Any, Any]:
    """(model on ``device`` with random weights, its config, the meta model for tracing)."""
    from sample_models._hf import load_hf

    meta, _, _ = load_hf(name, {**overrides, "dtype": "bf16"})
    config = meta.config
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = type(meta)(config).to(torch.bfloat16)
    return model, config, meta


def _measure(model: Any, kind: str, batch: int, seq: int, vocab: int, device: str, decode_tokens: int = 16) -> float:
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    if kind == "forward":
        model.eval()

        def fwd() -> None:
            with torch.no_grad():
                model(ids, use_cache=False) if "use_cache" in model.forward.__code__.co_varnames else model(ids)

        return _timed(fwd, device)
    if kind == "train":  # mixed precision as the planner prices it: bf16 compute, fp32 master and Adam state
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        master = [p.detach().float() for p in params]
        for m in master:
            m.grad = torch.zeros_like(m)
        opt = torch.optim.AdamW(master, lr=1e-5)  # torch's default step on a GPU: foreach
        labels = ids if hasattr(model, "lm_head") else None

        def step() -> None:
            out = model(ids, labels=labels) if labels is not None else model(ids)
            loss = out.loss if labels is not None else out.last_hidden_state.float().square().mean()
            loss.backward()
            # parameters the loss does not reach (BERT's pooler under this loss) have no gradient
            grads = [(m.grad, p.grad) for m, p in zip(master, params) if p.grad is not None]
            torch._foreach_copy_([g for g, _ in grads], [g for _, g in grads])
            opt.step()
            with torch.no_grad():
                torch._foreach_copy_(params, master)
            for p in params:
                p.grad = None

        result = _timed(step, device, reps=5)
        del opt, master
        return result
    model.eval()  # decode: a prompt of seq tokens cached, then one token a sequence at a time
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache = out.past_key_values
        nxt = ids[:, -1:]
        import copy

        def loop() -> None:
            c = copy.deepcopy(cache) if device == "cpu" else cache
            with _decode_attention(device):
                for _ in range(decode_tokens):
                    model(nxt, past_key_values=c, use_cache=True)

        # the cache grows by decode_tokens a loop; measured once after one warm-up loop
        return _timed(loop, device, reps=1, warmup=1) / decode_tokens


def _decode_attention(device: str) -> Any:
    """Decode's attention backends: flash, memory-efficient or math, not cuDNN's. cuDNN's SDPA
    builds a graph for each new cache length, so a growing cache pays a build every token (tens of
    ms): a cost of the eager loop, not of the kernels a server runs with a static cache."""
    import contextlib

    if device != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _decode_prompt(config: Any, seq: int, decode_tokens: int) -> int:
    """The prompt a decode case caches: ``seq``, or less where the model's positions end first (the
    warm-up and the timed loop each add ``decode_tokens``)."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return min(seq, int(limit) - 2 * decode_tokens - 1) if limit else seq


def _predict(
    name: str,
    overrides: dict,
    kind: str,
    batch: int,
    seq: int,
    preset: str,
    engine: str,
    profile_file: str | None,
    decode_tokens: int,
) -> tuple[float, str]:
    import partitioner
    from partitioner import cluster
    from partitioner.cluster.run.compose import parse_layout
    from partitioner.pipeline.steps import step_simulator
    from sample_models._loading import load, trace_loaded

    spec = f"hf:{name}"
    ov = {**overrides, "dtype": "bf16", "batch_size": batch, "seq_len": seq}
    graph = trace_loaded(spec, ov, load(spec, ov), name)
    device_type = profile_file or preset
    if kind == "forward":
        devices = partitioner.parse_devices(f"1x{device_type}")
        devices = [dataclasses.replace(d, profile=d.profile.with_engine(engine)) for d in devices]
        plan = partitioner.partition(graph, devices, "size_based")
        return plan.latency_s, devices[0].profile.assumes
    c = cluster.cluster(device_type, engine=engine)
    p = cluster.profile(graph)
    if kind == "train":
        w = cluster.Workload(global_batch=batch, seq_len=seq, element_bytes=2, optimizer="adam")
        r = cluster.evaluate(p, w, c, parse_layout(f"dp1 tp1 pp1 mb{batch}"), step_simulator())
        return r.step_s, c.accelerator.assumes
    w = cluster.Workload(kind="inference", global_batch=batch, seq_len=seq, generate_tokens=decode_tokens)
    r = cluster.evaluate(p, w, c, parse_layout("dp1 tp1 pp1"), step_simulator())
    return r.extra["seconds_per_token"], c.accelerator.assumes


def _preset_for(gpu_name: str) -> str:
    name = gpu_name.upper()
    for key, preset in (
        ("H200", "h200-141gb"),
        ("H100", "h100-80gb"),
        ("B200", "b200-192gb"),
        ("A100", "a100-80gb"),
        ("L4", "l4-24gb"),
        ("V100", "v100-16gb"),
        ("T4", "t4-16gb"),
        ("MI300", "mi300x-192gb"),
    ):
        if key in name:
            return preset
    return "h100-80gb"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", help="the device type to predict with (default: the GPU's)")
    ap.add_argument("--profile", help="a profile file from `partition-explorer calibrate --gpu` instead")
    ap.add_argument("--engine", default="eager", help="eager (default) or graphs")
    ap.add_argument("--quick", action="store_true", help="the smallest and largest size of each model only")
    ap.add_argument("--models", help="comma-separated presets (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="tiny configs on the CPU: checks the script only")
    args = ap.parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU here; run it on a GPU machine (or --dry-run to check the script)")
        return 2
    gpu_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (dry run)"
    preset = args.preset or _preset_for(gpu_name)
    cases = DRY if args.dry_run else [c for c in CASES if not args.models or c[0] in args.models.split(",")]
    print(f"bench_gpu: {gpu_name}, torch {torch.__version__}; predicted with {args.profile or preset} ({args.engine})")
    rows, assumes, failed = [], "", 0
    for name, overrides, sizes, kinds in cases:
        model, config, _ = _build(name, overrides, device)
        vocab = int(getattr(config, "vocab_size", 32000))
        if args.quick and len(sizes) > 2:
            sizes = [sizes[0], sizes[-1]]
        for batch, size in sizes:
            for kind in kinds:
                seq = _decode_prompt(config, size, 16) if kind == "decode" else size
                label = f"{name} x{overrides} {kind} {batch}x{seq}"
                try:
                    measured = _measure(model, kind, batch, seq, vocab, device)
                    predicted, assumes = _predict(
                        name, overrides, kind, batch, seq, preset, args.engine, args.profile, 16
                    )
                except torch.cuda.OutOfMemoryError:
                    print(f"{label}: out of memory, skipped")
                    torch.cuda.empty_cache()
                    continue
                except Exception as exc:  # one broken case must not cost the rest of a GPU lease
                    print(f"{label}: failed, skipped: {type(exc).__name__}: {exc}")
                    failed += 1
                    continue
                error = predicted / measured - 1
                rows.append(
                    dict(
                        model=name,
                        layers=overrides,
                        kind=kind,
                        batch=batch,
                        seq=seq,
                        predicted_s=predicted,
                        measured_s=measured,
                        error=error,
                    )
                )
                print(
                    f"{name:14s} {kind:8s} {batch:3d} x {seq:6d}  predicted {predicted * 1e3:9.3f} ms  "
                    f"measured {measured * 1e3:9.3f} ms  error {error:+7.1%}",
                    flush=True,
                )
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    if rows:
        errors = [abs(r["error"]) for r in rows]
        print(
            f"\n{len(rows)} cases: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}; "
            f"within 25 %: {sum(e <= 0.25 for e in errors)} of {len(rows)}; "
            f"predicted above measured: {sum(r['error'] > 0 for r in rows)}, below: {sum(r['error'] < 0 for r in rows)}"
        )
        print(f"assumes: {assumes}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "bench_gpu.json").write_text(
            json.dumps(
                {"gpu": gpu_name, "preset": preset, "engine": args.engine, "torch": torch.__version__, "rows": rows},
                indent=1,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
