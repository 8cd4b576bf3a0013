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
    import deepspeed
    from deepspeed.runtime.config import DeepSpeedConfig
    from partitioner import cluster
    from partitioner.interop.engines import to_deepspeed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="gloo")  # DeepSpeedConfig asks its rank first

    class Groups:  # the data-parallel degree, as Megatron's mpu tells it
        def __init__(self, dp): self.dp = dp
        def get_data_parallel_world_size(self): return self.dp
        def get_data_parallel_rank(self): return 0
        def get_model_parallel_world_size(self): return 1
        def get_model_parallel_rank(self): return 0

    out = []
    for dp, mb, zero, rc, ep, batch, bf16 in json.loads(sys.argv[2]):
        lay = cluster.Layout(dp=dp, microbatch_size=mb, zero=zero, recompute=rc, ep=ep)
        work = cluster.Workload(global_batch=batch, seq_len=128, element_bytes=2 if bf16 else 4)
        config = to_deepspeed(lay, work)
        ds = DeepSpeedConfig(config, mpu=Groups(dp))
        out.append([ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps,
                    ds.zero_optimization_stage, bool(ds.bfloat16_config.enabled)])
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

CASES = [(4, 2, 3, "full", 1, 32, True), (8, 1, 0, "none", 1, 64, False), (2, 4, 1, "none", 1, 64, True),
         (4, 1, 2, "min-cut-0.5", 2, 16, True)]


@pytest.mark.slow
def test_deepspeed_reads_the_exported_configs_as_meant():
    from partitioner.runtime.launch import free_port

    done = subprocess.run([sys.executable, "-c", READER, str(free_port()), json.dumps(CASES)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    *parsed, bad = json.loads(done.stdout.strip().splitlines()[-1])
    for (dp, mb, zero, _, _, batch, bf16), (train, micro, accumulate, stage, bf) in zip(CASES, parsed):
        assert (train, micro, stage, bf) == (batch, mb, zero, bf16)
        assert accumulate == batch // (dp * mb)  # DeepSpeed's rule holds: batch = micro x steps x dp
    assert "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size" in bad
