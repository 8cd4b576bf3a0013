"""The DeepSpeed config the cluster planner exports, read by DeepSpeed's own ``DeepSpeedConfig``
(its batch rule, ZeRO stage and precision), with the data-parallel degree given the way
Megatron-style engines give it (an ``mpu``); a config that breaks the batch rule is refused by it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

READER = textwrap.dedent("""
    import json, os, sys
    import importlib
    import deepspeed
    from deepspeed.runtime.config import DeepSpeedConfig
    from partitioner import cluster
    from partitioner.interop.engines import to_deepspeed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    # Not its shared-memory all-reduce, a C++ op built on first use (minutes, and a lock that a killed
    # build leaves behind makes every later start wait forever): a config is read without it.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # (deepspeed.comm.torch is torch)
    deepspeed.init_distributed(dist_backend="gloo")  # DeepSpeedConfig asks its rank first

    class Groups:  # the data-parallel degree, as Megatron's mpu tells it
        def __init__(self, dp): self.dp = dp
        def get_data_parallel_world_size(self): return self.dp
        def get_data_parallel_rank(self): return 0
        def get_model_parallel_world_size(self): return 1
        def get_model_parallel_rank(self): return 0

    out = []
    for dp, mb, zero, rc, ep, batch, bf16, offload, shard in json.loads(sys.argv[2]):
        lay = cluster.Layout(dp=dp, microbatch_size=mb, zero=zero, recompute=rc, ep=ep, offload=offload, shard=shard)
        work = cluster.Workload(global_batch=batch, seq_len=128, element_bytes=2 if bf16 else 4)
        config = to_deepspeed(lay, work)
        ds = DeepSpeedConfig(config, mpu=Groups(dp))
        out.append([ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps,
                    ds.zero_optimization_stage, bool(ds.bfloat16_config.enabled),
                    str(ds.zero_config.offload_optimizer.device) if ds.zero_config.offload_optimizer else "none",
                    ds.zero_config.zero_hpz_partition_size])
    bad = to_deepspeed(cluster.Layout(dp=4, microbatch_size=2), cluster.Workload(global_batch=32))
    bad["gradient_accumulation_steps"] += 1
    try:
        DeepSpeedConfig(bad, mpu=Groups(4))
        out.append("accepted")
    except AssertionError as exc:
        out.append(str(exc))
    print(json.dumps(out))
    deepspeed.comm.destroy_process_group()
""")

CASES = [
    (4, 2, 3, "full", 1, 32, True, False, 0),
    (8, 1, 0, "none", 1, 64, False, False, 0),
    (2, 4, 1, "none", 1, 64, True, False, 0),
    (4, 1, 2, "min-cut-0.5", 2, 16, True, False, 0),
    (8, 1, 2, "none", 1, 64, True, True, 0),
    (8, 1, 3, "none", 1, 64, True, True, 4),
]


@pytest.mark.slow
def test_deepspeed_reads_the_exported_configs_as_meant():
    from partitioner.processes.launch import free_port

    done = subprocess.run(
        [sys.executable, "-c", READER, str(free_port()), json.dumps(CASES)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *parsed, bad = json.loads(done.stdout.strip().splitlines()[-1])
    for (dp, mb, zero, _, _, batch, bf16, offload, shard), (train, micro, accumulate, stage, bf, device, hpz) in zip(
        CASES, parsed
    ):
        assert (train, micro, stage, bf) == (batch, mb, zero, bf16)
        assert device == ("OffloadDeviceEnum.cpu" if offload else "none") or device == ("cpu" if offload else "none")
        assert hpz == (shard if shard and zero == 3 else 1)  # ZeRO++ hpZ: the secondary partition's size
        assert accumulate == batch // (dp * mb)  # DeepSpeed's rule holds: batch = micro x steps x dp
    assert "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size" in bad


# torchtitan 0.3's own readers: its config dataclasses (keyword-only, slotted: an unknown or
# misspelt field is a TypeError; __post_init__ checks values) and tyro, which parses its command
# line, with torchtitan's own parsing rules registered (ConfigManager). The job here holds the
# sections a layout sets, typed as torchtitan's Trainer.Config types them.
TITAN_READER = textwrap.dedent("""
    import dataclasses, json, sys, tomllib
    import tyro
    from torchtitan.config import CompileConfig, ConfigManager, ParallelismConfig, TrainingConfig
    from torchtitan.config.manager import custom_registry
    from torchtitan.distributed import activation_checkpoint as ac
    from partitioner import cluster
    from partitioner.interop.engines import to_torchtitan, to_torchtitan_args, toml_text

    @dataclasses.dataclass
    class Job:
        training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
        parallelism: ParallelismConfig = dataclasses.field(default_factory=ParallelismConfig)
        activation_checkpoint: ac.ActivationCheckpointingConfig = dataclasses.field(
            default_factory=ac.SelectiveAC.Config)
        compile: CompileConfig = dataclasses.field(default_factory=CompileConfig)

    ConfigManager()  # registers torchtitan's parsing rules with tyro
    CHECKPOINTS = {"none": type(None), "full": ac.FullAC.Config, "memory_budget": ac.MemoryBudgetAC.Config,
                   "selective": ac.SelectiveAC.Config}

    def fields(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)} if obj is not None else None

    out = []
    for dp, tp, pp, mb, sched, zero, rc, batch, cp, sp, shard in json.loads(sys.argv[1]):
        lay = cluster.Layout(dp=dp, tp=tp, pp=pp, microbatch_size=mb, schedule=sched, zero=zero, recompute=rc, cp=cp,
                             sp=sp, shard=shard)
        work = cluster.Workload(global_batch=batch, seq_len=2048)
        sections = tomllib.loads(toml_text(to_torchtitan(lay, work)))
        from_toml = {"parallelism": fields(ParallelismConfig(**sections["parallelism"])),
                     "training": fields(TrainingConfig(**sections["training"]))}
        job = tyro.cli(Job, args=to_torchtitan_args(lay, work), registry=custom_registry)
        mode = sections["activation_checkpoint"]["mode"]
        assert isinstance(job.activation_checkpoint, CHECKPOINTS[mode]), (mode, job.activation_checkpoint)
        out.append({"toml": from_toml, "args": {"parallelism": fields(job.parallelism),
                                                "training": fields(job.training)},
                    "budget": getattr(job.activation_checkpoint, "memory_budget", None),
                    "compile": job.compile.enable})
    print(json.dumps(out))
