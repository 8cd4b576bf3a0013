"""Megatron-LM's launch (its example scripts, or one ``torchrun ... pretrain_gpt.py --args`` line)
read for review, as the layout and workload the planner prices.

Megatron-LM's argument parser (``megatron/training/arguments.py``) is not a package one can
install (megatron-core ships without it), so this reads a documented subset: the arguments in
:data:`PRICED`, with Megatron-LM's defaults; every other argument is named as not priced (a
learning rate, a data path), and one a letter or two from a priced one is named as unknown with
that name. Megatron's rules, as its ``validate_args`` applies them: the data-parallel degree is the
world size over tensor x pipeline x context parallelism; the global batch defaults to the
microbatch times the data-parallel degree and must be a multiple of it; sequence parallelism is
off unless ``--sequence-parallel``; ``--num-layers-per-virtual-pipeline-stage`` or
``--num-virtual-stages-per-pipeline-rank`` interleave the 1F1B schedule."""

from __future__ import annotations

import difflib
from typing import Any

from partitioner.review.job import Job, JobError, Taken
from partitioner.review.models import from_sizes
from partitioner.review.shell import split_launcher
from partitioner.units import HALF_FLOATS

__all__ = ["read_megatron", "PRICED", "FLAGS"]

# Arguments that take a whole number, with Megatron-LM's default (None: required or derived).
PRICED: dict[str, int | None] = {
    "tensor-model-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
    "context-parallel-size": 1,
    "expert-model-parallel-size": 1,
    "num-layers-per-virtual-pipeline-stage": None,
    "num-virtual-stages-per-pipeline-rank": None,
    "micro-batch-size": 1,
    "global-batch-size": None,
    "seq-length": None,
    "recompute-num-layers": 1,
    "num-distributed-optimizer-instances": 1,
    "train-iters": None,
    "train-samples": None,
    "num-layers": None,
    "hidden-size": None,
    "ffn-hidden-size": None,
    "num-attention-heads": None,
    "num-query-groups": None,
    "max-position-embeddings": None,
    "vocab-size": None,
}
# Arguments that take a word.
WORDS = ("recompute-granularity", "recompute-method", "fp8-format", "optimizer", "data-parallel-sharding-strategy")
# Arguments that are switches.
FLAGS = (
    "sequence-parallel",
    *HALF_FLOATS,
    "use-distributed-optimizer",
    "optimizer-cpu-offload",
    "swiglu",
    "group-query-attention",
    "recompute-activations",
    "use-torch-fsdp2",
    "use-megatron-fsdp",
)


def _arguments(words: list[str], where: str) -> tuple[dict[str, Any], list[str]]:
    """The arguments of Megatron-LM's command line: {name: value (True for a switch)}, and the
    names of the other arguments, in order."""
    found: dict[str, Any] = {}
    others: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        name = name.replace("_", "-")
        takes = name in PRICED or name in WORDS
        if takes and not eq:
            if i >= len(words) or (words[i].startswith("--")):
                raise JobError(f"{where}: --{name} takes a value and none follows; write --{name} N")
            value = words[i]
            i += 1
        if name in PRICED:
            try:
                found[name] = int(value)
            except ValueError:
                raise JobError(f"{where}: --{name} takes a whole number (got {value!r})") from None
            if found[name] < 1:
                raise JobError(f"{where}: --{name} must be at least 1 (got {value})")
        elif name in WORDS:
            found[name] = value
        elif name in FLAGS:
            found[name] = True
        else:
            others.append(name)
            while not eq and i < len(words) and not words[i].startswith("--"):
                i += 1  # its values
    return found, others


