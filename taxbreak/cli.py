"""The ``taxbreak`` command (argparse, the standard library's parser, for every subcommand).

The command table is ``COMMANDS``: one ``_add_*`` function per subcommand, each adding its parser with help text
and ``func``; a new subcommand is one more function in that list.  Options every subcommand shares are added by
``build_parser`` to each of them: ``-q/--quiet`` (results only: no progress, no notes) and ``-v/--verbose`` (timings
and details); ``--version`` is global.

Output rules: results go to stdout, progress and notes to stderr.  Progress bars (``tqdm``) are drawn only on a
terminal and never with ``-q``; elsewhere each finished step prints one plain line.  Names read from traces
(kernels, ops, files) are passed through ``taxbreak.store.query.printable`` before they reach a terminal.  A reader
that goes away (``taxbreak traces --json | head``) ends the command quietly with the status a SIGPIPE gives.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from taxbreak import __version__
from taxbreak.api import ingest_and_analyze
from taxbreak.capture.cli import add_capture_parser
from taxbreak.config import ConfigError, Paths, add_path_args, describe_origin, ingest_limits
from taxbreak.engine import runner
from taxbreak.engine.analysis import forget_traces
from taxbreak.engine.checks import InvariantBroken
from taxbreak.engine.plan import plan_tables
from taxbreak.engine.rules import RunConfig
from taxbreak.features.nsys_check import cmd_nsys_check
from taxbreak.features.requests import add_requests_parser
from taxbreak.features.retry import cmd_retry
from taxbreak.features.trend import add_trend_parser
from taxbreak.features.whatif import add_whatif_parser
from taxbreak.ingest import Lake, file_sha256, ingest_file, iter_trace_files
from taxbreak.ingest.lake import EVENTS_DIR
from taxbreak.ingest.links import link_counts
from taxbreak.read.compare import add_compare_parser
from taxbreak.read.export import add_export_parser
from taxbreak.read.readmodel import format_summary, summary
from taxbreak.read.report import add_report_parser
from taxbreak.store.query import WarehouseUnavailable, add_sql_parser, open_for_cli, open_readonly, printable
from taxbreak.store.tracenames import (
    TraceNotFound,
    ambiguity_text,
    catalogue_candidates,
    explain_unanalysed,
    match,
    resolve_many,
)
from taxbreak.store.warehouse import WarehouseBusy, snapshot_path, warehouse_lock

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left
EXIT_INVARIANT_BROKEN = 4  # a writer's computed rows break an invariant of sql/checks: nothing was published


def version() -> str:
    try:
        from importlib.metadata import version as _v

        return _v("taxbreak")
    except Exception:  # noqa: BLE001 - a source checkout without install metadata

        return __version__


def emit(text: str = "", *, err: bool = False) -> None:
    """Print ``text`` with its terminal control characters escaped (names come from untrusted traces)."""
    print(printable(text), file=sys.stderr if err else sys.stdout)


def note(args: argparse.Namespace, text: str) -> None:
    """A line on stderr that ``-q`` silences."""
    if not getattr(args, "quiet", False):
        emit(text, err=True)


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)  # ASCII-escaped: no control character reaches the terminal


# -- progress ------------------------------------------------------------------------------------------------------
def _bars_on(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _terminal_size() -> tuple[int, int]:
    """Columns and rows of the terminal on stderr (100 x 20 when it reports 0 x 0, as a fresh pseudo-terminal does:
    tqdm would then draw nothing)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        cols, rows = size.columns, size.lines
    except (OSError, ValueError):
        cols = rows = 0
    return (cols if cols > 0 else 100), (rows if rows > 0 else 20)


