"""Every process the library starts, and torch at the output edge: apply a plan to the traced
model (:mod:`.splitting`, ``partitioner.split``), run it on one process per device with
torch.distributed (:mod:`.execute`, ``partitioner.run``), the launcher of ranks (:mod:`.launch`),
the time-limited worker for single-process jobs (:mod:`.worker`: solvers, joint traces) and node
timings for calibration (:mod:`.calibrate`). Importing this package imports no torch."""
