"""Torch at the output edge: apply a plan to the traced model (:mod:`.splitting`,
``partitioner.split``), run it on one process per device with torch.distributed (:mod:`.execute`,
``partitioner.run``) and measure this machine's device profile (:mod:`.calibrate`,
:mod:`.calibrate_gpu`). The processes these start come from :mod:`partitioner.processes`.
Importing this package imports no torch."""
