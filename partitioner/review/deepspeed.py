"""A DeepSpeed config (its JSON) read for review, with the model and the sequence length named
beside it (the file holds neither). The ZeRO section is read by DeepSpeed's own
``DeepSpeedZeroConfig`` (pydantic, unknown fields refused) where DeepSpeed is installed, and the
top-level keys checked against DeepSpeed's own constants; both by this module's documented subset
otherwise. DeepSpeed's batch rule: ``train_batch_size = train_micro_batch_size_per_gpu x
gradient_accumulation_steps x`` the data-parallel degree, any two giving the third."""

from __future__ import annotations

import json
from typing import Any

from partitioner.review.job import Job, JobError, Taken, nearest_name
from partitioner.units import HALF_FLOATS

__all__ = ["read_deepspeed", "TOP_LEVEL", "ZERO_FIELDS"]

TOP_LEVEL = (
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    *HALF_FLOATS,
    "zero_optimization",
    "activation_checkpointing",
    "tensor_parallel",
    "optimizer",
    "scheduler",
    "gradient_clipping",
    "steps_per_print",
    "wall_clock_breakdown",
    "comment",
    "communication_data_type",
    "flops_profiler",
    "tensorboard",
    "wandb",
    "csv_monitor",
    "data_types",
    "amp",
    "zero_allow_untested_optimizer",
    "prescale_gradients",
    "gradient_predivide_factor",
    "sparse_gradients",
    "pipeline",
    "checkpoint",
    "aio",
    "elasticity",
    "dump_state",
    "memory_breakdown",
    "compression_training",
    "data_efficiency",
)
ZERO_FIELDS = (
    "stage",
    "offload_optimizer",
    "offload_param",
    "zero_hpz_partition_size",
    "overlap_comm",
    "contiguous_gradients",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "reduce_scatter",
    "allgather_partitions",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "sub_group_size",
    "stage3_gather_16bit_weights_on_model_save",
    "round_robin_gradients",
    "zero_quantized_weights",
    "zero_quantized_gradients",
    "mics_shard_size",
    "cpu_offload",
    "elastic_checkpoint",
)


def _known_top_level() -> tuple[set[str], str]:
    try:
        from deepspeed.runtime import constants
    except ImportError:
        return set(TOP_LEVEL), "this project's documented subset of DeepSpeed's config"
    names = {v for k, v in vars(constants).items() if k.isupper() and isinstance(v, str) and v.islower()}
    return names | set(TOP_LEVEL), "DeepSpeed's own config classes (DeepSpeedZeroConfig, deepspeed.runtime.constants)"


def _zero(section: Any, where: str) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise JobError(f'{where}: zero_optimization must be an object like {{"stage": 2}} (got {section!r})')
    try:
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    except ImportError:
        unknown = [k for k in section if k not in ZERO_FIELDS]
        if unknown:
            raise JobError(f"{where}: zero_optimization.{nearest_name(unknown[0], ZERO_FIELDS)} is not a ZeRO field")
        return dict(section)
    try:
        parsed = DeepSpeedZeroConfig(**section)
    except Exception as exc:  # pydantic's ValidationError names the field and the rule
        first = str(exc).splitlines()
        raise JobError(
            f"{where}: zero_optimization: {' '.join(first[1:3]).strip() or first[0]}; fix that field"
        ) from None
    out = dict(section)
    out["stage"] = int(parsed.stage)
    out["offload_optimizer"] = str(parsed.offload_optimizer.device) if parsed.offload_optimizer else "none"
    return out


