"""Every interpreter the library starts, torch-free plumbing: the time-limited worker for
single-process jobs (:mod:`.worker`: solvers, joint traces), the launcher of torch.distributed
ranks as torchrun starts them (:mod:`.launch`, :mod:`._rank`), the frames on their pipes
(:mod:`.frames`) and the one statistic of timed steps (:mod:`.timing`). Importing it imports no
torch; algorithms depend on it, never on :mod:`partitioner.runtime`."""
