"""A ``vllm serve`` or SGLang ``launch_server`` command line read for review, as the serving
layout and workload the planner prices.

vLLM's own parser (``EngineArgs.add_cli_args``) needs vLLM, which needs a GPU build of torch; this
reads the documented subset in :data:`VLLM` and :data:`SGLANG` (each flag's name in that engine,
its alias, and what the planner takes from it), with the engines' defaults (NOTE: [Serving engine
defaults] in :mod:`partitioner.cluster.hardware`); every other flag is named as not priced."""

from __future__ import annotations

import difflib
from typing import Any

from partitioner.review.job import Job, JobError, Taken
from partitioner.review.models import from_repo_id
from partitioner.review.shell import split_launcher

__all__ = ["read_serve_line", "VLLM", "SGLANG"]

# flag -> (what the planner takes, the type); aliases map to the same entry.
VLLM: dict[str, tuple[str, type]] = {
    "model": ("model", str),
    "tensor-parallel-size": ("tp", int),
    "tp": ("tp", int),
    "pipeline-parallel-size": ("pp", int),
    "pp": ("pp", int),
    "data-parallel-size": ("dp", int),
    "dp": ("dp", int),
    "max-model-len": ("context", int),
    "max-num-seqs": ("sequences", int),
    "gpu-memory-utilization": ("utilization", float),
    "kv-cache-dtype": ("kv_dtype", str),
    "quantization": ("quantization", str),
    "q": ("quantization", str),
    "dtype": ("weights_dtype", str),
    "max-num-batched-tokens": ("chunk", int),
    "enable-chunked-prefill": ("chunked", bool),
    "enforce-eager": ("eager", bool),
}
SGLANG: dict[str, tuple[str, type]] = {
    "model-path": ("model", str),
    "model": ("model", str),
    "tp-size": ("tp", int),
    "tp": ("tp", int),
    "pp-size": ("pp", int),
    "dp-size": ("dp", int),
    "dp": ("dp", int),
    "context-length": ("context", int),
    "max-running-requests": ("sequences", int),
    "mem-fraction-static": ("utilization", float),
    "kv-cache-dtype": ("kv_dtype", str),
    "quantization": ("quantization", str),
    "dtype": ("weights_dtype", str),
    "chunked-prefill-size": ("chunk", int),
    "disable-cuda-graph": ("eager", bool),
}


def read_serve_line(words: list[str], where: str = "serving command", prompt: int = 1024, generate: int = 256) -> Job:
    """The job of a ``vllm serve MODEL --tensor-parallel-size 8 ...`` or ``python -m
    sglang.launch_server --model-path M --tp 8 ...`` line: ``prompt`` tokens in and ``generate``
    out for each of the engine's concurrent sequences (``--max-num-seqs``: vLLM's default 1,024 on
    a card of 70 GiB or more, 256 on others; SGLang sizes it from memory: 256 is read)."""
    launcher, program, args = split_launcher(words)
    sglang = "sglang" in program or (words[:1] == ["sglang"])
    fmt, table = ("sglang", SGLANG) if sglang else ("vllm", VLLM)
    if fmt == "vllm" and program == "serve" and args and not args[0].startswith("-"):
        args = ["--model", args[0], *args[1:]]  # vllm serve MODEL
    found: dict[str, Any] = {}
    sources: dict[str, str] = {}
    t = Taken()
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-"):
            continue
        name, eq, value = word.lstrip("-").partition("=")
        name = name.replace("_", "-")
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=1, cutoff=0.85)
            (t.unknown if close else t.unpriced).append(
                f"--{name}" + (f" (did you mean --{close[0]}?)" if close else "")
            )
            while not eq and i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        key, kind = table[name]
        if kind is bool:
            found[key], sources[key] = True, f"--{name}"
            continue
        if not eq:
            if i >= len(args):
                raise JobError(f"{where}: --{name} takes a value and none follows")
            value = args[i]
            i += 1
        try:
            found[key] = kind(value)
        except ValueError:
            raise JobError(
                f"{where}: --{name} takes {'a whole number' if kind is int else 'a number'} (got {value!r})"
            ) from None
        sources[key] = f"--{name} {value}"
    return _job(found, sources, t, fmt, where, prompt, generate)


def _job(
    found: dict[str, Any], sources: dict[str, str], t: Taken, fmt: str, where: str, prompt: int, generate: int
) -> Job:
    engine = "vLLM" if fmt == "vllm" else "SGLang"
    repo = found.get("model")
    if not repo:
        raise JobError(
            f"{where}: the command names no model ({'vllm serve MODEL' if fmt == 'vllm' else '--model-path'})"
        )
    spec = from_repo_id(str(repo))
    if spec:
        t.take("model", spec, f"{sources['model']}: read as {spec} (the same shapes)")
    else:
        t.notes.append(f"model {repo!r} is not one this project builds from its name; give --model")
    for key, name in (("tp", "tp"), ("pp", "pp"), ("dp", "dp")):
        value = found.get(key, 1)
        if value < 1:
            raise JobError(f"{where}: {sources[key]} must be at least 1")
        t.take(name, value, sources.get(key, f"{engine}'s default 1"))
    t.take("sp", True, "serving: no sequence parallelism to choose")
    context = found.get("context")
    if context is not None and prompt + generate > context:
        prompt = max(1, context - generate)
        t.notes.append(f"the prompt is cut to {prompt} tokens so it and {generate} generated fit {sources['context']}")
    t.take("seq_len", prompt, "the prompt given (--prompt)")
    t.take("generate_tokens", generate, "the tokens generated given (--generate)")
    sequences = found.get("sequences")
    t.take(
        "global_batch",
        (sequences or 256) * found.get("dp", 1),
        (sources["sequences"] if sequences else f"{engine}'s default of 256 concurrent sequences") + " a replica",
    )
    quant, kv = str(found.get("quantization", "")).lower(), str(found.get("kv_dtype", "auto")).lower()
    if quant.startswith("fp8"):
        t.take("dtype", "fp8", f"{sources['quantization']}: 1-byte weights and products")
        if not kv.startswith("fp8"):
            t.notes.append(
                f"{engine} keeps the KV cache in bf16 without --kv-cache-dtype fp8; priced in fp8 with the weights"
            )
    elif quant:
        raise JobError(f"{where}: {sources['quantization']} is not priced (fp8 and none are); drop it or use fp8")
    else:
        t.take("dtype", "bf16", sources.get("weights_dtype", f"{engine}'s default: the checkpoint's bf16"))
        if kv.startswith("fp8"):
            t.notes.append(f"{sources['kv_dtype']} halves the KV cache; priced in bf16 (the cache as the weights)")
    if found.get("eager"):
        t.take("engine", "eager", f"{sources['eager']}: no CUDA graphs")
    utilization = found.get("utilization")
    if utilization is not None and not 0 < utilization <= 1:
        raise JobError(f"{where}: {sources['utilization']} must be in (0, 1]")
    job = t.job(
        fmt,
        where,
        model=t.get("model"),
        model_name=str(repo),
        devices=found.get("tp", 1) * found.get("pp", 1) * found.get("dp", 1),
        memory_utilization=utilization,
        engine=t.get("engine"),
        reader=f"this project's documented subset of {engine}'s flags",
    )
    return job