""")

TITAN_CASES = [
    (4, 2, 2, 2, "1f1b", 0, "full", 64, 1, True, 0),
    (8, 1, 1, 2, "none", 3, "none", 64, 1, True, 0),
    (2, 4, 1, 1, "none", 2, "min-cut-0.5", 16, 1, True, 0),
    (1, 8, 4, 1, "interleaved_1f1b", 0, "none", 32, 1, True, 0),
    (2, 8, 1, 1, "none", 3, "selective", 16, 4, False, 0),
    (8, 2, 1, 1, "none", 3, "none", 64, 2, True, 8),
    (2, 2, 4, 1, "zero_bubble", 0, "none", 64, 1, True, 0),
]


def test_torchtitan_reads_the_exported_configs_as_meant():
    done = subprocess.run(
        [sys.executable, "-c", TITAN_READER, json.dumps(TITAN_CASES)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for (dp, tp, pp, mb, sched, zero, rc, batch, cp, sp, shard), got in zip(
        TITAN_CASES, json.loads(done.stdout.splitlines()[-1])
    ):
        assert got["toml"] == got["args"]  # the TOML and the command line say the same
        par, train = got["args"]["parallelism"], got["args"]["training"]
        fsdp = shard // cp if shard else dp  # HSDP: FSDP over shard ranks (with cp), replicas across
        assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (
            (fsdp, dp // fsdp) if zero in (2, 3) else (1, dp)
        )
        assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"]) == (tp, pp)
        assert (par["context_parallel_degree"], par["enable_sequence_parallel"]) == (cp, sp)
        if zero in (2, 3) and dp > 1:  # ZeRO-3 reshards after the forward; ZeRO-2 keeps them to the backward
            assert par["fsdp_reshard_after_forward"] == ("always" if zero == 3 else "never")
        # torchtitan's batch rule: a rank's local batch, accumulated (or split into pipeline
        # microbatches) up to the global batch over the data-parallel ranks.
        assert train["global_batch_size"] == batch and train["seq_len"] == 2048
        if pp > 1:
            assert train["local_batch_size"] == batch // dp
            assert train["local_batch_size"] % par["pipeline_parallel_microbatch_size"] == 0  # Trainer.Config's rule
            assert (
                par["pipeline_parallel_schedule"]
                == {"1f1b": "1F1B", "interleaved_1f1b": "Interleaved1F1B", "zero_bubble": "InterleavedZeroBubble"}[
                    sched
                ]
            )
        else:
            assert train["local_batch_size"] == mb and batch % (mb * dp) == 0
        assert got["budget"] == (0.5 if rc == "min-cut-0.5" else None)
        assert got["compile"] == rc.startswith("min-cut")  # Trainer.Config: a memory budget needs compile


def test_megatron_arguments_carry_the_new_options():
    """Megatron-LM's arguments.py names: --context-parallel-size, --recompute-granularity
    selective, --num-virtual-stages-per-pipeline-rank, and --sequence-parallel only when it is on."""
    from partitioner import cluster
    from partitioner.interop.engines import to_megatron

    lay = cluster.Layout(
        dp=2, tp=8, pp=4, schedule="interleaved_1f1b", virtual=4, cp=2, recompute="selective", sp=False
    )
    args = to_megatron(lay, cluster.Workload(global_batch=64, seq_len=8192))
    assert args[args.index("--context-parallel-size") + 1] == "2"
    assert args[args.index("--recompute-granularity") + 1] == "selective"
    assert args[args.index("--num-virtual-stages-per-pipeline-rank") + 1] == "4"
    assert "--sequence-parallel" not in args
    assert "--sequence-parallel" in to_megatron(cluster.Layout(tp=2), cluster.Workload(global_batch=8))
