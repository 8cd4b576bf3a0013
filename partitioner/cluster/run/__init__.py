"""A cluster layout run for real on torch.distributed, beside its prediction: the dp x tp run
(:mod:`.compose`; its tensor-parallel plans in :mod:`.tp_plans`, what it can run in
:mod:`.runnable`), the pipelined pp x dp x tp run (:mod:`.pipelined`, :mod:`.piped`), what a run
reports (:mod:`.records`), the prediction on a measured profile split as the run is split
(:mod:`.predict`) and the two together (:mod:`.checked`). Torch loads inside the ranks and the
run functions, so importing this package imports no torch; the planner
(:mod:`partitioner.cluster`) never imports it."""
