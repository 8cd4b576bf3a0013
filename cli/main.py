"""``partition-explorer``: the command line, an application beside the app on the same library.

Exit codes: 0 success; 1 the plan does not fit (``check`` found violations or a budget was
exceeded, ``plan`` found no plan that fits, every ``compare`` mode failed, ``diff --exit-code``
found differences); 2 usage error or bad input (unknown model, bad device spec, malformed JSON,
missing file); 3 an internal error (a bug: rerun with ``--debug`` and report the traceback); 4 a
run on real processes or a worker failed (a rank raised, died or passed its time limit: the
message names the rank and the cause).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from cli import calibrate, cluster, commands, execute, pipeline, remat, review, shard
from cli.inputs import EXIT_FAIL, EXIT_INTERNAL, EXIT_OK, EXIT_RUN, EXIT_USAGE, CLIError, refuse_overwriting
from partitioner import __version__
from partitioner.errors import InfeasibleError, InvalidPlanError, PartitionError, RunError

__all__ = ["main", "build_parser", "PROG"]

PROG = "partition-explorer"

# Each module has register(subparsers, common) adding its commands with set_defaults(func=...).
COMMAND_MODULES = (commands, execute, pipeline, remat, shard, cluster, review, calibrate)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log what the library does (to stderr)"
    )
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of unexpected errors"
    )
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=fmt,
        parents=[common],
        description="Partition PyTorch models across accelerators: make a plan, check it against\n"
        "the model and devices (for CI), draw, compare, diff and export plans. Plans are\n"
        "the same JSON the Partition Explorer app reads and writes.",
        epilog="""quick start:
  partition-explorer plan transformer --devices 4x16GiB --out plan.json
  partition-explorer check plan.json transformer --devices 4x16GiB --max-memory-utilisation 0.9
  partition-explorer compare transformer
  partition-explorer render plan.json --out plan.svg

run `partition-explorer COMMAND --help` for each command's options and examples.
"""
        + commands.COMMON_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    for module in COMMAND_MODULES:
        module.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose, debug = getattr(args, "verbose", False), getattr(args, "debug", False)
    logging.basicConfig(
        force=True,
        level=logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        refuse_overwriting(args)  # before anything is read or written
        return int(args.func(args))
    except CLIError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return exc.code
    except RunError as exc:
        print(f"{PROG} {args.command}: the run failed: {exc}", file=sys.stderr)
        return EXIT_RUN
    except (InfeasibleError, InvalidPlanError) as exc:
        print(f"{PROG} {args.command}: no valid plan: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except (PartitionError, ValueError, OverflowError, RecursionError) as exc:
        # Bad input the library or a reader refused: the message names it and the fix.
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`
        return EXIT_OK
    except Exception as exc:
        if debug:
            raise
        print(
            f"{PROG} {args.command}: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug; rerun with --debug for the traceback and report it.",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
