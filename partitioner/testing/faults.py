"""Entry functions for the launcher's failure tests: a rank that raises, one that hangs, one that
exits without a word (module-level, so spawned processes can import them)."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

__all__ = ["raise_on", "sleep_on", "exit_on", "all_reduce_rank"]


def all_reduce_rank(rank: int, world_size: int) -> int:
    t = torch.tensor([rank])
    dist.all_reduce(t)
    return int(t.item())


def raise_on(rank: int, world_size: int, bad: int) -> int:
    if rank == bad:
        raise ValueError(f"injected failure on rank {rank}")
    return all_reduce_rank(rank, world_size)


def sleep_on(rank: int, world_size: int, bad: int, seconds: float) -> int:
    if rank == bad:
        time.sleep(seconds)
    return rank


def exit_on(rank: int, world_size: int, bad: int) -> int:
    if rank == bad:
        os._exit(7)
    return rank
