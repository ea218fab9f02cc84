"""``taxbreak retry``: re-ingest failed traces from the source their catalogue row recorded (no Dagster here).

A failed file is otherwise never retried while its content is unchanged (the sensor and the sweep skip content
the catalogue knows).  A retry forces ``ingest_file(..., force=True)`` and, for the traces that now ingest,
rebuilds the warehouse tables for those traces through the one run every writer takes (``taxbreak.engine.runner.run``).
Once a trace is ingested it is never retried: when its tables fail (a full disk at the COMMIT), the fault's line says
to run ``taxbreak analyze --trace <id>`` (issue 30).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from taxbreak.config import Paths
from taxbreak.engine import runner
from taxbreak.engine.plan import plan_tables
from taxbreak.ingest import IngestResult, Lake
from taxbreak.ingest.objects import S3Settings
from taxbreak.store.bucket import bucket_for_url, ingest_from
from taxbreak.store.faults import with_then
from taxbreak.store.tracenames import TraceAmbiguous, TraceNotFound, catalogue_candidates, resolve

__all__ = ["cmd_retry", "rebuild_tables", "retry_row", "select_failed"]


@dataclass
class RetryOutcome:
    trace_id: str
    source_path: str
    result: IngestResult | None
    error: str | None


def select_failed(lake: Lake, prefix: str | None) -> list[dict]:
    """The failed catalogue row ``prefix`` names (taxbreak.store.tracenames: id prefix, file name, stem or unique
    substring; TraceAmbiguous when it names several), every failed row for None, none when it names no failed
    trace."""

    rows = [r for r in lake.catalogue().to_pylist() if r["status"] == "failed"]
    if prefix is not None:
        try:
            tid = resolve(catalogue_candidates(rows), prefix, "failed trace")
        except TraceNotFound:
            return []
        rows = [r for r in rows if r["trace_id"] == tid]
    return sorted(rows, key=lambda r: r["ingested_at_ns"])


def retry_row(row: dict, lake: Lake, cache_dir: Path | None = None) -> RetryOutcome:
    source = row["source_path"]
    bucket, name = bucket_for_url(source, S3Settings.from_env())
    local = bucket.local_path(name)
    if local is not None and not local.exists():
        return RetryOutcome(row["trace_id"], source, None, f"{source}: the source file is gone")
    try:
        res = ingest_from(bucket, name, lake, force=True, cache_dir=cache_dir)
    except OSError as exc:  # the object could not be downloaded
        return RetryOutcome(row["trace_id"], source, None, f"cannot download {source}: {exc}")
    return RetryOutcome(row["trace_id"], source, res, res.error)


def rebuild_tables(warehouse: Path, lake_root: Path, trace_ids: list[str], hooks=None) -> dict[str, int]:  # noqa: ANN001
    """Every sql/ file for ``trace_ids`` through the one run (``taxbreak.engine.runner.run``: computed outside the
    writer
    lock, checked, published in one transaction under it, then the marts and the readers' snapshot); rows per
    table, in the plan's order.  ``hooks``: the run's event callback."""

    counts = runner.run(runner.Where(warehouse, lake_root), traces=trace_ids, hooks=hooks).counts
    return {n: counts[n] for n in plan_tables() if n in counts}


def analyze_command(trace_ids: list[str]) -> str:
    """The command that builds the tables of ``trace_ids`` (ingested; their tables not built)."""
    return "taxbreak analyze " + " ".join(f"--trace {t[:16]}" for t in trace_ids)


def _ingested_hint(lake: Lake, prefix: str) -> str:
    """For a retry of a trace that is not failed: what to run when it is ingested (its tables are ``analyze``'s)."""
    try:
        tid = resolve(catalogue_candidates(lake.catalogue().to_pylist()), prefix, "trace")
    except (TraceNotFound, TraceAmbiguous):
        return ""
    row = lake.catalogue_row(tid)
    if row is None or row["status"] != "ingested":
        return ""
    return f": {row['file_name']} is ingested; `{analyze_command([tid])}` builds its tables"


def cmd_retry(args) -> int:  # noqa: ANN001 - argparse.Namespace from taxbreak.cli
    if not args.prefix and not args.all_failed:
        print("give a TRACE_ID prefix or --all-failed", file=sys.stderr)
        return 2
    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    try:
        rows = select_failed(lake, None if args.all_failed else args.prefix)
    except TraceAmbiguous as exc:
        print(f"retry: {exc}, or --all-failed", file=sys.stderr)
        return 2
    if not rows and args.all_failed:
        stored = lake.catalogue().num_rows
        if not stored:  # a lake with nothing in it: most likely not the lake meant
            print(f"the catalogue at {paths.lake} is empty: nothing was ingested there (--lake, TAXBREAK_LAKE or "
                  "taxbreak.toml name the lake)", file=sys.stderr)
            return 2
        print(f"no failed trace among the {stored} in the catalogue at {paths.lake}: nothing to retry")
        return 0  # nothing to retry is no mistake (a scheduled `retry --all-failed` succeeds)
    if not rows:
        print(f"no failed trace matches {args.prefix!r}{_ingested_hint(lake, args.prefix)}", file=sys.stderr)
        return 2
    ok: list[str] = []
    still = 0
    for row in rows:
        out = retry_row(row, lake, cache_dir=paths.cache)
        if out.result is not None and out.result.status == "ingested":
            ok.append(out.result.trace_id)
            print(f"[ingested] {out.result.trace_id[:16]}  {row['file_name']}  "
                  f"({out.result.row['event_count']:,} events)")
        else:
            still += 1
            print(f"[failed]   {row['trace_id'][:16]}  {row['file_name']}: {out.error}", file=sys.stderr)
    if ok and not args.no_tables:
        # ingested now: a failure from here on is the tables', and a second retry would find no failed trace to
        # retry (issue 30): the fault's line says to run analyze for them instead
        try:
            counts = rebuild_tables(paths.warehouse, paths.lake, ok)
        except Exception as exc:
            with_then(exc, f"run `{analyze_command(ok)}`: {'the trace is' if len(ok) == 1 else 'the traces are'} "
                           "ingested, the tables were not built")
            raise
        print(f"tables rebuilt for {len(ok)} trace(s): " + ", ".join(f"{t} {n:,}" for t, n in counts.items()))
    print(f"{len(ok)} of {len(rows)} failed trace(s) now ingested")
    return 1 if still else 0
