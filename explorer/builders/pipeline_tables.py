"""What the Pipeline page shows besides its figures: the plan re-simulated at another microbatch
count or schedule (``partitioner.pipeline.simulator``), the microbatch sweep, the split and stage
tables, why a real run is refused, and a real run against the simulation. Pure: no Streamlit."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from explorer.builders.pipeline_figures import stage_span
from partitioner import Graph, PartitionError, format_bytes, pipeline
from partitioner.cost.training import OPTIMIZERS
from partitioner.pipeline.runner import check_runnable
from partitioner.pipeline.schedules import SCHEDULES, MicrobatchError
from partitioner.units import format_change, format_seconds, format_share, format_signed

__all__ = [
    "TRAINING",
    "SWEEP",
    "TWIN",
    "transfer_s",
    "resimulate",
    "twin_simulation",
    "microbatch_sweep",
    "example_sequences",
    "microbatch_warning",
    "splits_table",
    "stages_table",
    "why_not_runnable",
    "run_verdict",
    "run_table",
]

TRAINING: dict[str, str | None] = {"inference": None, **{f"training, {o.title}": o.name for o in OPTIMIZERS.values()}}
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128)  # microbatch counts of the step-time chart
_INTERLEAVED = [s.name for s in SCHEDULES.values() if s.interleaved]
TWIN = {a: b for a in _INTERLEAVED for b in _INTERLEAVED if a != b}  # compared in the bubble note


def transfer_s(pp: pipeline.PipelinePlan, microbatches: int) -> list[float]:
    """Each stage boundary's transfer time per microbatch with the batch cut into ``microbatches``."""
    scale = pp.microbatches / microbatches
    return [t * scale for t in pp.stage_transfer_s]


def resimulate(pp: pipeline.PipelinePlan, microbatches: int, schedule: str | None = None) -> pipeline.Simulation:
    """The plan's stages with the same batch cut into ``microbatches`` (under ``schedule``, the
    plan's own by default). Raises PartitionError for a count the schedule refuses."""
    scale = pp.microbatches / microbatches
    return pipeline.simulate(
        [f * scale for f in pp.stage_forward_s],
        microbatches,
        schedule or pp.schedule,
        backward_s=[b * scale for b in pp.stage_backward_s],
        transfer_s=transfer_s(pp, microbatches) or 0.0,
        training=pp.training is not None,
    )


def twin_simulation(pp: pipeline.PipelinePlan, microbatches: int, schedule: str) -> pipeline.Simulation | None:
    """The plan under ``schedule``'s twin (interleaved 1F1B against zero bubble), None when it has
    none or refuses the count."""
    twin = TWIN.get(schedule)
    try:
        return resimulate(pp, microbatches, twin) if twin else None
    except PartitionError:
        return None


def microbatch_sweep(
    pp: pipeline.PipelinePlan,
    counts: Sequence[int] = SWEEP,
    plan_at: Callable[[int], pipeline.PipelinePlan | None] | None = None,
) -> list[tuple[int, float, float]]:
    """(microbatches, step time s, bubble fraction) for each count the schedule takes (1f1b needs
    at least one per stage; interleaved whole rounds). With ``plan_at`` (a count -> the plan the
    library makes at it, None where it makes none), each count's own plan: what ``partition-explorer
    pipeline ... --microbatches M`` answers (NOTE: [A sweep planned at each count]); without, the
    plan's stage times scaled to the count (:func:`resimulate`)."""
    out = []
    for m in counts:
        if plan_at is not None:
            at = pp if m == pp.microbatches else plan_at(m)
            if at is not None:
                out.append((m, at.step_time_s, at.bubble_fraction))
            continue
        try:
            sim = resimulate(pp, m)
        except PartitionError:
            continue
        out.append((m, sim.step_time_s, sim.bubble_fraction))
    return out


# NOTE: [A sweep planned at each count]
# A stage's time a microbatch is not its time for the batch over the count: on a GPU type's measured
# kernel curves a quarter of the batch runs far below the card's speed, and launches cost the same
# for any size. Scaling the chosen count's stage times linearly drew 9.8 s at one microbatch where
# the command line, which plans at that count, says 290 ms (issue 56). The Pipeline page's sweep
# therefore plans each count as the command line does.


def example_sequences(graph: Graph) -> int | None:
    """The sequences (or images) in the model's example batch: its first input's first dimension,
    the one the pipeline cuts into microbatches; None without an example input."""
    inputs = graph.example_inputs or ()
    shape: tuple[int, ...] = tuple(getattr(inputs[0], "shape", ())) if inputs else ()
    return int(shape[0]) if shape else None


