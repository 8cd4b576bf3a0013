"""A cluster layout as the configuration the training engines read: torchtitan's job config
sections (TOML), Megatron-LM's command-line arguments and DeepSpeed's JSON config.

Field names follow each tool's own documentation (torchtitan ``[parallelism]``,
``[activation_checkpoint]``, ``[training]``; Megatron-LM ``arguments.py``; DeepSpeed's config
JSON). Where a tool lacks a setting the note says so: torchtitan shards data parallelism with
FSDP (ZeRO-3) or replicates it (DDP), and has no ZeRO-1/2.
"""

from __future__ import annotations

from typing import Any

from partitioner.cluster.layouts import Layout, Workload

__all__ = ["to_torchtitan", "to_megatron", "to_deepspeed", "ENGINES", "toml_text"]

_TITAN_SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved_1f1b": "Interleaved1F1B"}


def to_torchtitan(layout: Layout, workload: Workload) -> dict[str, Any]:
    sharded = layout.zero == 3
    config: dict[str, Any] = {
        "parallelism": {
            "data_parallel_replicate_degree": 1 if sharded else layout.dp,
            "data_parallel_shard_degree": layout.dp if sharded else 1,
            "tensor_parallel_degree": layout.tp,
            "pipeline_parallel_degree": layout.pp,
            "expert_parallel_degree": layout.ep,
        },
        "activation_checkpoint": _titan_checkpoint(layout),
        "training": {"local_batch_size": workload.global_batch // layout.dp, "seq_len": workload.seq_len},
    }
    if layout.pp > 1:
        config["parallelism"]["pipeline_parallel_schedule"] = _TITAN_SCHEDULES[layout.schedule]
        config["parallelism"]["pipeline_parallel_microbatch_size"] = layout.microbatch_size
    if layout.recompute.startswith("min-cut-"):
        config["compile"] = {"enable": True}  # memory_budget mode runs under torch.compile
    if layout.zero in (1, 2):
        config["note"] = f"torchtitan has no ZeRO-{layout.zero}: data parallelism is replicated (DDP) here"
    return config


def _titan_checkpoint(layout: Layout) -> dict[str, Any]:
    if layout.recompute.startswith("min-cut-"):  # torch.compile's activation_memory_budget: the same min-cut
        return {"mode": "memory_budget", "memory_budget": float(layout.recompute.removeprefix("min-cut-"))}
    return {"mode": "full" if layout.recompute == "full" else "none"}


def to_megatron(layout: Layout, workload: Workload) -> list[str]:
    args = ["--tensor-model-parallel-size", str(layout.tp), "--pipeline-model-parallel-size", str(layout.pp),
            "--micro-batch-size", str(layout.microbatch_size), "--global-batch-size", str(workload.global_batch),
            "--seq-length", str(workload.seq_len), "--bf16"]
    if layout.tp > 1:
        args.append("--sequence-parallel")
    if layout.ep > 1:
        args += ["--expert-model-parallel-size", str(layout.ep)]
    if layout.schedule == "interleaved_1f1b":
        args += ["--num-virtual-stages-per-pipeline-rank", "2"]
    if layout.zero >= 1:
        args.append("--use-distributed-optimizer")  # Megatron's ZeRO-1 (optimizer state sharded)
    if layout.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return args


def to_deepspeed(layout: Layout, workload: Workload) -> dict[str, Any]:
    per_replica = workload.global_batch // layout.dp
    config: dict[str, Any] = {
        "train_batch_size": workload.global_batch,
        "train_micro_batch_size_per_gpu": layout.microbatch_size,
        "gradient_accumulation_steps": per_replica // layout.microbatch_size,
        "bf16": {"enabled": workload.element_bytes == 2},
        "zero_optimization": {"stage": layout.zero},
        "activation_checkpointing": {"partition_activations": layout.recompute == "full"},
    }
    if layout.ep > 1:  # DeepSpeed-MoE takes ep_size in the model's MoE layers, not in this file
        config["comment"] = f"expert parallelism: deepspeed.moe.layer.MoE(..., ep_size={layout.ep})"
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
            text = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
            lines.append(f"{key} = {text}")
        lines.append("")
    return "\n".join(lines)


ENGINES = {"torchtitan": to_torchtitan, "megatron": to_megatron, "deepspeed": to_deepspeed}
