"""Each reader takes the fields of its engine with their sources, names what it does not price or
know, and refuses a malformed config naming the field and the fix."""

from __future__ import annotations

import pathlib

import pytest

from partitioner import cluster
from partitioner.review import JobError, read_job
from partitioner.review.models import PRESET_SIZES
from partitioner.review.shell import expand_script

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def test_torchtitans_shipped_8b_config_reads_as_its_64_gpu_fsdp_run():
    job = read_job((FIXTURES / "torchtitan_llama3_8b_64xa100.toml").read_text(), "llama3_8b.toml")
    assert job.model == "hf:llama-3-8b" and job.devices == 64
    assert job.layout == cluster.Layout(dp=64, zero=3, recompute="selective")
    assert (job.workload.global_batch, job.workload.seq_len, job.workload.dtype) == (64, 8192, "bf16")
    assert job.workload.train_tokens == 1000 * 64 * 8192
    assert "preset for 64 A100 GPUs" in job.setting("dp").source  # the file's own comment
    assert "optimizer.lr" in job.unpriced and "checkpoint.interval" in job.unpriced
    assert job.unknown == ()
    assert job.reader.startswith("torchtitan's own")


def test_a_misspelt_torchtitan_field_is_named_with_the_nearest_one():
    job = read_job("[parallelism]\ntensor_paralel_degree = 8\ndata_parallel_shard_degree = 2\n", "a.toml")
    assert job.unknown == ("parallelism.tensor_paralel_degree (did you mean tensor_parallel_degree?)",)
    assert job.layout.tp == 1  # the misspelt field is not read


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[parallelism]\ntensor_parallel_degree = 'eight'\n", "tensor_parallel_degree must be a whole number"),
        ("[parallelism]\ndata_parallel_shard_degree = -1\n", "give --devices N"),
        ("[parallelism\n", "is not TOML"),
        ("[activation_checkpoint]\nmode = 'sometimes'\n[parallelism]\ndata_parallel_shard_degree = 1\n", "mode"),
        (
            "[training]\nlocal_batch_size = 3\nglobal_batch_size = 64\n[parallelism]\ndata_parallel_shard_degree = 2\n",
            "not a multiple of local_batch_size",
        ),
    ],
)
def test_a_malformed_torchtitan_config_names_the_field(text, named):
    with pytest.raises(JobError, match=named):
        read_job(text, "job.toml")


def test_megatrons_shipped_175b_script_is_read_without_running_it():
    script = (FIXTURES / "megatron_gpt3_175b.sh").read_text()
    with pytest.raises(JobError, match="world of 8 GPUs .* not a multiple of tp 8 x pp 16"):
        read_job(script, "train_gpt3_175b_distributed.sh")  # as shipped: one node
    job = read_job(script, "train_gpt3_175b_distributed.sh", devices=1024)
    assert job.layout == cluster.Layout(dp=8, tp=8, pp=16, schedule="1f1b", microbatch_size=1, sp=False)
    assert (job.workload.global_batch, job.workload.seq_len, job.workload.dtype) == (1536, 2048, "fp16")
    assert job.model == "hf:gpt2" and "n_layer=96" in job.model_sets and "n_embd=12288" in job.model_sets
    assert "--lr" in job.unpriced and "--data-path" in job.unpriced
    assert job.workload.train_tokens == 500000 * 1536 * 2048


def test_a_scripts_variables_arrays_and_ifs_expand_as_bash_would():
    launch = expand_script(
        'GPUS=8\nNODES=${NODES:-2}\nWORLD=$(($GPUS*$NODES))\nA=(--x 1 "--y 2")\nA+=(--z)\n'
        'if [[ "$GPUS" == "8" ]] || [[ -z "$NOPE" ]]; then\n  B=(--yes)\nelse\n  B=(--no)\nfi\n'
        'if [ ! -f "$SCRIPT" ]; then\n  exit 1\nfi\n'
        "torchrun --nproc_per_node $GPUS --nnodes $NODES run.py ${A[@]} ${B[@]} --w $WORLD  # done\n"
    )
    assert launch.words == [
        "torchrun",
        "--nproc_per_node",
        "8",
        "--nnodes",
        "2",
        "run.py",
        "--x",
        "1",
        "--y",
        "2",
        "--z",
        "--yes",
        "--w",
        "16",
    ]
    assert expand_script("X=$((2**99**99))\nrun --x $X").words[-1] == "0"  # no power is computed


def test_megatron_arguments_a_letter_off_are_unknown_and_bad_values_refused():
    line = "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --tensor-model-paralel-size 2 --seq-length 128"
    assert read_job(line).unknown == ("--tensor-model-paralel-size (did you mean --tensor-model-parallel-size?)",)
    with pytest.raises(JobError, match="--micro-batch-size takes a whole number"):
        read_job(line + " --micro-batch-size two")
    with pytest.raises(JobError, match="--seq-length is missing"):
        read_job("torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --bf16")


