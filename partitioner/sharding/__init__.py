"""Variable sharding (autodist's ``VariablePartitioner``) run as DTensor tensor parallelism:
partition lists and shard shapes (:mod:`.specs`), a spec as tensor-parallel styles with its
collectives and a suggestion (:mod:`.tensor_parallel`), and its real run (:mod:`.tp_run`).

    from partitioner import sharding
    sharding.parse_partition_str("1,4")
"""

from __future__ import annotations

from partitioner.sharding.specs import (
    device_memory,
    format_partition_list,
    parameter_shapes,
    parse_partition_str,
    shard_axis,
    shard_shapes,
    validate_partition_list,
)

__all__ = [
    "parse_partition_str",
    "format_partition_list",
    "validate_partition_list",
    "shard_axis",
    "shard_shapes",
    "parameter_shapes",
    "device_memory",
]
