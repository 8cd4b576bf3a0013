"""A cluster layout as the configuration the training engines read: torchtitan's job config
sections (the TOML file of torchtitan up to 0.2) and its command-line overrides (torchtitan 0.3,
whose configs are Python and whose command line tyro parses), Megatron-LM's command-line
arguments and DeepSpeed's JSON config.

Field names are each tool's own (torchtitan's ``ParallelismConfig``, ``TrainingConfig`` and
activation-checkpointing configs; Megatron-LM ``arguments.py``; DeepSpeed's config JSON); the
tests read the exports back with torchtitan's dataclasses and tyro, and with DeepSpeed's
``DeepSpeedConfig``. Where a tool lacks a setting the note says so: torchtitan shards data
parallelism with FSDP, ZeRO-3 (parameters resharded after the forward) or ZeRO-2 (kept until the
backward: ``fsdp_reshard_after_forward = "never"``), or replicates it (DDP); it has no ZeRO-1.

Batches: without pipeline stages a data-parallel rank runs ``microbatch_size`` sequences a pass
and accumulates gradients up to the global batch (torchtitan's ``local_batch_size`` and
``global_batch_size``); with stages its whole share is split into pipeline microbatches.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from partitioner.cluster.layout_types import recompute_layers
from partitioner.cluster.layouts import Layout, Workload
from partitioner.cluster.run.runnable import run_schedule
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import virtual_stages
from partitioner.units import HALF_FLOATS, dtype

__all__ = [
    "steps",
    "to_torchtitan",
    "to_torchtitan_args",
    "to_megatron",
    "to_deepspeed",
    "EXPORT_ENGINES",
    "toml_text",
    "engine_file",
]


def to_torchtitan(layout: Layout, workload: Workload) -> dict[str, Any]:
    """The layout as torchtitan's config sections (its TOML file up to 0.2; the same fields as 0.3's dataclasses)."""
    sharded = layout.zero in (2, 3)
    per_replica = workload.global_batch // layout.dp
    # FSDP shards over data_parallel_shard x context_parallel; HSDP replicates across the rest.
    shard = layout.shard // layout.cp if sharded and layout.shard else layout.dp if sharded else 1
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": layout.dp // shard,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": layout.tp,
        "pipeline_parallel_degree": layout.pp,
        "expert_parallel_degree": layout.ep,
        "context_parallel_degree": layout.cp,
        "enable_sequence_parallel": layout.sp,
    }
    if sharded and layout.dp > 1:
        parallelism["fsdp_reshard_after_forward"] = "always" if layout.zero == 3 else "never"
    if layout.pp > 1:
        # torchtitan's names are torch's; a layout without a schedule runs GPipe, as a local run does
        parallelism["pipeline_parallel_schedule"] = run_schedule(layout).torch_name
        parallelism["pipeline_parallel_microbatch_size"] = layout.microbatch_size
    config: dict[str, Any] = {
        "parallelism": parallelism,
        "activation_checkpoint": _titan_checkpoint(layout),
        "training": {
            "local_batch_size": per_replica if layout.pp > 1 else layout.microbatch_size,
            "global_batch_size": workload.global_batch,
            "seq_len": workload.seq_len,
            "steps": steps(workload),
            "mixed_precision_param": _titan_param_dtype(workload),
        },
    }
    if workload.dtype == "fp8":  # torchtitan's float8 converter (torchao) on the linear layers
        config["model"] = {"converters": ["float8"]}
    if layout.recompute.startswith("min-cut-"):
        config["compile"] = {"enable": True}  # memory_budget mode runs under torch.compile
    notes = []
    if layout.zero == 1:
        notes.append("torchtitan has no ZeRO-1: data parallelism is replicated (DDP) here")
    if layout.offload:
        notes.append("torchtitan does not offload the optimizer: this runs it on the devices")
    if layout.ep > 1 and not sharded:  # its mesh: dp_shard x cp x tp == expert-FSDP x ep
        notes.append(
            f"torchtitan runs expert parallelism inside data_parallel_shard x tensor_parallel, which is "
            f"{layout.tp} here and must divide by ep {layout.ep}: choose a layout with ZeRO 2 or 3"
        )
    if notes:
        config["note"] = "; ".join(notes)
    return config


def steps(workload: Workload) -> int:
    """The optimizer steps that train ``workload.train_tokens`` (torchtitan's ``training.steps``,
    Megatron-LM's ``--train-iters``)."""
    return max(1, round(workload.train_tokens / (workload.global_batch * workload.seq_len)))


def _titan_param_dtype(workload: Workload) -> str:
    """torchtitan's ``mixed_precision_param``: the workload's precision (fp8's products run in
    float8 under the converter; its parameters and activations stay bf16)."""
    return dtype(workload.dtype).name if workload.dtype != "fp8" else dtype("bf16").name


def _titan_checkpoint(layout: Layout) -> dict[str, Any]:
    if layout.recompute.startswith("min-cut-"):  # torch.compile's activation_memory_budget: the same min-cut
        return {"mode": "memory_budget", "memory_budget": float(layout.recompute.removeprefix("min-cut-"))}
    return {"mode": layout.recompute if layout.recompute in ("full", "selective") else "none"}


def to_torchtitan_args(layout: Layout, workload: Workload) -> list[str]:
    """The layout as torchtitan 0.3's command-line overrides, after ``--module M --config C``:
    ``--section.field value`` for every field of :func:`to_torchtitan`, then the activation
    checkpointing choice as tyro's subcommand (``activation_checkpoint:full``, ``:none`` or
    ``:memory-budget`` with its budget)."""
    config = to_torchtitan(layout, workload)
    args: list[str] = []
    for section in ("parallelism", "training", "compile"):
        for key, value in config.get(section, {}).items():
            if isinstance(value, bool):
                args.append(f"--{section}.{key}" if value else f"--{section}.no-{key}")
            else:
                args += [f"--{section}.{key}", str(value)]
    checkpoint = config["activation_checkpoint"]
    if checkpoint["mode"] == "memory_budget":
        args += [
            "activation_checkpoint:memory-budget",
            "--activation_checkpoint.memory_budget",
            str(checkpoint["memory_budget"]),
        ]
    else:
        args.append(f"activation_checkpoint:{checkpoint['mode']}")
    return args


def to_megatron(layout: Layout, workload: Workload) -> list[str]:
    args = [
        "--tensor-model-parallel-size",
        str(layout.tp),
        "--pipeline-model-parallel-size",
        str(layout.pp),
        "--micro-batch-size",
        str(layout.microbatch_size),
        "--global-batch-size",
        str(workload.global_batch),
        "--seq-length",
        str(workload.seq_len),
        "--train-iters",
        str(steps(workload)),
        *_megatron_precision(workload),
    ]
    if layout.tp > 1 and layout.sp:
        args.append("--sequence-parallel")
    if layout.cp > 1:
        args += ["--context-parallel-size", str(layout.cp)]
    if layout.ep > 1:
        args += ["--expert-model-parallel-size", str(layout.ep)]
    virtual = virtual_stages(layout.schedule, layout.virtual)
    if virtual > 1:
        args += ["--num-virtual-stages-per-pipeline-rank", str(virtual)]
    if layout.zero >= 1:
        args.append("--use-distributed-optimizer")  # Megatron's ZeRO-1 (optimizer state sharded)
        if layout.offload:
            args.append("--optimizer-cpu-offload")
        if layout.shard:  # sharded within groups of that size, replicated across them
            args += ["--num-distributed-optimizer-instances", str(layout.dp * layout.cp // layout.shard)]
    if layout.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif recompute_layers(layout.recompute):  # K layers of each pipeline rank, the rest keep all
        count = str(recompute_layers(layout.recompute))
        args += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", count]
    elif layout.recompute == "selective":  # the attention core (Korthikanti et al. 2022)
        args += ["--recompute-granularity", "selective"]
    return args


def _megatron_precision(workload: Workload) -> list[str]:
    """Megatron-LM's precision flags: ``--bf16`` or ``--fp16`` (mixed, fp32 master weights), none
    for fp32, and for fp8 Transformer Engine's ``--fp8-format hybrid`` beside bf16."""
    if workload.dtype == "fp8":
        return ["--bf16", "--fp8-format", "hybrid"]
    return [] if workload.element_bytes == 4 else [f"--{workload.dtype}"]


def to_deepspeed(layout: Layout, workload: Workload) -> dict[str, Any]:
    per_replica = workload.global_batch // layout.dp
    config: dict[str, Any] = {
        "train_batch_size": workload.global_batch,
        "train_micro_batch_size_per_gpu": layout.microbatch_size,
        "gradient_accumulation_steps": per_replica // layout.microbatch_size,
        **{
            half: {"enabled": workload.dtype == half or (workload.dtype == "fp8" and half == HALF_FLOATS[0])}
            for half in HALF_FLOATS
        },
        "zero_optimization": {
            "stage": layout.zero,
            **({"zero_hpz_partition_size": layout.shard} if layout.shard and layout.zero == 3 else {}),
            **({"offload_optimizer": {"device": "cpu", "pin_memory": True}} if layout.offload else {}),
        },
        "activation_checkpointing": {"partition_activations": layout.recompute == "full"},
    }
    if layout.tp > 1:  # DeepSpeed's AutoTP (tensor parallelism without sequence parallelism)
        config["tensor_parallel"] = {"autotp_size": layout.tp}
    comments = []
    if layout.ep > 1:  # DeepSpeed-MoE takes ep_size in the model's MoE layers, not in this file
        comments.append(f"expert parallelism: deepspeed.moe.layer.MoE(..., ep_size={layout.ep})")
    if workload.dtype == "fp8":
        comments.append("fp8: DeepSpeed runs FP8 products through Transformer Engine's layers in the model")
    if comments:
        config["comment"] = "; ".join(comments)
    return config


def toml_text(config: dict[str, Any]) -> str:
    """A flat two-level dict as TOML (torchtitan's job config files)."""
    lines: list[str] = []
    for section, values in config.items():
        if not isinstance(values, dict):
            lines.append(f"# {values}")
            continue
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    return str(value).lower() if isinstance(value, bool) else str(value)


# The training frameworks a layout exports to, each with its writer (not the kernel engines a time
# assumes, eager or graphs: those are partitioner.kernels.ENGINES).
EXPORT_ENGINES = {
    "torchtitan": to_torchtitan,
    "torchtitan-args": to_torchtitan_args,
    "megatron": to_megatron,
    "deepspeed": to_deepspeed,
}


def engine_file(engine: str, layout: Layout, workload: Workload) -> tuple[str, str, str]:
    """(file name, text, MIME type) of ``layout`` as ``engine``'s config: torchtitan's TOML, its
    0.3 overrides or Megatron-LM's arguments (one shell line each), DeepSpeed's JSON."""
    if engine not in EXPORT_ENGINES:
        raise PartitionError(f"engine must be one of {', '.join(EXPORT_ENGINES)} (got {engine!r})")
    if engine == "torchtitan":
        return "torchtitan.toml", toml_text(to_torchtitan(layout, workload)), "application/toml"
    if engine in ("torchtitan-args", "megatron"):
        args = EXPORT_ENGINES[engine](layout, workload)
        note = to_torchtitan(layout, workload).get("note") if engine == "torchtitan-args" else None
        if engine == "torchtitan-args" and workload.dtype == "fp8":
            fp8 = "fp8: torchtitan 0.3 sets float8 in the Python config (the model's Float8LinearConverter)"
            note = f"{note}; {fp8}" if note else fp8
        if engine == "megatron" and layout.schedule == "zero_bubble":
            note = (
                "Megatron-LM has no zero-bubble schedule: this runs interleaved 1F1B with 2 chunks a rank "
                "(torchtitan's InterleavedZeroBubble runs the planned one)"
            )
        text = (f"# {note}\n" if note else "") + " ".join(shlex.quote(a) for a in args) + "\n"
        return f"{engine.replace('-', '_')}.txt", text, "text/plain"
    return "deepspeed.json", json.dumps(to_deepspeed(layout, workload), indent=2) + "\n", "application/json"