class PhaseBar:
    """One tqdm bar on stderr whose description names the current phase; a phase with no counter updates still
    shows its elapsed time (a ticker thread refreshes the bar).  Does nothing when ``enabled`` is false."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def phase(self, name: str, total: int | None = None, unit: str = "it", unit_scale: bool = False) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        cols, rows = _terminal_size()
        with self._lock:
            if self.bar is not None:
                self.bar.close()
            self.bar = tqdm(total=total, desc=f"{self.label} {name}", unit=unit, unit_scale=unit_scale,
                            file=sys.stderr, leave=False, ncols=cols, nrows=rows, mininterval=0.2)
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self.bar is not None:
                    self.bar.refresh()

    def update_to(self, done: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(done - self.bar.n)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(n)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None


class IngestProgress(PhaseBar):
    """An ingest's phases: read (bytes, from the adapter's ``progress(done, total)``), parse (until the first batch
    of events), write (events written to the lake)."""

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None or not self.bar.desc.endswith(" read"):
            self.phase("read", total=total, unit="B", unit_scale=True)
        self.update_to(done)


class _ObservedLake:
    """The lake ``ingest_file`` writes to, observed for the progress of its parse and write phases (the adapters
    parse lazily, as the lake pulls batches of events)."""

    def __init__(self, lake: Any, bar: IngestProgress) -> None:
        self._lake = lake
        self._bar = bar

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lake, name)

    def _observed(self, batches: Iterable[Any]) -> Iterator[Any]:
        bar = self._bar
        bar.phase("parse")
        first = True
        for batch in batches:
            if first:
                bar.phase("write", unit=" events", unit_scale=True)
                first = False
            yield batch
            bar.advance(batch.num_rows)

    def publish_events(self, trace_id: str, batches: Iterable[Any], info: Any, **kwargs: Any) -> Any:
        return self._lake.publish_events(trace_id, self._observed(batches), info, **kwargs)

    def write_events(self, trace_id: str, batches: Iterable[Any], info: Any, **kwargs: Any) -> Any:
        return self._lake.write_events(trace_id, self._observed(batches), info, **kwargs)


# -- ingest and traces ---------------------------------------------------------------------------------------------
def _gpus(row: dict) -> str:
    """GPUs that ran kernels ('?' in catalogue rows written before schema 1.2)."""
    return "?" if row.get("kernel_gpu_count") is None else str(row["kernel_gpu_count"])


def format_trace_summary(row: dict) -> str:
    """One trace's ingest summary, from its catalogue row (and a few counts from the lake)."""
    counts = json.loads(row.get("event_counts_json") or "{}")
    skipped = json.loads(row.get("skipped_counts_json") or "{}")
    gpus = json.loads(row.get("gpu_names_json") or "[]")
    dur = row.get("duration_ns")
    lines = [
        f"trace {row['trace_id'][:16]}  {row['file_name']}  ({row.get('source_format')})",
        f"  events stored {row['event_count']:,}, skipped {sum(skipped.values()):,}"
        + (f" ({', '.join(f'{k} {v:,}' for k, v in skipped.items())})" if skipped else ""),
        "  per kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])),
        f"  GPUs that ran kernels: {row.get('kernel_gpu_count') if row.get('kernel_gpu_count') is not None else '?'}"
        f" (the host lists {len(gpus)}: {', '.join(sorted(set(gpus))) or 'none recorded'})"
        + (f"   duration {dur / 1e6:,.3f} ms" if dur is not None else ""),
    ]
    link = row.get("_links")
    if link:
        lines.append(
            f"  kernels {link['kernels']:,}, launches {link['launches']:,}, memcpys {link['memcpys']:,}; "
            f"kernels linked to a launch call {link['to_launch']:,} (framework ops are linked by `taxbreak analyze`)"
        )
    return "\n".join(lines)


def _link_counts(paths: Paths, trace_id: str) -> dict | None:

    try:
        return link_counts(paths.lake, trace_id)
    except Exception:  # noqa: BLE001 - a summary must not fail an ingest that succeeded
        return None


def format_ingest_result(paths: Paths, res: Any, label: str = "") -> str:
    """``[ingested]`` or ``[already in the lake]`` (then ``label``) and the trace's summary, for a result that did
    not fail (``taxbreak ingest`` and ``make demo`` print the same lines)."""
    row = dict(res.row or {})
    row["_links"] = _link_counts(paths, res.trace_id)
    tag = "already in the lake" if res.status == "unchanged" else "ingested"
    return f"[{tag}]{label} " + format_trace_summary(row)


_JSON_COLUMNS = ("tool_versions_json", "gpu_names_json", "event_counts_json", "skipped_counts_json", "metadata_json")


def catalogue_json(row: dict) -> dict:
    """A catalogue row for JSON output: the ``*_json`` text columns as the objects they hold, under their names
    without the suffix (``event_counts``), so the JSON is not encoded twice."""
    out = {}
    for key, value in row.items():
        if key in _JSON_COLUMNS:
            try:
                out[key[: -len("_json")]] = json.loads(value) if value is not None else None
            except ValueError:
                out[key] = value
        else:
            out[key] = value
    return out


