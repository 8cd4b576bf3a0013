"""A layout written in the format of the job it was reviewed from: torchtitan's TOML (with the
model's name and flavour), torchtitan 0.3's overrides, a Megatron-LM launch line (torchrun's GPUs
and the model's sizes ahead of the planner's arguments), DeepSpeed's JSON, or the serving engine's
command line. Each reads back through :func:`partitioner.review.read.read_job` to the same layout
and workload (tests/review hold it)."""

from __future__ import annotations

import shlex

from partitioner.cluster.layout_types import Layout, Workload
from partitioner.interop.engines import engine_file, to_megatron, to_torchtitan, toml_text
from partitioner.review.job import Job
from partitioner.review.models import PRESET_SIZES, TITAN_FLAVOURS

__all__ = ["job_file"]


def _preset(model: str | None) -> str | None:
    return model.removeprefix("hf:") if model and model.startswith("hf:") else None


def job_file(job: Job, layout: Layout, workload: Workload, devices_per_node: int = 8) -> tuple[str, str, str]:
    """(file name, text, MIME type) of ``layout`` and ``workload`` in ``job``'s format."""
    preset = _preset(job.model)
    if job.format == "torchtitan":
        config = to_torchtitan(layout, workload)
        flavour = next((k for k, v in TITAN_FLAVOURS.items() if v == preset), None)
        if flavour:
            config = {
                "model": {"name": flavour[0], "flavor": flavour[1], **config.get("model", {})},
                **{k: v for k, v in config.items() if k != "model"},
            }
        return "torchtitan.toml", toml_text(config), "application/toml"
    if job.format == "megatron":
        gpus = layout.devices
        per_node = min(devices_per_node, gpus)
        launch = [
            "torchrun",
            "--nnodes",
            str(max(1, gpus // per_node)),
            "--nproc_per_node",
            str(per_node),
            "pretrain_gpt.py",
        ]
        sizes: list[str] = []
        if preset in PRESET_SIZES:
            layers, hidden, ffn, heads, groups, vocab = PRESET_SIZES[preset]
            sizes = [
                "--num-layers",
                str(layers),
                "--hidden-size",
                str(hidden),
                "--ffn-hidden-size",
                str(ffn),
                "--num-attention-heads",
                str(heads),
                "--group-query-attention",
                "--num-query-groups",
                str(groups),
                "--vocab-size",
                str(vocab),
                "--swiglu",
            ]
        name, text, mime = engine_file("megatron", layout, workload)
        note = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
        words = launch + sizes + to_megatron(layout, workload)
        return "megatron_launch.sh", note + " ".join(shlex.quote(w) for w in words) + "\n", "text/x-shellscript"
    if job.format in ("vllm", "sglang"):
        return _serve_line(job, layout, workload)
    return engine_file(job.format, layout, workload)


def _serve_line(job: Job, layout: Layout, workload: Workload) -> tuple[str, str, str]:
    repo = job.model_name or job.model or ""
    sequences = max(1, workload.global_batch // layout.dp)
    if job.format == "vllm":
        words = [
            "vllm",
            "serve",
            repo,
            "--tensor-parallel-size",
            str(layout.tp),
            "--pipeline-parallel-size",
            str(layout.pp),
            "--data-parallel-size",
            str(layout.dp),
            "--max-num-seqs",
            str(sequences),
            "--max-model-len",
            str(workload.seq_len + workload.generate_tokens),
        ]
        flag = "--quantization"
    else:
        words = [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            repo,
            "--tp",
            str(layout.tp),
            "--pp-size",
            str(layout.pp),
            "--dp",
            str(layout.dp),
            "--max-running-requests",
            str(sequences),
            "--context-length",
            str(workload.seq_len + workload.generate_tokens),
        ]
        flag = "--quantization"
    if workload.dtype == "fp8":
        words += [flag, "fp8"]
    if job.memory_utilization is not None:
        words += [
            "--gpu-memory-utilization" if job.format == "vllm" else "--mem-fraction-static",
            f"{job.memory_utilization:g}",
        ]
    return f"{job.format}_serve.sh", " ".join(shlex.quote(w) for w in words) + "\n", "text/x-shellscript"
