"""The ``taxbreak`` command line: the command table (``COMMANDS``), the parser and ``main``.

One ``add_*`` function per subcommand adds its parser with help text and ``func``; a new subcommand is one more
function in ``COMMANDS``.  The commands live beside what they drive: ``taxbreak.cli.ingest`` (ingest, traces),
``taxbreak.cli.analyze`` (analyze, summary), ``taxbreak.cli.forget``, and the feature and reader modules' own
``add_*_parser`` (report, export, compare, trend, sql, requests, whatif, capture).  Options every subcommand shares
are added by ``build_parser`` to each of them: ``-q/--quiet`` (results only: no progress, no notes) and
``-v/--verbose`` (timings and details); ``--version`` is global.  A reader that goes away (``taxbreak traces --json
| head``) ends the command quietly with the status a SIGPIPE gives.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from taxbreak.capture.cli import add_capture_parser
from taxbreak.cli.analyze import add_analyze, add_summary
from taxbreak.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_BUSY,
    EXIT_INVARIANT_BROKEN,
    add_common,
    emit,
    version,
)
from taxbreak.cli.forget import add_forget
from taxbreak.cli.ingest import add_ingest, add_traces
from taxbreak.cli.whatif import add_whatif_parser
from taxbreak.config import ConfigError, Paths, add_path_args
from taxbreak.engine.analysis import AnalysisOutOfMemory
from taxbreak.engine.checks import InvariantBroken
from taxbreak.features.nsys_check import cmd_nsys_check
from taxbreak.features.requests import add_requests_parser
from taxbreak.features.retry import cmd_retry
from taxbreak.read.compare import add_compare_parser
from taxbreak.read.export import add_export_parser
from taxbreak.read.report import add_report_parser
from taxbreak.read.trend import add_trend_parser
from taxbreak.store.faults import OrdinaryFault, ordinary_fault, then_of
from taxbreak.store.marts import marts_dir
from taxbreak.store.query import add_sql_parser
from taxbreak.store.warehouse import WarehouseBusy, exports_dir


def _add_nsys_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nsys-check",
        help="compare our kernel counts and times with Nsight's own `nsys stats` kernel summary (and recipes)",
        description="Ingest TRACE (an .nsys-rep or Nsight SQLite export) if needed, run `nsys stats --report "
        "cuda_gpu_kern_sum` (`gpukernsum` before nsys 2023) on it and compare per-kernel instance counts and "
        "total ns with the lake. Where the installed nsys has `nsys recipe` (2023.3 and later) and TRACE is an "
        ".nsys-rep, also run the cuda_gpu_kern_sum recipe (compared the same way) and the gpu_gaps recipe "
        "(stored); results go to the lake's checks/nsys/<trace_id>/. "
        "Exit 0 when they agree, 1 on a mismatch, 2 when nsys is not installed or TRACE cannot be ingested.",
    )
    p.add_argument("trace", help="the .nsys-rep or .sqlite file")
    p.add_argument("--no-recipes", action="store_true", help="skip `nsys recipe` (nsys stats only)")
    p.add_argument("--gap-ms", type=int, default=500, metavar="MS",
                   help="gpu_gaps recipe: smallest gap reported, in ms (default 500, the recipe's own)")
    add_path_args(p)
    p.set_defaults(func=cmd_nsys_check)


def _add_retry(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "retry",
        help="re-ingest failed traces from their recorded source and rebuild their tables",
        description="A failed file is retried automatically only when its content changes; this forces it. "
        "Re-reads each matching failed trace from the source path (or s3:// URL) in its catalogue row, then "
        "rebuilds the warehouse tables for the traces that now ingest. Exit 1 if any still fails.",
    )
    p.add_argument("prefix", nargs="?", metavar="TRACE", help="trace id prefix, file name, its stem or a unique "
                   "substring (as `taxbreak traces` prints them)")
    p.add_argument("--all-failed", action="store_true", help="retry every failed trace")
    p.add_argument("--no-tables", action="store_true", help="re-ingest only; leave the warehouse tables")
    add_path_args(p)
    p.set_defaults(func=cmd_retry)


# The command table: one function per subcommand, in the order `taxbreak --help` lists them.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_ingest, add_traces, add_analyze, add_summary, add_report_parser, add_export_parser, add_compare_parser,
    add_trend_parser, add_sql_parser, add_forget, _add_retry, _add_nsys_check, add_capture_parser,
    add_requests_parser, add_whatif_parser,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taxbreak",
        description="Where the host-side time of GPU LLM inference goes (TaxBreak decomposition, HDBI, "
        "kernels per token, SKIP metrics) from Nsight Systems and PyTorch profiler traces. Paths and settings: "
        "options, then TAXBREAK_* environment variables, then taxbreak.toml (found from the working directory "
        "upward), then the defaults under warehouse/.",
    )
    parser.add_argument("--version", action="version", version=f"taxbreak {version()}")
    add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    for p in sub.choices.values():
        if not any(a.dest == "quiet" for a in p._actions):
            add_common(p, top=False)
    return parser


def _silence_stdout() -> None:
    """After the reader of stdout left: send what is still buffered nowhere, so the exit's flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a captured stdout without a descriptor
        pass


def _fault_line(args: argparse.Namespace, exc: BaseException) -> OrdinaryFault | None:
    """The one line for an ordinary fault of the machine (``taxbreak.store.faults``), naming the command's stores'
    folders rather than their temporary files; None for any other error."""
    try:
        paths = Paths.from_args(args)
        roots = [paths.lake, exports_dir(paths.warehouse), marts_dir(paths.warehouse), paths.warehouse.parent]
        default = paths.lake if args.command == "ingest" else paths.warehouse
    except (ConfigError, OSError):  # the paths themselves unreadable: the fault names its own
        roots, default = [], Path(".")
    return ordinary_fault(exc, roots=[r.absolute() for r in roots], default=default, command=args.command,
                          then=then_of(exc))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quiet and args.verbose:
        emit("taxbreak: -q and -v exclude each other", err=True)
        return 2
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except ConfigError as exc:
        emit(f"taxbreak: {exc}", err=True)
        return 2
    except Exception as exc:
        fault = _fault_line(args, exc)
        if fault is not None:  # no space, read-only, permission, a vanished store folder: no bug (issue 30)
            emit(f"taxbreak: {fault}", err=True)
            return 1
        if isinstance(exc, InvariantBroken):  # any writer (retry, ...) whose computed rows break an invariant
            emit(f"taxbreak {args.command}: {exc}", err=True)
            return EXIT_INVARIANT_BROKEN
        if isinstance(exc, AnalysisOutOfMemory):  # any command that analyses (analyze, retry, summary FILE, ...)
            emit(f"taxbreak {args.command}: {exc}", err=True)
            return 1
        if not isinstance(exc, WarehouseBusy):  # any writer (retry, whatif --save, ...) that found it busy
            raise
        then = then_of(exc)  # the same command again would not finish the work
        emit(f"taxbreak {args.command}: {exc}" + (f"; when it is free, {then}" if then else ""), err=True)
        return EXIT_BUSY
    except KeyboardInterrupt:
        emit("taxbreak: interrupted", err=True)
        return 130