def read_megatron(text_words: list[str], where: str = "Megatron-LM launch", devices: int | None = None) -> Job:
    """The job of a Megatron-LM launch line's words (:func:`partitioner.review.shell.expand_script`
    reads a script into them). ``devices`` is the world size where the launch line does not say
    (torchrun's ``--nnodes`` x ``--nproc_per_node``)."""
    launcher, program, words = split_launcher(text_words)
    if not program:
        words = text_words
    args, others = _arguments(words, where)
    t = Taken()
    known = [*PRICED, *WORDS, *FLAGS]
    for name in others:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            t.unknown.append(f"--{name} (did you mean --{close[0]}?)")
        else:
            t.unpriced.append(f"--{name}")

    def arg(name: str) -> tuple[Any, str]:
        if name in args:
            return args[name], f"--{name} {args[name]}" if args[name] is not True else f"--{name}"
        return PRICED.get(name), f"Megatron-LM's default --{name} {PRICED.get(name)}"

    world, w_src = _world(launcher, devices, where)
    tp, tp_src = arg("tensor-model-parallel-size")
    pp, pp_src = arg("pipeline-model-parallel-size")
    cp, cp_src = arg("context-parallel-size")
    ep, ep_src = arg("expert-model-parallel-size")
    for name, value, src in (("tp", tp, tp_src), ("pp", pp, pp_src), ("cp", cp, cp_src), ("ep", ep, ep_src)):
        t.take(name, value, src)
    if world % (tp * pp * cp):
        raise JobError(
            f"{where}: the world of {world} GPUs ({w_src}) is not a multiple of tp {tp} x pp {pp} x cp {cp}; "
            "change the degrees or the GPU count"
        )
    dp = world // (tp * pp * cp)
    t.take("dp", dp, f"{world} GPUs ({w_src}) / (tp {tp} x pp {pp} x cp {cp})")
    _model(args, t)
    _batch(args, arg, t, where, dp)
    _schedule(args, arg, t, where, pp)
    _memory(args, arg, t, dp * cp)
    return t.job(
        "megatron",
        where,
        model=t.get("model"),
        model_sets=tuple(t.get("model_sets", ())),
        devices=world,
        devices_per_node=int(launcher["nproc_per_node"]) if launcher.get("nproc_per_node", "").isdigit() else None,
        reader="this project's documented subset of Megatron-LM's arguments",
    )


def _world(launcher: dict[str, str], devices: int | None, where: str) -> tuple[int, str]:
    if devices:
        return devices, "the GPUs given (--devices)"
    nodes, per_node = launcher.get("nnodes", "1"), launcher.get("nproc_per_node", "")
    if per_node.isdigit() and nodes.split(":")[-1].isdigit():
        n = int(nodes.split(":")[-1])
        return n * int(per_node), f"torchrun --nnodes {nodes} x --nproc_per_node {per_node}"
    raise JobError(
        f"{where}: the launch line does not say how many GPUs it runs on (torchrun's --nnodes and "
        "--nproc_per_node); give --devices N"
    )


def _model(args: dict[str, Any], t: Taken) -> None:
    sizes = {k.replace("-", "_"): v for k, v in args.items() if isinstance(v, int) and not isinstance(v, bool)}
    if "num_query_groups" in sizes and not args.get("group-query-attention"):
        sizes.pop("num_query_groups")  # Megatron reads the groups only with --group-query-attention
    found = from_sizes(sizes, swiglu=bool(args.get("swiglu")))
    if found is not None:
        spec, sets = found
        shape = ", ".join(f"--{k} {args[k]}" for k in ("num-layers", "hidden-size", "num-attention-heads") if k in args)
        t.take("model", spec, f"the model sizes ({shape}{', --swiglu' if args.get('swiglu') else ''})")
        if sets:
            t.take("model_sets", sets, "the sizes no preset has, on that architecture")


