"""``taxbreak forget``: a trace out of every table, mart and snapshot (``taxbreak.engine.runner.publish``), then
out of the catalogue and the lake, under the writer lock."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from taxbreak.cli.common import EXIT_BUSY, dumps, emit, note
from taxbreak.config import Paths, add_path_args
from taxbreak.engine import runner
from taxbreak.engine.analysis import forget_traces
from taxbreak.ingest import Lake
from taxbreak.ingest.lake import EVENTS_DIR
from taxbreak.store import marts
from taxbreak.store.tracenames import ambiguity_text, catalogue_candidates, match
from taxbreak.store.warehouse import WarehouseBusy, warehouse_lock


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
    unlisted: list[dict] | None = None
    for pattern in args.traces:
        found = match(catalogue_candidates(rows), pattern)
        if not found and unlisted is None:  # asked only when the catalogue has no such trace
            unlisted = _held_by_marts(paths, {r["trace_id"] for r in rows})
            rows += unlisted
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
                        out["lake_removed"] += lake.remove_trace(tid)

                out["warehouse_rows_deleted"] = runner.publish(paths, lambda con: forget_traces(con, ids), traces=ids,
                                                        after=lake_too, on_wait=lambda m: note(args, m),
                                                        label="forget")
                break
            with warehouse_lock(paths.warehouse, on_wait=lambda m: note(args, m)):
                if not Path(paths.warehouse).exists():  # no table holds them; no writer can start meanwhile
                    for tid in ids:
                        out["lake_removed"] += lake.remove_trace(tid)
                    break
    except WarehouseBusy as exc:
        emit(f"forget: {exc}", err=True)
        return EXIT_BUSY
    if args.json:
        print(dumps(out))
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


def _held_by_marts(paths: Paths, known: set[str]) -> list[dict]:
    """Traces out of the catalogue that the marts still hold or that a dead writer's pending marker names: a forget
    killed after it removed the trace from the lake and before the marts and the snapshot were republished (issue
    30).  Forgetting one again deletes nothing more and lets the writer catch up the marts and the snapshot; without
    this, a re-run said "no trace matches" and the marts kept the trace until some other writer ran."""
    if not Path(paths.warehouse).exists():
        return []
    _markers, pending = marts.pending(paths.warehouse)
    held = set(pending or [])
    manifest = marts.load_manifest(marts.marts_root(paths.warehouse))
    if manifest is not None:
        held |= set(manifest.traces)
    return [{"trace_id": tid, "file_name": "(marts only)", "status": "orphan"} for tid in sorted(held - known)]


# -- parser --------------------------------------------------------------------------------------------------------
def add_forget(sub: argparse._SubParsersAction) -> None:
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
