"""``partition-explorer cluster``: how many devices of which kind, laid out how (pipeline x
tensor x data parallel, ZeRO, recomputation), how fast and at what cost."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from cli import cluster_report
from cli._cluster_open import checked_layout, idle_words, json_opened, open_layout
from cli.arguments import add_model_arguments, bounded, time_limit
from cli.cluster_run import run_layout
from cli.commands import COMMON_EPILOG
from cli.inputs import EXIT_FAIL, EXIT_OK, EXIT_RUN, CLIError, load_model, write_output
from partitioner import cluster
from partitioner.cost.training import OPTIMIZERS
from partitioner.errors import PartitionError
from partitioner.interop.engines import EXPORT_ENGINES, engine_file
from partitioner.units import PRECISIONS, GiB, dtype, format_bytes

if TYPE_CHECKING:
    from partitioner.cluster.layout_search import ClusterPlan

__all__ = ["register"]

# The ranges a person may give, the app's own (explorer/cluster_inputs.py's RANGES, which its widgets
# read; tests/app/test_cluster_page.py holds them equal): beyond them the search answers nothing
# useful, and a loop or a figure grows with the number.
MAX_NODES = 4096  # 32,768 devices of 8 a node: past Llama 3's 16,384 H100s (2,048 nodes)
MAX_PRICE = 1000.0  # USD per device-hour
MAX_SEQUENCES = 1 << 20  # sequences a step, and tokens a sequence
MAX_GENERATE = 1 << 16  # tokens generated per sequence
MAX_TOP = 1000  # rows of the table
MAX_HEADROOM = 64 * GiB
MAX_HOST_MEMORY = 64 * 2**40  # a node's host memory: beyond any node sold
MAX_LAYOUT_CHARS = 500  # --open's and --run's words (a layout is tens of characters)
MAX_BUDGETS = 11  # min-cut budgets measured (0, 0.1, ..., 1)


EXAMPLES = """examples:
  partition-explorer cluster hf:llama-3-8b --dtype bf16 --accelerator h100-80gb --global-batch 512 --seq-len 4096
  partition-explorer cluster hf:llama-3-70b --dtype bf16 --max-nodes 64 --export torchtitan --out titan.toml
  partition-explorer cluster gpt2_small --accelerator a100-40gb --max-nodes 1 --global-batch 64 --seq-len 1024
  partition-explorer cluster hf:mixtral-8x7b --dtype bf16 --inference --global-batch 16 --seq-len 2048 --generate 256
  partition-explorer cluster hf:llama-3-70b --dtype bf16 --max-nodes 8 --open "dp4 tp8 pp2 1f1b mb1 zero1"
  partition-explorer cluster mlp --set n_layer=4 --set hidden=32 --run "dp2 tp2 zero3"
  partition-explorer cluster gpt2_small --max-nodes 1 --global-batch 64 --seq-len 1024 --min-cut-budgets 0.2,0.5

