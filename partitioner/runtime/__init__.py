"""Torch at the output edge: apply a plan to the traced model (:mod:`.splitting`,
``partitioner.split``) and run it on one process per device with torch.distributed (:mod:`.execute`
and :mod:`.walk`, ``partitioner.run``). The processes these start come from
:mod:`partitioner.processes`; measuring a machine's profile is :mod:`partitioner.calibration`'s
(``runtime.calibrate`` and ``runtime.calibrate_gpu`` stay as its old import paths). Importing this
package imports no torch."""
