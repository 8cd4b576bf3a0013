"""Training state, the one table: the tensors an optimizer keeps per parameter, and the bytes a
parameter costs in training (the weight, its gradient, the optimizer's state). Every technique
(pipeline stages, training memory, sharding, the cluster planner) reads it from here."""

from __future__ import annotations

from partitioner.errors import PartitionError

__all__ = ["OPTIMIZER_STATE", "OPTIMIZERS", "check_optimizer", "training_copies", "model_state_bytes"]

# State tensors per parameter, each the parameter's size: SGD with momentum keeps the momentum;
# Adam keeps the first and second moments (torch.optim.SGD / torch.optim.Adam).
OPTIMIZER_STATE = {"none": 0, "sgd": 1, "adam": 2}
OPTIMIZERS = tuple(OPTIMIZER_STATE)


def check_optimizer(optimizer: str | None) -> None:
    if optimizer is not None and optimizer not in OPTIMIZER_STATE:
        raise PartitionError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZER_STATE)}")


def training_copies(optimizer: str | None) -> int:
    """Copies of a parameter's bytes held per device: 1 for inference (``None``), else the weight,
    its gradient and the optimizer's state tensors (SGD 3, Adam 4)."""
    check_optimizer(optimizer)
    return 1 if optimizer is None else 2 + OPTIMIZER_STATE[optimizer]


def model_state_bytes(optimizer: str | None, element_bytes: int) -> tuple[int, int, int]:
    """Bytes per parameter of (weights, gradients, optimizer state) in training with weights of
    ``element_bytes``: mixed precision (2-byte weights) keeps an fp32 master copy and fp32 state
    tensors, the ZeRO paper's 2 + 2 + K with K = 4 + 4 x states (Adam: K = 12; Rajbhandari et al.
    2020, section 3.1); full precision keeps the weights, gradients and state in their own type."""
    check_optimizer(optimizer)
    states = OPTIMIZER_STATE[optimizer or "none"]
    if element_bytes < 4:
        return element_bytes, element_bytes, 4 + 4 * states
    return element_bytes, element_bytes, element_bytes * states
