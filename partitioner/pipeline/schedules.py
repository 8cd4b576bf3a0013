"""Per-rank action lists of pipeline schedules, in torch.distributed.pipelining's order.

An action is ``(stage, kind, microbatch)`` with kind ``F`` (forward), ``B`` (full backward), ``I``
(backward for inputs) or ``W`` (backward for weights), as torch's ``_Action`` prints them.
GPipe and 1F1B are generated here (pure Python) and equal torch's lists except where torch 2.13's
own ``Schedule1F1B`` list numbers the last rank's forwards 1..m (the runtime is right; its list
is not). Interleaved 1F1B and the zero-bubble schedules come from torch's own generator
(``_schedule_visualizer.get_schedule_ops``), read once per shape.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["Action", "SCHEDULES", "actions", "stages_per_rank"]

Action = tuple[int, str, int]  # (stage index, "F" | "B" | "I" | "W", microbatch)

# Our names -> (torch's schedule name, virtual stages per rank)
SCHEDULES = {
    "gpipe": ("GPipe", 1),
    "1f1b": ("1F1B", 1),
    "interleaved_1f1b": ("Interleaved1F1B", 2),
    "zero_bubble": ("InterleavedZeroBubble", 2),
}


def stages_per_rank(schedule: str) -> int:
    return SCHEDULES[schedule][1]


def _gpipe(ranks: int, m: int, training: bool) -> list[list[Action]]:
    out = []
    for r in range(ranks):
        acts: list[Action] = [(r, "F", k) for k in range(m)]
        if training:
            acts += [(r, "B", k) for k in range(m)]
        out.append(acts)
    return out


def _one_f_one_b(ranks: int, m: int) -> list[list[Action]]:
    out = []
    for r in range(ranks):
        warmup = min(ranks - 1 - r, m)
        acts: list[Action] = [(r, "F", k) for k in range(warmup)]
        f, b = warmup, 0
        while f < m:  # steady state: one forward, one backward
            acts.append((r, "F", f))
            f += 1
            acts.append((r, "B", b))
            b += 1
        acts += [(r, "B", k) for k in range(b, m)]
        out.append(acts)
    return out


@lru_cache(maxsize=64)
def _from_torch(name: str, ranks: int, m: int, per_rank: int) -> tuple[tuple[Action, ...], ...]:
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    ops = get_schedule_ops(name, ranks, m, num_stages_per_rank=per_rank)
    kinds = {"F": "F", "B": "B", "I": "I", "W": "W"}
    out = []
    for rank_ops in ops:
        acts = []
        for a in rank_ops:
            if a is None:
                continue
            kind = str(a.computation_type)
            kind = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I",
                    "BACKWARD_WEIGHT": "W"}.get(kind.rsplit(".", 1)[-1], kinds.get(kind, ""))
            if kind and a.microbatch_index is not None:
                acts.append((int(a.stage_index), kind, int(a.microbatch_index)))
        out.append(tuple(acts))
    return tuple(out)


def actions(schedule: str, ranks: int, microbatches: int, training: bool = True) -> list[list[Action]]:
    """Each rank's actions in order. Inference (``training=False``) keeps only the forwards."""
    if schedule not in SCHEDULES:
        from partitioner.errors import PartitionError

        raise PartitionError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if schedule == "gpipe":
        return _gpipe(ranks, microbatches, training)
    if schedule == "1f1b":
        lists = _one_f_one_b(ranks, microbatches)
    else:
        name, per_rank = SCHEDULES[schedule]
        lists = [list(r) for r in _from_torch(name, ranks, microbatches, per_rank)]
    if not training:
        lists = [[a for a in acts if a[1] == "F"] for acts in lists]
    return lists