def read_deepspeed(
    text: str, where: str = "deepspeed.json", devices: int | None = None, seq_len: int | None = None
) -> Job:
    """The job of a DeepSpeed JSON config; ``devices`` (the GPUs, from the launcher) is needed
    only where the file leaves the batch rule open."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobError(
            f"{where} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; fix it there"
        ) from None
    if not isinstance(data, dict):
        raise JobError(f"{where}: a DeepSpeed config is a JSON object of settings (got {type(data).__name__})")
    known, reader = _known_top_level()
    t = Taken()
    priced = (
        "tensor_parallel",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        *HALF_FLOATS,
        "zero_optimization",
        "activation_checkpointing",
        "comment",
    )
    for key in data:
        if key not in known:
            t.unknown.append(nearest_name(key, known))
        elif key not in priced:
            t.unpriced.append(key)

    def number(key: str) -> int | None:
        value = data.get(key)
        if value is None:
            return None
        if value == "auto":
            raise JobError(
                f'{where}: {key} is "auto", which the Hugging Face Trainer fills in at launch; write the number'
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise JobError(f"{where}: {key} must be a whole number of at least 1 (got {value!r})")
        return value

    batch, micro, accum = (
        number("train_batch_size"),
        number("train_micro_batch_size_per_gpu"),
        number("gradient_accumulation_steps"),
    )
    autotp = data.get("tensor_parallel", {})
    tp = autotp.get("autotp_size", 1) if isinstance(autotp, dict) else 1
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise JobError(f"{where}: tensor_parallel.autotp_size must be a whole number of at least 1 (got {tp!r})")
    if devices and devices % tp:
        raise JobError(f"{where}: {devices} GPUs (--devices) do not divide by tensor_parallel.autotp_size {tp}")
    dp, src = _batch_rule(batch, micro, accum, devices // tp if devices else None, where, t)
    t.take("dp", dp, src + (f" (the GPUs over tensor_parallel.autotp_size {tp})" if tp > 1 and devices else ""))
    t.take("tp", tp, f"tensor_parallel.autotp_size = {tp} (DeepSpeed's AutoTP)" if tp > 1 else "no tensor_parallel: 1")
    t.take("sp", tp == 1, "AutoTP splits no sequence" if tp > 1 else "no tensor parallelism")
    if seq_len is None:
        raise JobError(f"{where}: a DeepSpeed config does not hold the sequence length; give --seq-len N")
    t.take("seq_len", seq_len, "the sequence length given (--seq-len)")
    zero = _zero(data.get("zero_optimization", {}), where)
    stage = int(zero.get("stage", 0))
    t.take("zero", stage, f"zero_optimization.stage = {stage}")
    if zero.get("offload_optimizer", "none") not in ("none", None, {}):
        t.take("offload", True, f"zero_optimization.offload_optimizer.device = {zero['offload_optimizer']!r}")
    if zero.get("offload_param") not in (None, {}):
        t.notes.append("zero_optimization.offload_param (ZeRO-Infinity's weights on the host) is not priced")
    hpz = zero.get("zero_hpz_partition_size", 1)
    if stage == 3 and isinstance(hpz, int) and hpz > 1:
        t.take("shard", hpz, f"zero_optimization.zero_hpz_partition_size = {hpz}")
    for flag in HALF_FLOATS:
        section = data.get(flag, {})
        if isinstance(section, dict) and section.get("enabled") in (True, "auto"):
            t.take("dtype", flag, f"{flag}.enabled = true")
            break
    else:
        t.take("dtype", "fp32", "neither bf16 nor fp16 enabled: fp32")
    checkpointing = data.get("activation_checkpointing", {})
    if isinstance(checkpointing, dict) and checkpointing.get("partition_activations"):
        t.take("recompute", "full", "activation_checkpointing.partition_activations = true (each layer checkpointed)")
    else:
        t.take("recompute", "none", "no activation_checkpointing section: the model's own code decides")
        if checkpointing:
            t.notes.append("activation_checkpointing without partition_activations: priced as no recomputation")
    comment = data.get("comment")
    if isinstance(comment, str) and "ep_size=" in comment:
        t.notes.append(f"expert parallelism is set in the model's MoE layers: {comment}")
    return t.job("deepspeed", where, devices=dp * tp, reader=reader)


def _batch_rule(
    batch: int | None, micro: int | None, accum: int | None, devices: int | None, where: str, t: Taken
) -> tuple[int, str]:
    """The data-parallel degree of DeepSpeed's batch rule and where it came from, with the batch
    values taken."""
    given = (batch is not None, micro is not None)
    if micro is None and batch is None:
        raise JobError(f"{where}: give train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed needs one)")
    if batch is not None and micro is not None and accum is not None:
        if batch % (micro * accum):
            raise JobError(
                f"{where}: train_batch_size {batch} is not train_micro_batch_size_per_gpu {micro} x "
                f"gradient_accumulation_steps {accum} x the GPUs; fix one of them"
            )
        dp, src = batch // (micro * accum), f"train_batch_size {batch} / (micro {micro} x accumulation {accum})"
    elif devices:
        dp, src = devices, "the GPUs given (--devices)"
        micro = micro if micro is not None else (batch or 0) // (dp * (accum or 1))
        batch = batch if batch is not None else micro * (accum or 1) * dp
        if micro < 1:
            raise JobError(f"{where}: train_batch_size {batch} is less than one sequence a GPU over {dp} GPUs")
    else:
        raise JobError(
            f"{where}: the batch rule is open (two of train_batch_size, train_micro_batch_size_per_gpu, "
            "gradient_accumulation_steps given); give --devices N or the third"
        )
    if devices and dp != devices:
        raise JobError(
            f"{where}: the batch rule gives {dp} data-parallel GPUs and --devices says {devices}; DeepSpeed "
            "would refuse it: fix the batch sizes or --devices"
        )
    t.take("global_batch", batch, f"train_batch_size = {batch}" if given[0] else f"micro x accumulation x {dp} GPUs")
    t.take("microbatch_size", micro, f"train_micro_batch_size_per_gpu = {micro}" if given[1] else "from the batch rule")
    return dp, src
