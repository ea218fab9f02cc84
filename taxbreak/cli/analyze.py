"""``taxbreak analyze`` (the engine's run: ``taxbreak.engine.runner.run``) and ``taxbreak summary``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb

from taxbreak.api import ingest_and_analyze
from taxbreak.cli.common import EXIT_BUSY, EXIT_INVARIANT_BROKEN, PhaseBar, bars_on, dumps, emit, note
from taxbreak.config import Paths, add_path_args
from taxbreak.engine import runner
from taxbreak.engine.checks import InvariantBroken
from taxbreak.engine.plan import plan_tables
from taxbreak.engine.rules import RunConfig
from taxbreak.ingest import Lake, file_sha256
from taxbreak.read.readmodel import format_summary, summary
from taxbreak.store.query import WarehouseUnavailable, open_for_cli, open_readonly
from taxbreak.store.tracenames import TraceNotFound, catalogue_candidates, explain_unanalysed, resolve_many
from taxbreak.store.warehouse import WarehouseBusy, snapshot_path


def cmd_analyze(args: argparse.Namespace) -> int:
    paths = Paths.from_args(args)
    try:
        names = plan_tables(args.table or None)
    except ValueError as exc:
        emit(f"taxbreak analyze: {exc}", err=True)
        return 2
    config = RunConfig.from_settings(t_sys_ns=args.t_sys_ns)
    # no lake folder at all: nothing to analyse (one that vanishes during the run is an error: analysis.materialize)
    no_lake = not Lake(paths.lake).is_object_store and not Path(paths.lake).is_dir()
    trace_ids = None
    if args.trace:
        rows = Lake(paths.lake).catalogue().to_pylist()
        try:  # each name one trace, as every command that takes TRACE (taxbreak.store.tracenames)
            trace_ids = resolve_many(catalogue_candidates(rows), args.trace)
        except LookupError as exc:
            emit(f"taxbreak analyze: {exc} in the catalogue at {paths.lake} (`taxbreak traces` lists them)",
                 err=True)
            return 2
    scope = "all traces" if trace_ids is None else f"{len(trace_ids)} trace(s)"
    if not args.json:
        note(args, f"analysing {scope} of {paths.lake} into {paths.warehouse} ({len(names)} tables"
             + (f", T_sys set to {config.t_sys_override_ns} ns" if config.t_sys_override_ns is not None else "")
             + ")")
    bars = bars_on(args)
    plain_lines = not args.json and not args.quiet
    bar = PhaseBar("analyze", bars)
    started: dict[str, float] = {}

    def progress(event: runner.Event) -> None:
        if event.kind == "check":
            r = event.result
            if args.verbose and not args.json:
                note(args, f"  check {r.name:<36} {'ok' if r.passed else 'BROKEN'}  ({r.violations:,} of "
                     f"{r.rows_checked:,} rows of {r.table} break it)")
            elif not r.passed and not r.check.blocking:  # a warn-severity check: told, not blocking
                note(args, f"taxbreak analyze: warning: {r.message()}")
            return
        if event.kind not in ("table_started", "table"):
            return
        name, index, total, rows = event.name, event.index, event.total, event.rows
        if rows is None:
            started[name] = time.perf_counter()
            if bars:
                bar.phase(f"{name} ({index}/{total})")
            return
        if plain_lines:
            took = f"  {time.perf_counter() - started[name]:6.1f} s" if args.verbose else ""
            line = f"  {name:<28} {rows:>12,} rows{took}"
            if bar.bar is not None:
                from tqdm import tqdm

                tqdm.write(line, file=sys.stdout)
            else:
                print(line, flush=True)

    t0 = time.perf_counter()
    try:  # every trace: written whole under the writer lock; some: computed without it, published under it
        counts = {} if no_lake else runner.run(paths, traces=trace_ids, tables=args.table or None, config=config,
                                               hooks=progress, on_wait=lambda m: note(args, m)).counts
    except WarehouseBusy as exc:
        emit(f"taxbreak analyze: {exc}", err=True)
        return EXIT_BUSY
    except InvariantBroken as exc:
        bar.close()
        emit(f"taxbreak analyze: {exc.scope}: nothing published (the tables, marts and snapshot stay as they were)",
             err=True)
        for r in exc.broken:
            emit(f"taxbreak analyze: broken invariant {r.name} ({r.check.path}): {r.violations:,} of "
                 f"{r.rows_checked:,} row(s) of table {r.table} break it: {r.check.description}", err=True)
        return EXIT_INVARIANT_BROKEN
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    if args.json:
        print(dumps({"warehouse": str(paths.warehouse), "lake": str(paths.lake), "scope": scope,
                      "trace_ids": trace_ids, "t_sys_override_ns": config.t_sys_override_ns,
                      "seconds": round(seconds, 3), "snapshot": str(snapshot_path(paths.warehouse)) if counts else None,
                      "tables": counts}))
        return 0
    if not counts:
        emit(f"nothing to analyse: no ingested trace in the lake {paths.lake} (run `taxbreak ingest PATH`)")
        return 0
    emit(f"analysed {scope} into {paths.warehouse} in {seconds:.1f} s; readers' snapshot "
         f"{snapshot_path(paths.warehouse)}")
    return 0


def _summary_of_file(args: argparse.Namespace, paths: Paths) -> int:
    """``summary FILE``: ingest FILE into the configured lake and analyse it into the warehouse unless it is there
    already (the same commands, their output on stderr), then point ``args.trace`` at its trace id."""

    tid = file_sha256(args.trace)
    analysed = False
    if paths.warehouse.exists():
        try:
            opened = open_readonly(paths.warehouse)
            try:
                analysed = bool(opened.con.execute("SELECT count(*) FROM trace_meta WHERE trace_id = $t",
                                                   {"t": tid}).fetchone()[0])
            finally:
                opened.con.close()
        except (WarehouseUnavailable, duckdb.Error):
            analysed = False
    if not analysed:
        try:
            ingest_and_analyze(args.trace, paths.lake, paths.warehouse, log=sys.stderr)  # their output: stderr
        except ValueError as exc:
            emit(f"summary: {exc}", err=True)  # the one line: the file and the problem
            return 2
        emit(f"summary: {args.trace} was not analysed yet: ingested into {paths.lake} and analysed into "
             f"{paths.warehouse} as trace {tid[:16]}", err=True)
    args.trace = tid[:16]
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    paths = Paths.from_args(args)
    if Path(args.trace).is_file():  # a trace file: ingested and analysed first where it is not yet (issue 29)
        rc = _summary_of_file(args, paths)
        if rc:
            return rc
    opened = open_for_cli(args, "summary")  # like sql/compare/report: the snapshot while a writer holds the file
    if opened is None:
        return 2
    try:
        s = summary(paths.warehouse, args.trace, top_k=args.top, con=opened.con)
    except LookupError as exc:
        msg = explain_unanalysed(paths.lake, args.trace, opened.path) if isinstance(exc, TraceNotFound) else str(exc)
        emit(f"summary: {msg}", err=True)
        return 2
    except duckdb.Error as exc:
        emit(f"summary: {opened.path}: {exc}", err=True)
        return 2
    finally:
        opened.con.close()
    if args.json:
        print(dumps(s))
    else:
        emit(format_summary(s))
    return 0


# -- parsers -------------------------------------------------------------------------------------------------------
def add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="(re)compute the analysis tables (sql/*.sql) in the DuckDB warehouse",
        description="Compute the TaxBreak decomposition, host-time partition, kernels per token, SKIP metrics and "
        "fusion candidates for all ingested traces, or only the selected ones (their rows are replaced). "
        "Takes the warehouse's writer lock (waiting for another writer), publishes every table in one transaction "
        "(an interrupted run changes nothing) and then the readers' snapshot exports/snapshot.duckdb. "
        "Before publishing, the computed rows are checked against the invariants of sql/checks/*.sql; a broken "
        "one publishes nothing and is named with its table and the rows that break it (-v lists every check). "
        "Exit 2 on a bad option, 3 when the warehouse stayed busy, 4 when an invariant is broken.",
    )
    p.add_argument("--trace", action="append", help="trace id prefix, file name, its stem or a unique substring "
                   "(repeatable; default: all)")
    p.add_argument("--table", action="append", help="only this table and what it reads (repeatable)")
    p.add_argument("--t-sys-ns", type=int, metavar="N",
                   help="launch floor T_sys in ns for every trace, instead of the measured or default one; recorded "
                   "as t_sys_source 'user_setting' (also $TAXBREAK_T_SYS_NS, taxbreak.toml [analysis] t_sys_ns)")
    p.add_argument("--json", action="store_true", help="print the outcome (rows per table) as JSON")
    add_path_args(p)
    p.set_defaults(func=cmd_analyze)


def add_summary(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "summary",
        help="print the headline figures of one analysed trace",
        description="HDBI, T_Orchestrate split into dFT/dCT/dKT, T_DeviceActive, kernels per token, TKLQT, GPU idle, "
        "top kernels, top fusion candidates, and which defaults were assumed.",
    )
    p.add_argument("trace", help="trace id prefix, file name, its stem (eager_trace) or a unique substring")
    p.add_argument("--top", type=int, default=5, help="how many top kernels / fusion candidates (default 5)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_path_args(p)
    p.set_defaults(func=cmd_summary)
