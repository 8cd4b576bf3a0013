"""Entry functions for the launcher's failure tests: a rank that raises, one that hangs, one that
exits without a word (module-level, so spawned processes can import them); a model whose
forward dies on one rank; and the live child processes of this one, to check none is left."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

__all__ = [
    "raise_on",
    "sleep_on",
    "exit_on",
    "chatty_sleep_on",
    "all_reduce_rank",
    "die_on_rank",
    "DiesOnRank",
    "child_pids",
]


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


@torch.fx.wrap
def die_on_rank(x: torch.Tensor, rank: int) -> torch.Tensor:
    """``x``, except in the process whose ``RANK`` is ``rank``, which exits at once (a crash)."""
    if int(os.environ.get("RANK", "-1")) == rank:
        os._exit(7)
    return x


class DiesOnRank(torch.nn.Module):
    """Two linear layers with :func:`die_on_rank` between them (one node of the traced graph)."""

    def __init__(self, rank: int = 1) -> None:
        super().__init__()
        self.rank = rank
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(die_on_rank(torch.relu(self.a(x)), self.rank))


def child_pids() -> set[int]:
    """Live child processes of this process (multiprocessing's one shared resource tracker aside)."""
    me = str(os.getpid())
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if fields.get("PPid", "").strip() == me and b"resource_tracker" not in cmdline:
            found.add(int(status.parent.name))
    return found


def chatty_sleep_on(rank: int, world_size: int, seconds: float) -> int:
    """Reports progress every few milliseconds while it sleeps: the launcher's deadline must hold."""
    from partitioner.processes.launch import report_progress

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        report_progress("still here")
        time.sleep(0.005)
    return rank