def test_a_megatron_llama_shape_is_the_preset():
    layers, hidden, ffn, heads, groups, vocab = PRESET_SIZES["llama-3-70b"]
    line = (
        f"torchrun --nnodes 8 --nproc_per_node 8 pretrain_gpt.py --num-layers {layers} --hidden-size {hidden} "
        f"--ffn-hidden-size {ffn} --num-attention-heads {heads} --group-query-attention --num-query-groups {groups} "
        f"--swiglu --seq-length 8192 --tensor-model-parallel-size 8 --sequence-parallel --bf16 --fp8-format hybrid"
    )
    job = read_job(line)
    assert job.model == "hf:llama-3-70b" and job.workload.dtype == "fp8" and job.layout.dp == 8 and job.layout.sp


def test_deepspeeds_batch_rule_and_zero_section_are_deepspeeds():
    job = read_job(
        '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,'
        ' "bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},'
        ' "optimizer": {"type": "AdamW"}, "zero_optimisation": {}}',
        "ds.json",
        seq_len=2048,
    )
    assert job.layout == cluster.Layout(dp=8, microbatch_size=2, zero=3, offload=True)
    assert job.unknown == ("zero_optimisation (did you mean zero_optimization?)",) and "optimizer" in job.unpriced
    with pytest.raises(JobError, match="stagee"):
        read_job('{"train_batch_size": 8, "zero_optimization": {"stagee": 2}}', "ds.json", devices=8, seq_len=8)
    with pytest.raises(JobError, match="Trainer fills in"):
        read_job('{"train_batch_size": "auto"}', "ds.json", seq_len=8)
    with pytest.raises(JobError, match="--seq-len"):
        read_job('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}')


def test_vllm_and_sglang_lines_read_their_flags():
    job = read_job(
        "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8 --max-num-seqs 64 "
        "--gpu-memory-utilization 0.95 --quantization fp8 --max-model-len 4096 --port 8000"
    )
    assert job.format == "vllm" and job.model == "hf:llama-3-70b" and job.layout.tp == 8
    assert (job.workload.global_batch, job.workload.dtype, job.memory_utilization) == (64, "fp8", 0.95)
    assert "--port" in job.unpriced
    sg = read_job("python -m sglang.launch_server --model-path mistralai/Mistral-7B-v0.1 --tp 2 --enable-torch-compile")
    assert sg.format == "sglang" and sg.model == "hf:mistral-7b" and sg.layout.tp == 2
    with pytest.raises(JobError, match="--tensor-parallel-size takes a whole number"):
        read_job("vllm serve m --tensor-parallel-size x")


def test_torchtitans_shipped_405b_config_reads_float8_and_compile():
    job = read_job((FIXTURES / "torchtitan_llama3_405b_128xh100.toml").read_text(), "llama3_405b.toml")
    assert job.model == "hf:llama-3.1-405b" and job.devices == 128
    assert job.layout == cluster.Layout(dp=16, tp=8, zero=3, recompute="full", microbatch_size=2)
    assert job.workload.dtype == "fp8" and job.engine == "graphs"  # float8 converter, torch.compile
    assert "parallelism.enable_async_tensor_parallel" not in job.unknown


def test_deepspeeds_autotp_example_names_its_auto_batch_and_reads_once_filled():
    text = (FIXTURES / "deepspeed_autotp_zero2.json").read_text()
    with pytest.raises(JobError, match='train_batch_size is "auto", which the Hugging Face Trainer fills'):
        read_job(text, "ds_config.json", devices=8, seq_len=2048)
    import json

    filled = {
        **json.loads(text),
        "train_batch_size": 16,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
    }
    job = read_job(json.dumps(filled), "ds_config.json", devices=8, seq_len=2048)
    assert job.layout == cluster.Layout(dp=2, tp=4, microbatch_size=2, zero=2, sp=False) and job.devices == 8
    assert job.workload.dtype == "bf16" and "comment" not in job.unknown


def test_a_torchtitan_03_command_line_reads_tyros_forms():
    job = read_job(
        "--module llama3 --config llama3_70b --parallelism.tensor-parallel-degree 8 "
        "--parallelism.no-enable-sequence-parallel --parallelism.data_parallel_shard_degree 4 "
        "activation_checkpoint:full --training.local_batch_size 2 --training.sequence_length 4096"
    )
    assert job.format == "torchtitan-args" and job.model == "hf:llama-3-70b"
    assert job.layout == cluster.Layout(dp=4, tp=8, zero=3, recompute="full", microbatch_size=2, sp=False)
    assert job.unknown == ("training.sequence_length (did you mean seq_len?)",)


def test_a_device_map_given_as_a_job_says_how_it_is_reviewed():
    with pytest.raises(JobError, match="is an Accelerate device map, not a job config: review it with"):
        read_job('{"model.layers": 0, "lm_head": 1}', "map.json")