def _batch(args: dict[str, Any], arg: Any, t: Taken, where: str, dp: int) -> None:
    mb, mb_src = arg("micro-batch-size")
    t.take("microbatch_size", mb, mb_src)
    if "global-batch-size" in args:
        batch, b_src = args["global-batch-size"], f"--global-batch-size {args['global-batch-size']}"
        if batch % (mb * dp):
            raise JobError(
                f"{where}: --global-batch-size {batch} is not a multiple of --micro-batch-size {mb} x the "
                f"data-parallel degree {dp}; change one of them"
            )
    else:
        batch, b_src = mb * dp, f"Megatron-LM's default: --micro-batch-size {mb} x data-parallel {dp}"
    t.take("global_batch", batch, b_src)
    if "seq-length" not in args:
        raise JobError(f"{where}: --seq-length is missing (Megatron-LM requires it); add --seq-length N")
    seq = args["seq-length"]
    t.take("seq_len", seq, f"--seq-length {seq}")
    if "train-iters" in args:
        t.take("train_tokens", float(args["train-iters"] * batch * seq), f"--train-iters {args['train-iters']}")
    elif "train-samples" in args:
        t.take("train_tokens", float(args["train-samples"] * seq), f"--train-samples {args['train-samples']}")
    if args.get("fp8-format"):
        t.take("dtype", "fp8", f"--fp8-format {args['fp8-format']} (Transformer Engine's FP8 products)")
    elif args.get("bf16") or args.get("fp16"):
        name = "bf16" if args.get("bf16") else "fp16"
        t.take("dtype", name, f"--{name}")
    else:
        t.take("dtype", "fp32", "neither --bf16 nor --fp16: fp32")
    optimizer = str(args.get("optimizer", "adam"))
    source = f"--optimizer {optimizer}" if "optimizer" in args else "Megatron-LM's default --optimizer adam"
    t.take("optimizer", "sgd" if optimizer == "sgd" else "adam", source)


def _schedule(args: dict[str, Any], arg: Any, t: Taken, where: str, pp: int) -> None:
    if pp == 1:
        return
    virtual = args.get("num-virtual-stages-per-pipeline-rank")
    v_src = f"--num-virtual-stages-per-pipeline-rank {virtual}"
    if virtual is None and "num-layers-per-virtual-pipeline-stage" in args:
        layers = args.get("num-layers")
        per_stage = args["num-layers-per-virtual-pipeline-stage"]
        if not layers or layers % (pp * per_stage):
            raise JobError(
                f"{where}: --num-layers-per-virtual-pipeline-stage {per_stage} needs --num-layers, a multiple "
                f"of it x --pipeline-model-parallel-size {pp}"
            )
        virtual, v_src = layers // (pp * per_stage), f"--num-layers {layers} / (pp {pp} x {per_stage} a stage)"
    if virtual and virtual > 1:
        t.take("schedule", "interleaved_1f1b", f"{v_src}: Megatron-LM's interleaved 1F1B")
        t.take("virtual", virtual, v_src)
    else:
        t.take("schedule", "1f1b", f"--pipeline-model-parallel-size {pp}: Megatron-LM's 1F1B")


def _memory(args: dict[str, Any], arg: Any, t: Taken, group: int) -> None:
    t.take(
        "sp",
        bool(args.get("sequence-parallel")) or t.get("tp") == 1,
        "--sequence-parallel" if args.get("sequence-parallel") else "no --sequence-parallel: off",
    )
    fsdp = args.get("use-torch-fsdp2") or args.get("use-megatron-fsdp")
    if fsdp:
        strategy = str(args.get("data-parallel-sharding-strategy", "optim_grads_params"))
        zero = {"optim": 1, "optim_grads": 2}.get(strategy, 3)
        t.take(
            "zero",
            zero,
            f"{'--use-torch-fsdp2' if args.get('use-torch-fsdp2') else '--use-megatron-fsdp'} ({strategy})",
        )
    elif args.get("use-distributed-optimizer"):
        t.take("zero", 1, "--use-distributed-optimizer (the optimizer state sharded: ZeRO-1)")
        instances, i_src = arg("num-distributed-optimizer-instances")
        if instances > 1 and group % instances == 0:
            t.take("shard", group // instances, i_src)
    else:
        t.take("zero", 0, "no --use-distributed-optimizer: every data-parallel rank holds the whole state")
    if args.get("optimizer-cpu-offload"):
        t.take("offload", True, "--optimizer-cpu-offload")
    granularity = args.get("recompute-granularity")
    if args.get("recompute-activations") and not granularity:
        granularity = "selective"
    if granularity == "selective":
        t.take("recompute", "selective", "--recompute-granularity selective (the attention core)")
    elif granularity == "full":
        method = args.get("recompute-method", "uniform")
        count, c_src = arg("recompute-num-layers")
        if method == "block":
            t.take("recompute", f"layers-{count}", f"--recompute-granularity full --recompute-method block, {c_src}")
        else:
            t.take("recompute", "full", f"--recompute-granularity full --recompute-method {method}, {c_src}")
    else:
        t.take("recompute", "none", "no --recompute-granularity: nothing recomputed")
