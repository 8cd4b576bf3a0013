"""torchtitan's job config read for review: its TOML file (torchtitan up to 0.2) or its 0.3
command-line overrides (``--parallelism.tensor_parallel_degree 8``), as the layout and workload the
planner prices.

The fields and their defaults are torchtitan's own dataclasses' (``torchtitan.config.configs``:
``TrainingConfig``, ``ParallelismConfig``, ``CompileConfig``) where torchtitan is installed, and
this module's documented subset otherwise (:data:`SUBSET`, the same names and defaults, with the
0.1/0.2 names that were renamed since: ``training.batch_size``, ``training.compile``).
torchtitan's rules, as its trainer applies them: ``data_parallel_shard_degree = -1`` takes the
GPUs the other degrees leave; FSDP shards over ``data_parallel_shard_degree`` (ZeRO-3, or ZeRO-2
with ``fsdp_reshard_after_forward = "never"``) and replicates across
``data_parallel_replicate_degree`` (HSDP, or DDP alone); ``global_batch_size = -1`` is the local
batch times the data-parallel degree, a larger one accumulates gradients; with pipeline stages the
local batch is split into microbatches of ``pipeline_parallel_microbatch_size``."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from typing import Any

from partitioner.cost.training import OPTIMIZERS
from partitioner.errors import PartitionError
from partitioner.pipeline.schedules import get_schedule
from partitioner.review.job import Job, JobError, Taken, nearest_name
from partitioner.review.models import from_titan
from partitioner.units import dtype, find_dtype

__all__ = ["read_titan_toml", "read_titan_args", "SUBSET", "SECTIONS"]

# The fields the planner reads, with torchtitan 0.3's defaults (the dataclasses' where installed).
SUBSET: dict[str, dict[str, Any]] = {
    "training": {
        "local_batch_size": 8,
        "global_batch_size": -1,
        "seq_len": 2048,
        "steps": 10000,
        "dtype": dtype("fp32").name,
        "mixed_precision_param": dtype("bf16").name,
        "batch_size": 8,
        "compile": False,
        "enable_cpu_offload": False,
        # torchtitan 0.1/0.2's fields, since moved to other sections
        "dataset": "c4",
        "dataset_path": None,
        "warmup_steps": 200,
        "seed": None,
        "deterministic": False,
        "data_parallel_degree": -1,
        "gc_freq": 50,
    },
    "parallelism": {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": -1,
        "fsdp_reshard_after_forward": "default",
        "tensor_parallel_degree": 1,
        "enable_sequence_parallel": True,
        "pipeline_parallel_degree": 1,
        "pipeline_parallel_schedule": "1F1B",
        "pipeline_parallel_microbatch_size": 1,
        "context_parallel_degree": 1,
        "expert_parallel_degree": 1,
        "enable_async_tensor_parallel": False,
        "pipeline_parallel_layers_per_stage": None,
    },
    "compile": {"enable": False, "components": None, "backend": "inductor", "enable_async_tensor_parallel": False},
    "activation_checkpoint": {"mode": "selective", "selective_ac_option": "2", "memory_budget": 0.5},
    "model": {"name": "", "flavor": "", "converters": [], "tokenizer_path": "", "hf_assets_path": ""},
    "optimizer": {"name": "AdamW"},
    "float8": {"enable_float8_linear": False},
}
# The sections of torchtitan's job config whose fields are not priced (read and named as such).
SECTIONS = (
    "job",
    "profiling",
    "metrics",
    "lr_scheduler",
    "checkpoint",
    "comm",
    "validation",
    "debug",
    "memory_estimation",
    "fault_tolerance",
    "experimental",
    "mx",
    "quantize",
    "dataloader",
)
_PRICED = {
    "training": (
        "local_batch_size",
        "batch_size",
        "global_batch_size",
        "seq_len",
        "steps",
        "dtype",
        "mixed_precision_param",
        "compile",
        "enable_cpu_offload",
    ),
    "optimizer": ("name",),
    "float8": ("enable_float8_linear",),
}


def _known_fields() -> tuple[dict[str, dict[str, Any]], str]:
    """The fields of each read section with their defaults, and which reader gave them."""
    known = {k: dict(v) for k, v in SUBSET.items()}
    try:
        from torchtitan.config import configs
    except ImportError:
        return known, "this project's documented subset of torchtitan's fields (torchtitan not installed)"
    for section, cls in (
        ("training", "TrainingConfig"),
        ("parallelism", "ParallelismConfig"),
        ("compile", "CompileConfig"),
    ):
        for f in dataclasses.fields(getattr(configs, cls)):
            default = f.default if f.default is not dataclasses.MISSING else None
            known[section][f.name] = default
    return known, "torchtitan's own config dataclasses (torchtitan.config.configs)"


def read_titan_toml(text: str, where: str = "torchtitan.toml", devices: int | None = None) -> Job:
    """The job of a torchtitan TOML job config. ``devices`` is the GPU count the launch gives
    (torchrun's ``--nnodes`` x ``--nproc_per_node``) where ``data_parallel_shard_degree`` is -1; a
    comment "preset for N ... GPUs" (torchtitan's shipped configs) gives it otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise JobError(f"{where} is not TOML: {exc}; fix the line it names") from None
    found = re.search(r"preset for (\d+) ([A-Za-z0-9-]+) GPUs", text)
    hint = (int(found.group(1)), found.group(2)) if found else None
    return _read(data, where, devices, hint, "torchtitan")


def read_titan_args(words: list[str], where: str = "torchtitan command line", devices: int | None = None) -> Job:
    """The job of torchtitan 0.3's command line: ``--section.field value`` overrides (tyro's:
    ``--section.flag`` / ``--section.no-flag`` for booleans, ``activation_checkpoint:full`` for the
    checkpointing mode) after ``--module M --config C``."""
    data: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w.startswith("activation_checkpoint:"):
            data.setdefault("activation_checkpoint", {})["mode"] = w.split(":", 1)[1].replace("-", "_")
            continue
        if not w.startswith("--") or "." not in w:
            if w in ("--module", "--config") and i < len(words):
                data.setdefault("model", {})["name" if w == "--module" else "config"] = words[i]
                i += 1
            continue
        key, eq, value = w[2:].partition("=")
        section, _, name = key.partition(".")
        if not eq and (i >= len(words) or words[i].startswith("--") or ":" in words[i]):
            negated = name.startswith("no-") or name.startswith("no_")
            data.setdefault(section, {})[(name[3:] if negated else name).replace("-", "_")] = not negated
            continue
        if not eq:
            value = words[i]
            i += 1
        data.setdefault(section, {})[name.replace("-", "_")] = _scalar(value)
    model = data.get("model", {})
    if "config" in model:  # llama3_8b -> llama3 / 8B
        m = re.match(r"([a-z0-9_]+?)_([0-9.]+[bm])$", str(model.pop("config")).lower())
        if m:
            model["flavor"] = m.group(2).upper()
    return _read(data, where, devices, None, "torchtitan-args")


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _read(data: dict[str, Any], where: str, devices: int | None, hint: tuple[int, str] | None, fmt: str) -> Job:
    known, reader = _known_fields()
    # the sections whose every field the reader knows (torchtitan's dataclasses); the others are
    # read for the fields the planner prices and the rest named as not priced
    strict = ("training", "parallelism", "compile") if reader.startswith("torchtitan's") else ()
    t = Taken()
    for section, values in data.items():
        if not isinstance(values, dict):
            t.unknown.append(f"{section} (a top-level value; torchtitan's config is sections of fields)")
        elif section in known:
            for name in values:
                if name not in known[section] and section in strict:
                    t.unknown.append(f"{section}.{nearest_name(name, known[section])}")
                elif (
                    section not in ("parallelism", "activation_checkpoint", "compile", "model")
                    and (name not in _PRICED.get(section, ()))
                    or (name not in known[section])
                ):
                    t.unpriced.append(f"{section}.{name}")
        elif section in SECTIONS:
            t.unpriced += [f"{section}.{name}" for name in values]
        else:
            t.unknown.append(f"[{nearest_name(section, [*known, *SECTIONS])}]")

    def field(section: str, name: str, kind: type | tuple[type, ...] = int) -> tuple[Any, str]:
        values = data.get(section, {})
        if name in values:
            value = values[name]
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise JobError(f"{where}: {section}.{name} must be a whole number (got {value!r})")
            if not isinstance(value, kind):
                raise JobError(f"{where}: {section}.{name} has the wrong type (got {value!r})")
            return value, f"{section}.{name} = {value!r}"
        return known[section].get(name), f"torchtitan's default {section}.{name} = {known[section].get(name)!r}"

    _model(data, t, where)
    replicate, r_src = field("parallelism", "data_parallel_replicate_degree")
    shard, s_src = field("parallelism", "data_parallel_shard_degree")
    tp, tp_src = field("parallelism", "tensor_parallel_degree")
    pp, pp_src = field("parallelism", "pipeline_parallel_degree")
    cp, cp_src = field("parallelism", "context_parallel_degree")
    ep, ep_src = field("parallelism", "expert_parallel_degree")
    for name, value, src in (("tp", tp, tp_src), ("pp", pp, pp_src), ("cp", cp, cp_src), ("ep", ep, ep_src)):
        t.take(name, value, src)
    if shard == -1:
        total, total_src = (devices, "the GPUs given (--devices)") if devices else (None, "")
        if total is None and hint:
            total, total_src = hint[0], f"the file's comment: a preset for {hint[0]} {hint[1]} GPUs"
        if total is None:
            raise JobError(
                f"{where}: parallelism.data_parallel_shard_degree = -1 takes the GPUs the other degrees "
                "leave, and the job does not say how many GPUs it runs on; give --devices N (torchrun's "
                "--nnodes x --nproc_per_node) or set the degree"
            )
        rest = replicate * tp * pp * cp
        if total % rest:
            raise JobError(
                f"{where}: {total} GPUs ({total_src}) do not divide into replicate {replicate} x tp {tp} x "
                f"pp {pp} x cp {cp}; change --devices or the degrees"
            )
        shard, s_src = total // rest, f"-1: {total} GPUs ({total_src}) / (replicate x tp x pp x cp = {rest})"
    if shard < 1 or replicate < 1:
        raise JobError(
            f"{where}: data-parallel degrees must be at least 1 or -1 (got shard {shard}, replicate {replicate})"
        )
    t.take("dp", shard * replicate, f"data_parallel_shard_degree {shard} x replicate {replicate} ({s_src}; {r_src})")
    reshard, rs_src = field("parallelism", "fsdp_reshard_after_forward", str)
    if shard > 1:
        t.take("zero", 2 if reshard == "never" else 3, f"FSDP over {shard} ranks, {rs_src}")
        if replicate > 1:
            t.take("shard", shard * cp, f"HSDP: shard over {shard} x cp {cp}, replicate over {replicate}")
    else:
        t.take("zero", 0, "no FSDP (data_parallel_shard_degree 1): DDP replicates the weights")
    sp, sp_src = field("parallelism", "enable_sequence_parallel", bool)
    t.take("sp", bool(sp) or tp == 1, sp_src)
    _batch_and_schedule(data, t, field, where, pp, shard * replicate)
    _precision_and_recompute(data, t, field, where)
    dp = shard * replicate
    return t.job(
        fmt,
        where,
        model=t.get("model"),
        devices=dp * tp * pp * cp,
        reader=reader,
        accelerator=None,
        engine=t.get("engine"),
    )


def _model(data: dict[str, Any], t: Taken, where: str) -> None:
    model = data.get("model", {})
    name, flavour = str(model.get("name", "")), str(model.get("flavor", ""))
    if not name:
        return
    spec = from_titan(name, flavour)
    if spec is None:
        t.notes.append(
            f"model {name} {flavour} is not one this project builds from torchtitan's names; give --model "
            "(e.g. hf:llama-3-8b, or hf:llama with --set sizes)"
        )
        return
    t.take("model", spec, f"model.name = {name!r}, model.flavor = {flavour!r}")


def _batch_and_schedule(data: dict[str, Any], t: Taken, field: Any, where: str, pp: int, dp: int) -> None:
    training = data.get("training", {})
    local, l_src = field("training", "batch_size" if "batch_size" in training else "local_batch_size")
    global_batch, g_src = field("training", "global_batch_size")
    if global_batch in (-1, None):
        global_batch, g_src = local * dp, f"local batch {local} x data-parallel {dp} ({l_src}; global_batch_size -1)"
    elif global_batch % (local * dp):
        raise JobError(
            f"{where}: training.global_batch_size {global_batch} is not a multiple of local_batch_size {local} "
            f"x data-parallel degree {dp} (torchtitan accumulates whole local batches); change one of them"
        )
    t.take("global_batch", global_batch, g_src)
    if pp > 1:
        mb, mb_src = field("parallelism", "pipeline_parallel_microbatch_size")
        if local % mb:
            raise JobError(
                f"{where}: the local batch {local} does not split into pipeline microbatches of {mb} "
                "(parallelism.pipeline_parallel_microbatch_size); change one of them"
            )
        t.take("microbatch_size", mb, mb_src)
        name, s_src = field("parallelism", "pipeline_parallel_schedule", str)
        try:
            schedule = get_schedule(name)
        except PartitionError as exc:
            raise JobError(f"{where}: parallelism.pipeline_parallel_schedule {name!r}: {exc}") from None
        t.take("schedule", schedule.name, s_src)
        if schedule.choose_virtual:
            t.take("virtual", 2, "torchtitan's default: 2 stages a rank for a multi-stage schedule")
    else:
        t.take("microbatch_size", local, l_src)
    seq, seq_src = field("training", "seq_len")
    t.take("seq_len", seq, seq_src)
    steps, st_src = field("training", "steps")
    t.take("train_tokens", float(steps * global_batch * seq), f"{st_src} x {global_batch} sequences x {seq} tokens")


def _precision_and_recompute(data: dict[str, Any], t: Taken, field: Any, where: str) -> None:
    param, p_src = field("training", "mixed_precision_param", str)
    found = find_dtype(param)
    if found is None or not found.floating or found.bits not in (16, 32):
        raise JobError(f"{where}: training.mixed_precision_param {param!r} must be bfloat16, float16 or float32")
    precision, src = found.short, p_src
    converters = data.get("model", {}).get("converters", [])
    converters = [converters] if isinstance(converters, str) else list(converters)
    if "float8" in converters or data.get("float8", {}).get("enable_float8_linear"):
        precision, src = "fp8", "model.converters has float8 (torchao's Float8Linear on the linear layers)"
    t.take("dtype", precision, src)
    name, o_src = field("optimizer", "name", str)
    optimizer = name.lower().removesuffix("w")
    if optimizer not in OPTIMIZERS:
        t.notes.append(f"optimizer {name!r} is priced as Adam (2 states a parameter); {o_src}")
        optimizer = "adam"
    t.take("optimizer", optimizer, o_src)
    mode, m_src = field("activation_checkpoint", "mode", str)
    option = str(data.get("activation_checkpoint", {}).get("selective_ac_option", "op"))
    if mode == "selective" and option != "op":
        every = int(option) if option.isdigit() else 0
        if every == 1:
            t.take("recompute", "full", f"{m_src}, selective_ac_option = 1 (every layer): full")
        else:
            t.take("recompute", "selective", f"{m_src}, selective_ac_option = {option!r}")
            t.notes.append(
                f"selective_ac_option {option!r} checkpoints every {option}th layer whole; priced as selective "
                "(the attention core): open recompute-layers-K for K of a rank's layers"
            )
    elif mode == "memory_budget":
        budget, _ = field("activation_checkpoint", "memory_budget", (int, float))
        t.take("recompute", f"min-cut-{float(budget):g}", f"{m_src}, memory_budget = {budget}")
    elif mode in ("none", "selective", "full"):
        t.take("recompute", mode, m_src)
    else:
        raise JobError(f"{where}: activation_checkpoint.mode {mode!r} must be none, selective, full or memory_budget")
    compiled = data.get("compile", {}).get("enable", data.get("training", {}).get("compile", False))
    if compiled:
        t.take("engine", "graphs", "compile.enable = true: torch.compile's fused kernels")
