"""``taxbreak ingest`` and ``taxbreak traces``: trace files into the lake, and the lake's catalogue."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taxbreak.cli.common import IngestProgress, bars_on, dumps, emit, note
from taxbreak.config import Paths, add_path_args, describe_origin, ingest_limits
from taxbreak.ingest import Lake, ingest_file, iter_trace_files
from taxbreak.ingest.links import link_counts
from taxbreak.ingest.sidecar import side_file_errors
from taxbreak.read import readmodel
from taxbreak.store.query import align_columns, printable


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


def _earlier(res: Any) -> str:
    """When the recorded outcome a replayed result repeats was written (UTC, to the second)."""
    ns = (res.row or {}).get("ingested_at_ns")
    if ns is None:
        return "at an unknown time"
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def replayed_failure(res: Any) -> str:
    """A failure recorded by an earlier ingest of the same bytes, said to be that (issue 30: after a full disk was
    freed, the old "No space left" read as new), with how to try again."""
    name = (res.row or {}).get("file_name") or Path(res.path).name
    return (f"FAILED earlier ({_earlier(res)}; the content is unchanged, so it was not read again): {res.error} — "
            f"`taxbreak retry {name}` tries it again (or `taxbreak ingest --force {res.path}`)")


def _links_skipped(links: list[Path]) -> str:
    """What a folder listing left out as links, said (empty when none)."""
    if not links:
        return ""
    n = len(links)
    return (f" ({n} symbolic link{'' if n == 1 else 's'} skipped, e.g. {min(links)}: folders are read without "
            "following links; name a link itself to ingest what it points to)")


def cmd_ingest(args: argparse.Namespace) -> int:
    paths = Paths.from_args(args)
    lake = Lake(paths.lake)
    links: list[Path] = []
    files = iter_trace_files(args.paths, links)
    if not files:
        emit("no trace files found in: " + " ".join(args.paths) + _links_skipped(links), err=True)
        return 2
    note(args, f"ingesting {len(files)} file(s) into the lake {paths.lake}{_links_skipped(links)}")
    failed = 0
    results = []
    for i, f in enumerate(files, 1):
        bar = IngestProgress(f"[{i}/{len(files)}] {Path(f).name[-40:]}", bars_on(args))
        t0 = time.perf_counter()
        try:
            res = ingest_file(f, _ObservedLake(lake, bar), force=args.force, cache_dir=paths.cache, progress=bar,
                              limits=ingest_limits())
        finally:
            bar.close()
        seconds = time.perf_counter() - t0
        if args.json:
            results.append({"file": str(f), "trace_id": res.trace_id, "status": res.status, "error": res.error,
                            "earlier": _earlier(res) if res.replayed else None, "seconds": round(seconds, 3),
                            "catalogue": catalogue_json(res.row) if res.row is not None else None})
        if res.status == "failed":
            failed += 1
            if not args.json:
                emit(replayed_failure(res) if res.replayed else f"FAILED {res.error}", err=True)
            continue
        if res.status == "not_a_trace":  # recorded as such, never analysed; not a failure of the run
            if not args.json:
                emit(f"IGNORED (not a trace) {res.error}", err=True)
            continue
        if not args.json:
            emit(format_ingest_result(paths, res) + (f"\n  ({seconds:.1f} s)" if args.verbose else ""))
            for e in side_file_errors((res.row or {}).get("metadata_json")):
                emit(f"WARNING {e}", err=True)
    if args.json:
        print(dumps({"lake": str(paths.lake), "files": results, "failed": failed}))
    if failed:
        rest = "; the others went through" if failed < len(files) else ""
        emit(f"{failed} of {len(files)} file(s) failed{rest}", err=True)
    return 1 if failed else 0


def cmd_traces(args: argparse.Namespace) -> int:
    """The catalogue, oldest first. Files that are no trace at all (status ``not_a_trace``: a stray config.json in
    an ingested folder) stay recorded, so that the next ingest of the folder skips them for the price of a hash and
    ``summary`` / ``analyze`` can say what a name is, but they are not listed unless ``--all``: one count line says
    how many are left out. Failed traces are always listed (``taxbreak retry`` takes them)."""
    paths = Paths.from_args(args)
    listed, hidden = readmodel.catalogue(paths.lake, all=args.all)
    rows = listed.to_pylist()
    if args.json:
        print(dumps([catalogue_json(r) for r in rows]))
        return 0
    if not rows and not hidden:
        origin = "--lake" if getattr(args, "lake", None) else describe_origin(paths.origins()["lake"])
        emit(f"the catalogue at {paths.lake} is empty (that lake path comes from {origin}; run from the project "
             "folder, pass --lake, or set TAXBREAK_LAKE / taxbreak.toml): run `taxbreak ingest PATH` to fill it")
        return 0
    cells = [["trace_id", "status", "format", "events", "GPUs", "file / error   (GPUs: that ran kernels)"]]
    for r in rows:
        tail = r["file_name"] if r["status"] == "ingested" else f"{r['file_name']}: {r['error']}"
        if r["status"] == "ingested":
            tail += "".join(f"; {e}" for e in side_file_errors(r.get("metadata_json")))
        cells.append([r["trace_id"][:16], r["status"], r["source_format"] or "-", f"{r['event_count']:,}", _gpus(r),
                      printable(tail, cell=True)])
    if rows:  # widths from the content (a fixed status column was narrower than not_a_trace)
        for line in align_columns(cells, [False, False, False, True, True, False]):
            emit(line)
    if hidden:
        emit(f"({hidden} file{' that is not a trace' if hidden == 1 else 's that are not traces'} (not_a_trace) "
             f"left out: `taxbreak traces --all` lists {'it' if hidden == 1 else 'them'})")
    note(args, f"({len(rows)} trace(s) listed of {len(rows) + hidden} in {paths.lake})")
    return 0


# -- parsers -------------------------------------------------------------------------------------------------------
def add_ingest(sub: argparse._SubParsersAction) -> None:
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


def add_traces(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "traces", help="list the trace catalogue", description="List the traces in the catalogue with their outcome "
        "(ingested, or failed with the reason). Files that are not traces at all (not_a_trace: a config.json in an "
        "ingested folder) are recorded, so that ingesting the folder again skips them, but only counted unless --all."
    )
    p.add_argument("--all", action="store_true", help="also list the files that are not traces (status not_a_trace; "
                   "left out by default, counted in one line)")
    p.add_argument("--json", action="store_true", help="print the listed catalogue rows as JSON (with --all: every "
                   "row)")
    add_path_args(p)
    p.set_defaults(func=cmd_traces)