def cmd_ingest(args: argparse.Namespace) -> int:

    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    files = iter_trace_files(args.paths)
    if not files:
        emit("no trace files found in: " + " ".join(args.paths), err=True)
        return 2
    note(args, f"ingesting {len(files)} file(s) into the lake {paths.lake}")
    failed = 0
    results = []
    for i, f in enumerate(files, 1):
        bar = IngestProgress(f"[{i}/{len(files)}] {Path(f).name[-40:]}", _bars_on(args))
        t0 = time.perf_counter()
        try:
            res = ingest_file(f, _ObservedLake(lake, bar), force=args.force, cache_dir=paths.cache, progress=bar,
                              limits=ingest_limits())
        finally:
            bar.close()
        seconds = time.perf_counter() - t0
        if args.json:
            results.append({"file": str(f), "trace_id": res.trace_id, "status": res.status, "error": res.error,
                            "seconds": round(seconds, 3),
                            "catalogue": catalogue_json(res.row) if res.row is not None else None})
        if res.status == "failed":
            failed += 1
            if not args.json:
                emit(f"FAILED {res.error}", err=True)
            continue
        if res.status == "not_a_trace":  # recorded as such, never analysed; not a failure of the run
            if not args.json:
                emit(f"IGNORED (not a trace) {res.error}", err=True)
            continue
        if not args.json:
            emit(format_ingest_result(paths, res) + (f"\n  ({seconds:.1f} s)" if args.verbose else ""))
    if args.json:
        print(_dumps({"lake": str(paths.lake), "files": results, "failed": failed}))
    if failed:
        rest = "; the others went through" if failed < len(files) else ""
        emit(f"{failed} of {len(files)} file(s) failed{rest}", err=True)
    return 1 if failed else 0


def cmd_traces(args: argparse.Namespace) -> int:

    paths = Paths.from_args(args)
    table = Lake(paths.lake).catalogue()
    rows = sorted(table.to_pylist(), key=lambda r: r["ingested_at_ns"])
    if args.json:
        print(_dumps([catalogue_json(r) for r in rows]))
        return 0
    if not rows:
        origin = "--lake" if getattr(args, "lake", None) else describe_origin(paths.origins()["lake"])
        emit(f"the catalogue at {paths.lake} is empty (that lake path comes from {origin}; run from the project "
             "folder, pass --lake, or set TAXBREAK_LAKE / taxbreak.toml): run `taxbreak ingest PATH` to fill it")
        return 0
    emit(f"{'trace_id':<16}  {'status':<8}  {'format':<11}  {'events':>10}  {'GPUs':>4}  file / error"
         "   (GPUs: that ran kernels)")
    for r in rows:
        tail = r["file_name"] if r["status"] == "ingested" else f"{r['file_name']}: {r['error']}"
        emit(
            f"{r['trace_id'][:16]}  {r['status']:<8}  {(r['source_format'] or '-'):<11}  "
            f"{r['event_count']:>10,}  {_gpus(r):>4}  {printable(tail, cell=True)}"
        )
    note(args, f"({len(rows)} trace(s) in {paths.lake})")
    return 0


# -- analyze, summary, forget --------------------------------------------------------------------------------------
def _match_traces(rows: list[dict], wanted: list[str]) -> tuple[list[str], list[str]]:
    """Trace ids each name matches (taxbreak.store.tracenames.match: id prefix, file name, stem, substring), and the
    names that matched none."""

    ids: set[str] = set()
    missing = []
    for p in wanted:
        hit = {t for t, _f in match(catalogue_candidates(rows), p)}
        if not hit:
            missing.append(p)
        ids |= hit
    return sorted(ids), missing


