"""Training state, the one table: the optimizers (the tensors each keeps per parameter) and the
bytes a parameter costs in training (:class:`StateBytes`: the weight, its gradient, the fp32
master copy of mixed precision, the optimizer's state). Every technique (pipeline stages,
training memory, sharding, the cluster planner) and every front end reads it from here.

# NOTE: [Training state]
``optimizer`` is ``None`` for inference (the weights alone, no backward) or the name of an
optimizer in :data:`OPTIMIZERS`; ``"none"`` is training with no optimizer state (plain SGD
without momentum): the weights and their gradients, the backward counted. With mixed precision
(weights of fewer than 4 bytes) the state is kept in fp32 beside a fp32 master copy of the
weights, the ZeRO paper's 2 + 2 + K bytes a parameter with K = 4 + 4 x states (Adam: K = 12;
Rajbhandari et al. 2020, section 3.1); full precision keeps the weights, gradients and state in
their own type (torch.optim.SGD keeps the momentum, torch.optim.Adam the two moments).

# NOTE: [FP8 training state]
FP8 training casts to 1 byte inside the matrix products only: torchtitan's float8 (torchao's
``convert_to_float8_training``) keeps the module's weights in their own type and casts each to
FP8 with a scale as the product runs; Transformer Engine keeps bf16 (or fp32) parameters and its
``fp8_autocast`` quantises them per product. Weights, gradients, the fp32 master copy and the
optimizer state are therefore bf16 mixed precision's: 2 + 2 + 4 + 4 x states bytes a parameter at
an element size of 1 (:func:`state_bytes`). Inference at 1 byte holds FP8 weights (1 byte).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from partitioner.errors import PartitionError
from partitioner.units import dominant_dtype

if TYPE_CHECKING:
    from partitioner.graph import Graph

__all__ = [
    "Optimizer",
    "OPTIMIZERS",
    "StateBytes",
    "state_bytes",
    "check_optimizer",
    "optimizer_record",
    "training_copies",
    "step_bytes",
    "traced_element_bytes",
]


@dataclass(frozen=True)
class Optimizer:
    name: str  # what the CLI and the JSON say
    states: int  # state tensors per parameter, each the parameter's size
    label: str  # how a page names it
    title: str  # its name in a sentence or a short choice: "training, Adam"
    foreach_passes: int = 0  # state-sized tensors torch.optim's foreach step reads or writes (NOTE: [Optimizer step])


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer("adam", 2, "Adam (2 states)", "Adam", 21),
        Optimizer("sgd", 1, "SGD with momentum (1 state)", "SGD", 8),
        Optimizer("none", 0, "no optimizer state", "no optimizer state"),
    )
}


@dataclass(frozen=True)
class StateBytes:
    """Bytes one parameter holds on a device (NOTE: [Training state])."""

    weights: int
    gradients: int = 0
    master: int = 0  # the fp32 copy of the weights that mixed precision steps
    optimizer: int = 0  # the optimizer's state tensors

    @property
    def state(self) -> int:
        """What the optimizer step owns beyond the weights and gradients (ZeRO's K)."""
        return self.master + self.optimizer

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.master + self.optimizer

    @property
    def copies(self) -> float:
        """The bytes held per byte of weights (Adam: 4 in fp32, 8 in bf16 mixed; inference 1)."""
        return self.total / self.weights

    def of(self, weight_bytes: float) -> "StateBytes":
        """The state of parameters whose weights take ``weight_bytes`` (same proportions), each
        part rounded down to a byte."""
        scale = weight_bytes / self.weights
        return StateBytes(
            int(weight_bytes), int(self.gradients * scale), int(self.master * scale), int(self.optimizer * scale)
        )


def check_optimizer(optimizer: str | None) -> None:
    """Raise :class:`PartitionError` naming the choices unless ``optimizer`` is None or known."""
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise PartitionError(
            f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)} (or none for inference)"
        )


def optimizer_record(optimizer: str | None) -> Optimizer | None:
    """The record of ``optimizer`` (None for inference); raises on an unknown name."""
    check_optimizer(optimizer)
    return None if optimizer is None else OPTIMIZERS[optimizer]


def state_bytes(optimizer: str | None, element_bytes: int = 4) -> StateBytes:
    """Bytes per parameter in training with ``optimizer`` and weights of ``element_bytes``
    (NOTE: [Training state]; 1 byte is FP8 training, NOTE: [FP8 training state]); the weights
    alone for inference (``None``). O(1)."""
    record = optimizer_record(optimizer)
    if element_bytes < 1:
        raise PartitionError(f"element_bytes must be at least 1 (got {element_bytes})")
    if record is None:
        return StateBytes(element_bytes)
    if element_bytes == 1:  # FP8 training: bf16 weights and gradients (NOTE: [FP8 training state])
        return StateBytes(2, 2, 4, 4 * record.states)
    if element_bytes < 4:
        return StateBytes(element_bytes, element_bytes, 4, 4 * record.states)
    return StateBytes(element_bytes, element_bytes, 0, element_bytes * record.states)


def step_bytes(optimizer: str | None, element_bytes: int = 4, foreach: bool = True) -> float:
    """Bytes one parameter's optimizer step moves (NOTE: [Optimizer step]); 0 for inference and
    for "none". O(1).

    # NOTE: [Optimizer step]
    A fused step (``fused=True``, or a compiled one: the "graphs" engine) reads the gradient,
    reads and writes every state tensor once and, with mixed precision, writes the working copy of
    the weight from the master: 2 + 2 x 12 + 4 + 2 = 32 bytes a parameter for Adam in bf16.
    Eager PyTorch's default step on a GPU is the ``foreach`` one: one kernel per elementwise op
    over all the tensors, each reading every tensor list it is given and writing one
    (:attr:`Optimizer.foreach_passes`, state-sized tensors a parameter). torch.optim.AdamW runs 8:
    mul (decay), lerp, mul, addcmul (the gradient twice), sqrt, div, add, addcdiv: 2 + 3 + 2 + 4
    + 2 + 2 + 2 + 4 = 21 passes of the fp32 state; SGD with momentum 3 (mul, add, add): 8. The
    tests count them as torch dispatches them. Mixed precision adds the copies of the gradient
    into the master's type and of the master back into the weight (2 + 4 + 4 + 2 bytes). Measured
    on an H100 (torch 2.11, Llama-3-8B's 4-layer config, 1.92 billion parameters): AdamW's step
    57.3 ms and the two copies 8.6 ms, 96 bytes a parameter at 2.80 TB/s."""
    record = optimizer_record(optimizer)
    if record is None or record.states == 0:
        return 0.0
    held = state_bytes(optimizer, element_bytes)
    if not foreach:
        return float(held.gradients + 2 * held.state + held.master + (held.weights if held.master else 0))
    state_element = 4 if held.master else element_bytes
    copies = (held.gradients + state_element + state_element + held.weights) if held.master else 0
    return float(record.foreach_passes * state_element + copies)


def training_copies(optimizer: str | None, element_bytes: int = 4) -> float:
    """Bytes held per byte of weights: 1 for inference (``None``), 2 for ``"none"`` (weights and
    gradients), SGD 3 and Adam 4 in full precision (:attr:`StateBytes.copies`)."""
    return state_bytes(optimizer, element_bytes).copies


def traced_element_bytes(graph: Graph) -> int:
    """Bytes of one element of the model as traced: its nodes' most frequent floating dtype (4 when
    none is known). Pipeline stages, training memory and the cluster profile all read it. O(N)."""
    return dominant_dtype(nd.dtype for nd in graph.nodes).bytes
