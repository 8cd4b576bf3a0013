"""Every export this project writes reads back through the review to the same layout, workload
and numbers; the review's verdict gates a launch from the command line (exit 1 when the job does
not fit, 2 when the file cannot be read)."""

from __future__ import annotations

import dataclasses

import pytest

from partitioner import cluster
from partitioner.interop.engines import engine_file
from partitioner.pipeline.steps import step_simulator
from partitioner.review import Job, expressible, job_file, read_job, review_job
from partitioner.review.job import Setting

LAYOUTS = [
    cluster.Layout(dp=8, tp=4, pp=2, schedule="interleaved_1f1b", microbatch_size=1, zero=1, recompute="full"),
    cluster.Layout(dp=16, tp=2, microbatch_size=2, zero=3, recompute="selective"),
    cluster.Layout(dp=4, tp=8, pp=4, schedule="1f1b", microbatch_size=1, zero=1, recompute="layers-2", sp=False),
    cluster.Layout(dp=32, microbatch_size=2, zero=2),
    cluster.Layout(dp=8, cp=2, tp=4, zero=3, recompute="full", shard=8),
    cluster.Layout(dp=64, microbatch_size=1, zero=3, offload=True, recompute="full"),
    cluster.Layout(dp=8, tp=4, microbatch_size=1, zero=2, sp=False),  # DeepSpeed's AutoTP
]
WORKLOADS = [
    cluster.Workload(global_batch=256, seq_len=4096, train_tokens=256 * 4096 * 1000.0),
    cluster.Workload(global_batch=512, seq_len=2048, dtype="fp16", train_tokens=512 * 2048 * 10.0),
    cluster.Workload(global_batch=128, seq_len=8192, dtype="fp8", train_tokens=128 * 8192 * 7.0),
    cluster.Workload(global_batch=64, seq_len=1024, dtype="fp32", train_tokens=64 * 1024 * 3.0),
]


def _job(fmt: str) -> Job:
    return Job(fmt, cluster.Layout(), cluster.Workload(), (Setting("model", "hf:llama-3-8b", ""),), "hf:llama-3-8b")


@pytest.mark.parametrize("fmt", ["torchtitan", "torchtitan-args", "megatron", "deepspeed"])
@pytest.mark.parametrize("work", WORKLOADS, ids=lambda w: w.dtype)
def test_every_export_reads_back_to_the_same_layout_and_workload(fmt, work):
    if fmt in ("deepspeed", "torchtitan-args") and work.dtype == "fp8":
        # both set fp8 in the model's code; each export says so
        assert "fp8" in engine_file(fmt, LAYOUTS[3], work)[1]
        return
    read = 0
    for lay in LAYOUTS:
        if not expressible(fmt, lay):
            continue
        name, text, _ = job_file(_job(fmt), lay, work) if fmt != "torchtitan-args" else engine_file(fmt, lay, work)
        # torchtitan's and DeepSpeed's files leave the GPUs to the launcher; DeepSpeed's the sequence
        job = read_job(text, name, fmt, devices=None if fmt == "megatron" else lay.devices, seq_len=work.seq_len)
        assert job.layout == lay, (fmt, text)
        if fmt == "deepspeed":  # DeepSpeed's JSON holds no run length: the review's default prices it
            work = dataclasses.replace(work, train_tokens=job.workload.train_tokens)
        assert job.workload == work, (fmt, text)
        if fmt == "torchtitan":
            assert job.model == "hf:llama-3-8b"  # the export names the model as torchtitan does
        read += 1
    assert read >= 2


def test_a_read_back_export_prices_the_same():
    from tests.cluster.cluster_helpers import hand_profile

    prof, target = hand_profile(layers=8), cluster.cluster("h100-80gb")
    lay, work = LAYOUTS[0], WORKLOADS[0]
    name, text, _ = job_file(_job("megatron"), lay, work)
    job = read_job(text, name)
    rv = review_job(prof, job, target, top=2)
    assert rv.result.to_dict() == cluster.evaluate(prof, work, target, lay, step_simulator()).to_dict()
    for change in rv.changes:  # each surely faster, and runnable by Megatron-LM
        assert change.result.step_high_s < rv.result.step_low_s and expressible("megatron", change.result.layout)
    assert rv.job.layout.devices == 64 and all(c.result.devices == 64 for c in rv.changes)


@pytest.mark.parametrize(
    "line",
    [
        "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --max-num-seqs 64 "
        "--max-model-len 4096 --gpu-memory-utilization 0.92 --quantization fp8",
        "python -m sglang.launch_server --model-path mistralai/Mistral-7B-v0.1 --tp 2 --max-running-requests 32",
    ],
)
def test_a_serving_line_reads_back_from_its_own_export(line):
    job = read_job(line, prompt=1000, generate=200)
    name, text, _ = job_file(job, job.layout, job.workload)
    again = read_job(text, name, prompt=1000, generate=200)
    assert (again.format, again.model, again.model_name) == (job.format, job.model, job.model_name)
    assert again.layout == job.layout and again.workload == job.workload
    assert again.memory_utilization == job.memory_utilization