def cmd_analyze(args: argparse.Namespace) -> int:

    paths = Paths.from_args(args)
    try:
        names = plan_tables(args.table or None)
    except ValueError as exc:
        emit(f"taxbreak analyze: {exc}", err=True)
        return 2
    config = RunConfig.from_settings(t_sys_ns=args.t_sys_ns)
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
    bars = _bars_on(args)
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
        counts = runner.run(paths, traces=trace_ids, tables=args.table or None, config=config, hooks=progress,
                            on_wait=lambda m: note(args, m)).counts
    except WarehouseBusy as exc:
        emit(f"taxbreak analyze: {exc}", err=True)
        return 3
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
        print(_dumps({"warehouse": str(paths.warehouse), "lake": str(paths.lake), "scope": scope,
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

    import duckdb


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
            emit(f"summary: {exc} (see above)", err=True)
            return 2
        emit(f"summary: {args.trace} was not analysed yet: ingested into {paths.lake} and analysed into "
             f"{paths.warehouse} as trace {tid[:16]}", err=True)
    args.trace = tid[:16]
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    import duckdb


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
        print(_dumps(s))
    else:
        emit(format_summary(s))
    return 0


def forget_in_lake(lake: Any, trace_id: str) -> list[str]:
    """Remove a trace's catalogue row, then its events partition (a local partition is first renamed out of
    ``events/``, so no reader sees part of it); returns what was removed."""
    import shutil
    import uuid

    import pyarrow.fs as pafs

    removed = []
    cat = lake.catalogue_path(trace_id)
    if lake.fs.get_file_info(lake._key(cat)).type == pafs.FileType.File:
        lake.fs.delete_file(lake._key(cat))
        removed.append(str(cat))
    events = lake.events_dir(trace_id)
    if lake.is_object_store:
        if lake.fs.get_file_info(lake._key(events)).type != pafs.FileType.NotFound:
            lake.fs.delete_dir(lake._key(events))
            removed.append(str(events))
    elif Path(events).exists():
        trash = Path(lake.root) / "_staging" / f"forget-{uuid.uuid4().hex}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(events, trash)
        shutil.rmtree(trash)
        removed.append(str(events))
    return removed


def cmd_forget(args: argparse.Namespace) -> int:

    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    rows = lake.catalogue().to_pylist()
    if not lake.is_object_store:  # an events partition whose catalogue row an interrupted forget removed
        known = {r["trace_id"] for r in rows}
        for d in sorted((Path(lake.root) / EVENTS_DIR).glob("trace_id=*")):
            tid = d.name.split("=", 1)[1]
            if tid not in known:
                rows.append({"trace_id": tid, "file_name": "(events only)", "status": "orphan"})

    ids: list[str] = []
    for pattern in args.traces:
        found = match(catalogue_candidates(rows), pattern)
        hit = [t for t, _f in found]
        if not hit:
            emit(f"forget: no trace matches {pattern!r} in the catalogue at {paths.lake}", err=True)
            return 2
        if len(hit) > 1 and not args.all_matching:
            emit(f"forget: {ambiguity_text(pattern, found)}, or --all-matching", err=True)
            return 2
        ids += [t for t in hit if t not in ids]
    out: dict[str, Any] = {"trace_ids": ids, "warehouse_rows_deleted": {}, "lake_removed": []}
    # The tables, then the lake, both under the writer lock (issue 30): a run for these traces that computed
    # beside this one publishes after it only what the lake still holds (taxbreak.engine.analysis.publish_run), and a
    # whole run reads the lake under the lock, before or after all of it.  Killed between the two, the trace is
    # still in the lake and out of the tables: it can be analysed again, or forgotten again.
    try:
        while True:
            if Path(paths.warehouse).exists():
                # the marts of those traces only (taxbreak.store.marts removes every file holding them)
                def lake_too(_con: Any) -> None:  # after the tables' publication committed, still under the lock
                    for tid in ids:
                        out["lake_removed"] += forget_in_lake(lake, tid)

                out["warehouse_rows_deleted"] = runner.publish(paths, lambda con: forget_traces(con, ids), traces=ids,
                                                        after=lake_too, on_wait=lambda m: note(args, m),
                                                        label="forget")
                break
            with warehouse_lock(paths.warehouse, on_wait=lambda m: note(args, m)):
                if not Path(paths.warehouse).exists():  # no table holds them; no writer can start meanwhile
                    for tid in ids:
                        out["lake_removed"] += forget_in_lake(lake, tid)
                    break
    except WarehouseBusy as exc:
        emit(f"forget: {exc}", err=True)
        return 3
    if args.json:
        print(_dumps(out))
        return 0
    names = {r["trace_id"]: r["file_name"] for r in rows}
    for tid in ids:
        emit(f"forgot {tid[:16]}  {names.get(tid, '')}")
    deleted = sum(out["warehouse_rows_deleted"].values())
    emit(f"  {deleted:,} warehouse row(s) deleted from {paths.warehouse}; {len(out['lake_removed'])} lake "
         f"object(s) removed from {paths.lake}")
    if args.verbose:
        for table, n in out["warehouse_rows_deleted"].items():
            emit(f"    {table:<28} {n:>12,} rows")
    return 0


# -- the command table ---------------------------------------------------------------------------------------------
def _add_ingest(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ingest",
        help="ingest trace files or folders into the Parquet lake",
        description="Ingest Kineto JSON(.gz), Nsight Systems SQLite exports and .nsys-rep reports. "
        "Content already in the lake is skipped; a failed file is reported and the rest still go through. "
        "Exit status 1 if any input failed.",
    )
    p.add_argument("paths", nargs="+", help="trace files or folders (searched recursively)")
    p.add_argument("--force", action="store_true", help="re-ingest content already in the lake or failed before")
    p.add_argument("--json", action="store_true", help="print one JSON document: every file's outcome and "
                   "catalogue row")
    add_path_args(p)
    p.set_defaults(func=cmd_ingest)


def _add_traces(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "traces", help="list the trace catalogue", description="List every trace in the catalogue with its outcome."
    )
    p.add_argument("--json", action="store_true", help="print the catalogue rows as JSON")
    add_path_args(p)
    p.set_defaults(func=cmd_traces)


def _add_capture(sub: argparse._SubParsersAction) -> None:

    add_capture_parser(sub)


def _add_analyze(sub: argparse._SubParsersAction) -> None:
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


def _add_summary(sub: argparse._SubParsersAction) -> None:
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


def _add_forget(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "forget",
        help="remove traces from the warehouse tables, the catalogue and the lake",
        description="Deletes each trace's rows from every warehouse table (one transaction under the writer lock, "
        "cross-trace tables recomputed, snapshot republished), then its catalogue row and its events partition. "
        "The trace file itself is not touched; ingesting it again brings the trace back.",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace id prefix, file name, stem or unique substring")
    p.add_argument("--all-matching", action="store_true", help="forget every trace a prefix matches")
    p.add_argument("--json", action="store_true", help="print what was removed as JSON")
    add_path_args(p)
    p.set_defaults(func=cmd_forget)


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


def _add_report(sub: argparse._SubParsersAction) -> None:

    add_report_parser(sub)


def _add_export(sub: argparse._SubParsersAction) -> None:

    add_export_parser(sub)


def _add_compare(sub: argparse._SubParsersAction) -> None:

    add_compare_parser(sub)


def _add_trend(sub: argparse._SubParsersAction) -> None:

    add_trend_parser(sub)


def _add_sql(sub: argparse._SubParsersAction) -> None:

    add_sql_parser(sub)


def _add_requests(sub: argparse._SubParsersAction) -> None:

    add_requests_parser(sub)


def _add_whatif(sub: argparse._SubParsersAction) -> None:

    add_whatif_parser(sub)


# The command table: one function per subcommand, in the order `taxbreak --help` lists them.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_ingest, _add_traces, _add_analyze, _add_summary, _add_report, _add_export, _add_compare, _add_trend, _add_sql,
    _add_forget, _add_retry, _add_nsys_check, _add_capture, _add_requests, _add_whatif,
]
ADDERS = COMMANDS  # the earlier name


def _add_common(p: argparse.ArgumentParser, top: bool) -> None:
    # on a subcommand the defaults are suppressed, so `taxbreak -q CMD` and `taxbreak CMD -q` both work
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="print results only: no progress bars, no notes")
    p.add_argument("-v", "--verbose", action="store_true", default=default,
                   help="print timings and details")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taxbreak",
        description="Where the host-side time of GPU LLM inference goes (TaxBreak decomposition, HDBI, "
        "kernels per token, SKIP metrics) from Nsight Systems and PyTorch profiler traces. Paths and settings: "
        "options, then TAXBREAK_* environment variables, then taxbreak.toml (found from the working directory "
        "upward), then the defaults under warehouse/.",
    )
    parser.add_argument("--version", action="version", version=f"taxbreak {version()}")
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    for p in sub.choices.values():
        if not any(a.dest == "quiet" for a in p._actions):
            _add_common(p, top=False)
    return parser


def _silence_stdout() -> None:
    """After the reader of stdout left: send what is still buffered nowhere, so the exit's flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a captured stdout without a descriptor
        pass


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

        if isinstance(exc, InvariantBroken):  # any writer (retry, ...) whose computed rows break an invariant
            emit(f"taxbreak {args.command}: {exc}", err=True)
            return EXIT_INVARIANT_BROKEN
        if not isinstance(exc, WarehouseBusy):  # any writer (retry, whatif --save, ...) that found it busy
            raise
        emit(f"taxbreak {args.command}: {exc}", err=True)
        return 3
    except KeyboardInterrupt:
        emit("taxbreak: interrupted", err=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