def microbatch_warning(sequences: int | None, microbatches: int) -> str | None:
    """Why a count above the batch's sequences compares unlike with like (issue 56), else None."""
    if sequences is None or microbatches <= sequences:
        return None
    noun = "sequence" if sequences == 1 else "sequences"
    return (
        f"The example batch holds {sequences:,} {noun}: cut into {microbatches:,} microbatches, each "
        "is a fraction of a sequence, a cut torch's schedules cannot make (they split the batch "
        "dimension), and the times below price work no pipeline would do. Choose at most "
        f"{sequences:,} microbatch{'' if sequences == 1 else 'es'}, or a larger batch in the sidebar "
        "(a Hugging Face model's Batch size), to compare like with like."
    )


def splits_table(pp: pipeline.PipelinePlan) -> pd.DataFrame:
    """This split against the simple ones people use (equal layers, by parameters)."""
    rows = [
        {
            "split": "this split (exact DP)",
            "operations per stage": str([len(s) for s in pp.stages]),
            "step time": format_seconds(pp.step_time_s),
            "against this split": "-",
        }
    ]
    for name, step, sizes in pp.baselines:
        rows.append(
            {
                "split": name,
                "operations per stage": str(list(sizes)),
                "step time": format_seconds(step),
                "against this split": format_change(step / pp.step_time_s - 1) if pp.step_time_s else "-",
            }
        )
    return pd.DataFrame(rows)


def stages_table(
    pp: pipeline.PipelinePlan, names: Mapping[int, str], caps: Sequence[int], graph: Graph
) -> pd.DataFrame:
    """One row per stage: its device (``names``: logical id -> name), span, times and memory
    against its device's capacity ``caps[stage]``, and what the device holds with its other
    stages (interleaved schedules put several on one; the column only then, and the backward only
    in training)."""
    rows = []
    held = pp.device_memory_bytes()
    for s, nodes in enumerate(pp.stages):
        rows.append(
            {
                "Stage": f"S{s}",
                "Device": names[pp.device_ids[s]],
                "Ops": len(nodes),
                "Nodes": stage_span(graph, nodes),
                "Forward": format_seconds(pp.stage_forward_s[s]),
                "Backward": format_seconds(pp.stage_backward_s[s]) if pp.training else "-",
                "Transfer out": format_seconds(pp.stage_transfer_s[s]) if s < len(pp.stage_transfer_s) else "-",
                "Memory": format_bytes(pp.stage_memory_bytes[s]),
                "Stashed": format_bytes(pp.stage_stash_bytes[s]),
                "Of device": format_share(pp.stage_memory_bytes[s], caps[s]),
                "Device holds": format_share(held[pp.device_ids[s]], caps[s]),
            }
        )
    table = pd.DataFrame(rows)
    # Columns that would say nothing are left out, so the table reads whole at 1,280 px: the
    # backward in inference, what a device holds where it holds one stage (the "Of device" share).
    if not pp.training:
        table = table.drop(columns=["Backward"])
    if len(set(pp.device_ids)) == len(pp.stages):
        table = table.drop(columns=["Device holds"])
    return table


def why_not_runnable(pp: pipeline.PipelinePlan, graph: Graph) -> str:
    """Why a real run is refused before any process starts, in the Pipeline page's words ("" when
    it can run)."""
    try:
        check_runnable(pp, graph.example_inputs or ())
    except MicrobatchError as exc:
        if exc.batch is None:
            return f"{exc} (the Microbatches box)"
        bigger = exc.microbatches * max(1, -(-exc.batch // exc.microbatches))
        return f"{exc} (sample models: batch_size={bigger} under Size knobs in the sidebar)"
    except PartitionError as exc:
        return str(exc)
    return ""


def run_verdict(result: Any) -> tuple[bool, str]:
    """(outputs and gradients equal the model's, the sentence saying so with measured against
    simulated step time) of a ``pipeline.run`` result."""
    same = result.outputs_equal and result.gradients_equal is not False
    words = "Outputs" + (" and gradients" if result.gradients_equal is not None else "")
    error = (
        (result.measured_step_s - result.simulated_step_s) / result.simulated_step_s
        if result.simulated_step_s > 0
        else float("nan")
    )
    return same, (
        f"{words} {'equal' if same else 'differ from'} the model's. Step measured "
        f"{format_seconds(result.measured_step_s)} on {result.world_size} processes (the median after a "
        f"warm-up), simulated {format_seconds(result.simulated_step_s)}: error {format_signed(error)}."
    )


def run_table(simulated_s: Sequence[float], measured_s: Sequence[float]) -> pd.DataFrame:
    """Each stage's forward per microbatch, simulated against measured, with the error."""
    return pd.DataFrame(
        {
            "stage": [f"S{s}" for s in range(len(measured_s))],
            "forward / microbatch, simulated": [format_seconds(t) for t in simulated_s],
            "forward / microbatch, measured": [format_seconds(t) for t in measured_s],
            "error": [format_signed((m - s) / s) if s > 0 else "-" for m, s in zip(measured_s, simulated_s)],
        }
    )