Searches every layout at 1, 2, 4, ... devices of one node and 1, 2, 4, ... whole nodes up to
--max-nodes (at most 4,096 nodes: 32,768 GPUs of 8 a node; Meta's 16,384 H100s are 2,048):
tensor parallelism inside a node (dividing the heads and widths, with sequence parallelism);
pipeline stages over any layer count (uneven where they must be: the busiest stage holds
ceil(layers / pp), as Meta ran 126 layers over 16), with each schedule torch runs (GPipe, 1F1B,
interleaved 2 or 4 chunks deep, zero-bubble); context parallelism from 16k tokens; expert
parallelism for a mixture of experts; data parallelism with ZeRO 0-3 (HSDP across nodes,
ZeRO-Offload where devices are short); and recomputation: none, selective (the attention
core, or torchtitan's per-op policy with fused attention), full, K layers of each stage
recomputed (recompute-layers-K, Megatron-LM's --recompute-num-layers: the fewest that fit), or
functorch's min-cut at each --min-cut-budgets budget. Memory per device follows the ZeRO
paper's model-state formulas and the activations autograd keeps (the traced graph's saved
tensors); time per step the traced graph on the accelerator's measured kernels, NCCL's ring,
tree or one-shot all-reduce by size on the node's and the inter-node links, and the pipeline
simulator. Every time is a band, low-high, from the spreads this project measured (host cost
per op between machines of one GPU kind, kernels, collectives): steps, days, MFU and tokens a
second print as "12-15 days", and an answer whose band overlaps another's says so ("within the
band of the cheapest"). The line "times assume" says what the times assume: the engine, its
kernels, what overlaps, and MFU's FLOPs (causal or full attention). Prices are editable
presets (--price-per-hour).

--open LAYOUT prints one layout as the page opens it, whether or not it is among the best: its
memory per device by kind, its step band and time by cause and its collectives (count, size and
time of each, on which link, and what hides them); its export follows with --export. The words of
--open and --run are read before the model is loaded and traced: a misspelt word, a value out of
range or more devices than --max-nodes holds exits 2 at once; the rules that need the model
(heads, layers, experts, batch) are checked after the trace, before any search or process.

--run LAYOUT runs one training step of that layout (pp x dp x tp, ZeRO; words like "dp2 tp2 zero3
mb4") on local processes with the model's example inputs instead of searching, checks outputs
and gradients against one process, and prints each rank's held bytes beside the planner's, and
the measured step beside its prediction part by part on this machine's measured profile
(partition-explorer calibrate; measured first when none is cached), as the app's "Run this
layout" shows them.
"""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "cluster",
        help="plan a cluster: devices, layout, speed and cost",
        description="which devices, how many, laid out how, how fast, at what cost",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + COMMON_EPILOG,
    )
    add_model_arguments(p, tokens=False)  # --seq-len is the workload's here
    p.add_argument(
        "--accelerator",
        default="h100-80gb",
        help=f"a preset ({', '.join(cluster.ACCELERATORS)}) or a measured profile: its name "
        "(partition-explorer calibrate --name NAME) or .json file (default h100-80gb)",
    )
    p.add_argument("--devices-per-node", type=bounded(int, 1, 64), default=8, help="devices in a node (default 8)")
    p.add_argument(
        "--max-nodes",
        type=bounded(int, 1, MAX_NODES),
        default=64,
        help=f"search up to this many nodes (default 64, at most {MAX_NODES})",
    )
    p.add_argument("--intra", choices=list(cluster.LINKS), help="the link inside a node (default: the accelerator's)")
    p.add_argument("--inter", choices=list(cluster.LINKS), default="infiniband-ndr", help="the link between nodes")
    p.add_argument(
        "--price-per-hour",
        type=bounded(float, 0, MAX_PRICE),
        help=f"USD per device-hour, 0 to {MAX_PRICE:g} (default: the preset's)",
    )
    p.add_argument("--headroom", default="4GiB", help="memory kept free on each device, up to 64GiB (default 4GiB)")
    p.add_argument(
        "--host-memory",
        default="2TiB",
        help="host (CPU) memory of a node, which ZeRO-Offload's optimizer state fills; an offload layout "
        "needing more does not fit (default 2TiB, a DGX H100's; up to 64TiB)",
    )
    p.add_argument(
        "--global-batch",
        type=bounded(int, 1, MAX_SEQUENCES),
        default=512,
        help=f"sequences per step (default 512, at most {MAX_SEQUENCES:,})",
    )
    p.add_argument(
        "--seq-len",
        type=bounded(int, 1, MAX_SEQUENCES),
        default=4096,
        help=f"tokens per sequence (inference: the prompt; at most {MAX_SEQUENCES:,})",
    )
    p.add_argument(
        "--optimizer",
        choices=list(OPTIMIZERS),
        default="adam",
        help="; ".join(f"{o.name}: {o.label}" for o in OPTIMIZERS.values()) + " (default adam)",
    )
    p.add_argument(
        "--precision",
        choices=[d.short for d in PRECISIONS],
        default="bf16",
        help="bf16: mixed precision (fp32 master weights and state); fp32: full precision",
    )
    p.add_argument(
        "--train-tokens",
        type=bounded(float, 1e6, 1e15),
        default=1e12,
        help="tokens to price a training run, 1e6 to 1e15 (default 1e12)",
    )
    p.add_argument("--inference", action="store_true", help="serve instead of train")
    p.add_argument(
        "--generate",
        type=bounded(int, 0, MAX_GENERATE),
        default=256,
        help=f"inference: tokens generated per sequence, 0 to {MAX_GENERATE:,} (default 256)",
    )
    p.add_argument(
        "--min-cut-budgets",
        metavar="B,B,...",
        help="also search functorch's min-cut recomputation at these activation memory budgets "
        "(0 to 1, e.g. 0.25,0.5), measured on the model's joint graph in a worker first",
    )
    p.add_argument(
        "--top",
        type=bounded(int, 1, MAX_TOP),
        default=10,
        help=f"rows of the best-layouts table (default 10, at most {MAX_TOP:,})",
    )
    p.add_argument(
        "--open",
        metavar="LAYOUT",
        help='show one layout\'s memory, time and collectives, e.g. "dp4 tp8 pp2 1f1b mb1 zero1"',
    )
    p.add_argument(
        "--export",
        choices=list(EXPORT_ENGINES),
        help="print the fastest layout (or the --open one) as this engine's config",
    )
    p.add_argument("--out", metavar="FILE", help="write the answers as JSON (or the --export config) here")
    p.add_argument(
        "--run",
        metavar="LAYOUT",
        help='run this layout on local processes and compare with the plan, e.g. "dp2 tp2 zero3"',
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=time_limit,
        default=180.0,
        help="--run: time limit of the run (default 180)",
    )
    p.set_defaults(func=run)


def _words(args: argparse.Namespace, budgets: tuple[float, ...] = ()) -> cluster.Layout | None:
    """``--open``'s or ``--run``'s layout as words, read before the model is loaded and traced
    (minutes for a large model): a misspelt word, a value out of range, a word that cannot act on
    the layout (v4 without an interleaved schedule, sp at tp1, a min-cut budget --min-cut-budgets
    does not measure), or (--open) more devices than --max-nodes holds is refused at once; the
    rules that need the model are checked after."""
    from partitioner.cluster.words import parse_layout

    flag, text = ("--open", args.open) if args.open else ("--run", args.run) if args.run else ("", None)
    if text is None:
        return None
    if len(text) > MAX_LAYOUT_CHARS:
        raise CLIError(
            f"{flag} {text[:60]!r}... is {len(text):,} characters (at most {MAX_LAYOUT_CHARS}); a layout is "
            'a few words, e.g. "dp4 tp2 pp2 1f1b mb2 zero1"'
        )
    try:
        layout = parse_layout(text)
    except PartitionError as exc:
        raise CLIError(f"{flag} {text!r}: {exc}") from None
    idle = idle_words(text, layout, budgets)
    if idle:
        raise CLIError(f"{flag} {text!r}: " + "; ".join(idle))
    most = args.devices_per_node * args.max_nodes
    if flag == "--open" and layout.devices > most:
        raise CLIError(
            f"--open {text!r}: the layout needs {layout.devices} devices and the cluster has {most} "
            f"({args.max_nodes} node(s) of {args.devices_per_node}); lower its degrees or raise --max-nodes"
        )
    return layout


def run(args: argparse.Namespace) -> int:
    from partitioner.units import parse_bytes

    budgets = _budgets(args.min_cut_budgets) if args.min_cut_budgets is not None else ()
    headroom = parse_bytes(args.headroom)
    if not 0 <= headroom <= MAX_HEADROOM:
        raise CLIError(f"--headroom must be from 0 B to 64 GiB (got {args.headroom})")
    host_memory = parse_bytes(args.host_memory)
    if not 0 < host_memory <= MAX_HOST_MEMORY:
        raise CLIError(f"--host-memory must be above 0 B and at most 64 TiB (got {args.host_memory}); e.g. 2TiB")
    words = _words(args, budgets)  # before the (slow) load and trace
    model = load_model(args.model, args.set)
    prof: cluster.ModelProfile = cluster.profile(model.graph, model.label)
    if budgets:
        prof = _with_min_cut(args, model.graph, prof, budgets)
    if args.run:
        return run_layout(args, model.graph, prof)
    target = cluster.cluster(
        args.accelerator,
        args.devices_per_node,
        args.intra,
        args.inter,
        headroom,
        args.price_per_hour,
        host_memory_bytes=host_memory,
    )
    work = _workload(args)
    # --open's layout is checked against the model before the search, which may take seconds.
    to_open = checked_layout(words, prof, work, args.devices_per_node * args.max_nodes) if words else None
    found = cluster.search(prof, work, target, cluster.device_counts(args.devices_per_node, args.max_nodes))
    _print_searched(args, model.label, prof, work, found)
    if not found.fitting:
        print(
            f"no layout fits up to {args.max_nodes} node(s): raise --max-nodes, use a larger accelerator, "
            "or a smaller batch"
        )
        return EXIT_FAIL
    cluster_report.print_answers(work, found)
    _print_edge(args, found)
    print()
    print(cluster_report.table_best(work, found, args.top))
    opened = open_layout(to_open, prof, work, target) if to_open else None
    if args.export:
        best = opened or found.fastest
        assert best is not None
        _, text, _ = engine_file(args.export, best.layout, work)
        write_output(args.out or "-", text, f"{args.export} config")
        return EXIT_OK
    if args.out:
        data = _json_plan(args, model.label, found, work)
        if opened is not None:
            data["opened"] = json_opened(opened, prof, work, target)
        write_output(args.out, json.dumps(data, indent=2), "cluster plan")
    return EXIT_OK


def _workload(args: argparse.Namespace) -> cluster.Workload:
    """The step the layouts are searched for: training or inference, batch, sequence, precision."""
    return cluster.Workload(
        "inference" if args.inference else "training",
        args.global_batch,
        args.seq_len,
        dtype(args.precision, PRECISIONS).bytes,
        args.optimizer,
        args.train_tokens,
        args.generate,
    )


def _print_searched(
    args: argparse.Namespace, label: str, prof: cluster.ModelProfile, work: cluster.Workload, found: ClusterPlan
) -> None:
    """The model, the workload and the cluster, then how many layouts were searched and fit."""
    print(
        f"{label}: {prof.param_count / 1e9:.2f} B parameters ({format_bytes(prof.weight_bytes)} as traced), "
        f"{prof.layers} layers; {work.kind} at {work.global_batch} x {work.seq_len} tokens on "
        f"{args.accelerator} nodes of {args.devices_per_node}"
    )
    print(f"searched {found.evaluated} layouts in {found.search_s:.2f} s; {len(found.fitting)} fit")


def _print_edge(args: argparse.Namespace, found: ClusterPlan) -> None:
    """Which of the best layouts sit at the largest size searched: a larger cluster may beat them."""
    from partitioner.cluster.layout_search import at_the_edge

    searched = cluster.device_counts(args.devices_per_node, args.max_nodes)
    edge = at_the_edge(found, searched)
    if edge:
        print(
            f"{' and '.join(edge)} {'sits' if len(edge) == 1 else 'sit'} at the largest size searched "
            f"({max(searched)} devices): more may do "
            "better; raise --max-nodes to see where adding devices stops paying"
        )


def _json_plan(args: argparse.Namespace, label: str, found: ClusterPlan, work: cluster.Workload) -> dict[str, Any]:
    """``--out``: the search's answers as JSON."""
    return {
        "model": label,
        "workload": work.__dict__,
        "accelerator": args.accelerator,
        "searched": found.evaluated,
        "search_s": found.search_s,
        "fewest_devices": found.fewest_devices.to_dict() if found.fewest_devices else None,
        "fastest": found.fastest.to_dict() if found.fastest else None,
        "cheapest": found.cheapest.to_dict() if found.cheapest else None,
        "knee": found.knee.to_dict() if found.knee else None,
        "pareto": [r.to_dict() for r in found.front],
        "best": [r.to_dict() for r in found.best(args.top)],
    }


def _budgets(text: str) -> tuple[float, ...]:
    """``--min-cut-budgets "0.25,0.5"``: up to :data:`MAX_BUDGETS` distinct numbers from 0 to 1."""
    fix = "e.g. --min-cut-budgets 0.25,0.5"
    try:
        budgets = tuple(float(b) for b in text.split(","))
    except ValueError:
        raise CLIError(
            f"--min-cut-budgets takes numbers from 0 to 1 separated by commas (got {text!r}); {fix}"
        ) from None
    bad = [b for b in budgets if not 0.0 <= b <= 1.0]  # NaN fails both comparisons
    if bad:
        raise CLIError(f"--min-cut-budgets: each budget must be from 0 to 1 (got {bad[0]:g} in {text!r}); {fix}")
    budgets = tuple(dict.fromkeys(budgets))
    if len(budgets) > MAX_BUDGETS:
        raise CLIError(
            f"--min-cut-budgets: at most {MAX_BUDGETS} budgets (got {len(budgets)}); each is a min-cut "
            f"measured in a worker; {fix}"
        )
    return budgets


def _with_min_cut(
    args: argparse.Namespace, graph: Any, prof: cluster.ModelProfile, budgets: tuple[float, ...]
) -> cluster.ModelProfile:
    from partitioner import remat
    from partitioner.cluster.layouts import min_cut_label
    from partitioner.errors import RunError

    try:
        results = remat.sweep(graph, graph.example_inputs or (), budgets, timeout_s=args.timeout * 4)
    except RunError as exc:
        raise CLIError(f"the min-cut worker failed: {exc}", EXIT_RUN) from None
    prof = cluster.with_min_cut(prof, results)
    shares = ", ".join(
        f"{min_cut_label(b)} keeps {kept:.0%} of the activations and recomputes {redo:.0%} of the forward"
        for b, kept, redo in prof.min_cut
    )
    print(f"min-cut (functorch, on the traced graph): {shares}")
    return prof
