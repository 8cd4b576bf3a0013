"""One rank of a launched run, in a fresh interpreter: ``python -m partitioner.processes._rank``.

Reads ``(entry, args, backend, timeout_s)`` from stdin (one frame), joins the process group from
the torchrun environment the launcher set, runs ``entry(rank, world_size, *args)`` and writes
:class:`~partitioner.processes.frames.Message` frames to the real stdout; anything the entry prints
goes to stderr. When the launcher goes away (its end of stdin closes) the rank exits at once."""

from __future__ import annotations

import datetime
import os
import sys
import threading
import traceback
from typing import IO

from partitioner.processes.frames import Message, exit_with_parent, quiet_server_loggers, read_frame, send, set_channel


def _exit_with_parent(stdin: IO[bytes]) -> None:
    stdin.read()  # returns when the launcher closes its end, or dies
    os._exit(1)


def main() -> None:
    exit_with_parent()
    # The channel lives in the importable _frames module: this one runs as __main__, so an entry
    # function's report_progress would find another copy of it.
    set_channel(sys.stdout.buffer)
    sys.stdout = sys.stderr  # prints stay off the result channel
    rank = int(os.environ["RANK"])
    try:
        entry, args, backend, timeout_s = read_frame(sys.stdin.buffer)
        quiet_server_loggers()
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher as data
        send(Message("error", rank, f"could not read the job: {type(exc).__name__}: {exc}"))
        return
    threading.Thread(target=_exit_with_parent, args=(sys.stdin.buffer,), daemon=True).start()
    import torch
    import torch.distributed as dist

    world_size = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=max(5.0, timeout_s))
        )
        try:
            value = entry(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        send(Message("ok", rank, value))
    except BaseException as exc:  # noqa: BLE001 - sent to the launcher as data, with where it happened
        last = traceback.format_exception(type(exc), exc, exc.__traceback__)
        where = "".join(last[-3:]).strip()
        send(Message("error", rank, f"{type(exc).__name__}: {exc}\n{where}"))


if __name__ == "__main__":
    main()
