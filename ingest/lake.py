"""The Parquet lake: per-trace event partitions published atomically, and the trace catalogue.

Layout under the lake root::

    events/trace_id=<sha256>/part-0.parquet   events in the common schema (Hive partition per trace)
    catalogue/<sha256>.parquet                one catalogue row per trace (ingested or failed)
    _staging/                                 work in progress; never read

A partition is written under ``_staging`` and renamed into place only when complete, so a reader
never sees half a trace, and a failed ingest leaves nothing behind but its catalogue row.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from taxbreak.ingest.base import TraceInfo
from taxbreak.schemas import CATALOGUE_SCHEMA, EVENT_SCHEMA, SCHEMA_VERSION, check_schema_version

EVENTS_DIR = "events"
CATALOGUE_DIR = "catalogue"
STAGING_DIR = "_staging"
# args_json is near-unique JSON text: a dictionary and min/max statistics cost write time and bytes, help no read.
_EVENT_DICT_COLUMNS = [f.name for f in EVENT_SCHEMA if f.name != "args_json"]


class Lake:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # -- paths -------------------------------------------------------------------------------
    def events_dir(self, trace_id: str) -> Path:
        return self.root / EVENTS_DIR / f"trace_id={trace_id}"

    def catalogue_path(self, trace_id: str) -> Path:
        return self.root / CATALOGUE_DIR / f"{trace_id}.parquet"

    def events_glob(self) -> str:
        return str(self.root / EVENTS_DIR / "*" / "*.parquet")

    def catalogue_glob(self) -> str:
        return str(self.root / CATALOGUE_DIR / "*.parquet")

    def _staging(self) -> Path:
        path = self.root / STAGING_DIR / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    # -- reading -----------------------------------------------------------------------------
    def has_events(self, trace_id: str) -> bool:
        return (self.events_dir(trace_id) / "part-0.parquet").exists()

    def catalogue_row(self, trace_id: str) -> dict | None:
        path = self.catalogue_path(trace_id)
        if not path.exists():
            return None
        table = pq.read_table(path)
        check_schema_version(table.schema.metadata, str(path))
        rows = table.to_pylist()
        return rows[0] if rows else None

    def catalogue(self) -> pa.Table:
        """All catalogue rows (refusing files of an unknown schema major version)."""
        tables = []
        cat_dir = self.root / CATALOGUE_DIR
        for path in sorted(cat_dir.glob("*.parquet")) if cat_dir.exists() else []:
            table = pq.read_table(path)
            check_schema_version(table.schema.metadata, str(path))
            tables.append(table.cast(CATALOGUE_SCHEMA))
        if not tables:
            return CATALOGUE_SCHEMA.empty_table()
        return pa.concat_tables(tables)

    def read_events(self, trace_id: str) -> pa.Table:
        path = self.events_dir(trace_id) / "part-0.parquet"
        table = pq.read_table(path)
        check_schema_version(table.schema.metadata, str(path))
        return table

    # -- writing -----------------------------------------------------------------------------
    def write_events(
        self, trace_id: str, batches: Iterable[pa.RecordBatch], info: TraceInfo, *, file_name: str,
        source_path: str, file_bytes: int,
    ) -> dict:
        """Stream ``batches`` into a staged partition, publish it atomically, record the catalogue row."""
        staging = self._staging()
        try:
            part = staging / "part-0.parquet"
            kinds: Counter[str] = Counter()
            n_rows = 0
            t_min: int | None = None
            t_max: int | None = None
            with pq.ParquetWriter(
                part, EVENT_SCHEMA, compression="zstd", use_dictionary=_EVENT_DICT_COLUMNS,
                write_statistics=_EVENT_DICT_COLUMNS,
            ) as writer:
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    if batch.schema != EVENT_SCHEMA:
                        batch = pa.Table.from_batches([batch]).cast(EVENT_SCHEMA).combine_chunks().to_batches()[0]
                    writer.write_batch(batch)
                    n_rows += batch.num_rows
                    for item in pc.value_counts(batch.column("kind")).to_pylist():
                        kinds[item["values"]] += item["counts"]
                    ts = batch.column("ts_ns")
                    end = pc.add(ts, pc.fill_null(batch.column("dur_ns"), 0))
                    lo, hi = pc.min(ts).as_py(), pc.max(end).as_py()
                    if lo is not None:
                        t_min = lo if t_min is None else min(t_min, lo)
                    if hi is not None:
                        t_max = hi if t_max is None else max(t_max, hi)
            target = self.events_dir(trace_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():  # identical content re-ingested on request: replace the old copy whole
                shutil.rmtree(target)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        row = catalogue_row(
            trace_id, file_name=file_name, source_path=source_path, file_bytes=file_bytes, info=info,
            status="ingested", error=None, event_count=n_rows, event_counts=dict(sorted(kinds.items())),
            duration_ns=(t_max - t_min) if t_min is not None and t_max is not None else None,
        )
        self.write_catalogue_row(row)
        return row

    def write_catalogue_row(self, row: dict) -> None:
        path = self.catalogue_path(row["trace_id"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(pa.Table.from_pylist([row], schema=CATALOGUE_SCHEMA), tmp)
        os.replace(tmp, path)

    def record_failure(
        self, trace_id: str, *, file_name: str, source_path: str, file_bytes: int, error: str,
        source_format: str | None,
    ) -> dict:
        """A failed trace keeps no events; a previously good copy of the same content is kept."""
        row = catalogue_row(
            trace_id, file_name=file_name, source_path=source_path, file_bytes=file_bytes,
            info=TraceInfo(source_format=source_format or ""), status="failed", error=error,
            event_count=0, event_counts={}, duration_ns=None,
        )
        if source_format is None:
            row["source_format"] = None
        self.write_catalogue_row(row)
        return row

    def clean_staging(self) -> None:
        shutil.rmtree(self.root / STAGING_DIR, ignore_errors=True)


def catalogue_row(
    trace_id: str, *, file_name: str, source_path: str, file_bytes: int, info: TraceInfo, status: str,
    error: str | None, event_count: int, event_counts: dict[str, int], duration_ns: int | None,
) -> dict:
    skipped = dict(sorted(info.skipped_counts.items()))
    source_count = info.source_event_count
    if source_count is None and status == "ingested":
        source_count = event_count + sum(skipped.values())
    return {
        "trace_id": trace_id,
        "file_name": file_name,
        "source_path": source_path,
        "file_bytes": file_bytes,
        "source_format": info.source_format,
        "tool_versions_json": json.dumps(info.tool_versions, sort_keys=True, default=str),
        "gpu_names_json": json.dumps(info.gpu_names),
        "gpu_count": len(info.gpu_names),
        "host_name": info.host_name,
        "start_epoch_ns": info.start_epoch_ns,
        "duration_ns": duration_ns,
        "event_count": event_count,
        "event_counts_json": json.dumps(event_counts, sort_keys=True),
        "skipped_counts_json": json.dumps(skipped),
        "source_event_count": source_count,
        "metadata_json": json.dumps(info.metadata, sort_keys=True, default=str),
        "ingested_at_ns": time.time_ns(),
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "error": error,
    }
