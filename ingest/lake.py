"""The Parquet lake: per-trace event partitions published atomically, and the trace catalogue.

Layout under the lake root::

    events/trace_id=<sha256>/part-0.parquet   events in the common schema (Hive partition per trace)
    catalogue/<sha256>.parquet                one catalogue row per trace (ingested or failed)
    _staging/                                 work in progress; never read

A partition is written under ``_staging`` and renamed into place only when complete, so a reader
never sees half a trace, and a failed ingest leaves nothing behind but its catalogue row.

The root may also be ``s3://bucket/prefix`` on any S3-compatible store (endpoint and credentials:
``taxbreak.config.S3Settings``).  Object storage has no directory rename, so there each partition is its one
object ``part-0.parquet``: written to a local temporary file, then uploaded (s3fs) by a single PUT or a
multipart upload, which S3 makes visible only when completed (a reader sees the old object or the new one,
never part of one; a failed part aborts the upload).  Catalogue rows are single objects likewise, and nothing
is staged in the store, so a failed ingest leaves only its catalogue object.  Reads use
``pyarrow.fs.S3FileSystem``; DuckDB reads such a lake through ``Lake.register_filesystem``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from taxbreak.config import S3Settings, is_s3_url, normalise_s3_url
from taxbreak.ingest.base import TraceInfo
from taxbreak.schemas import CATALOGUE_SCHEMA, EVENT_SCHEMA, SCHEMA_VERSION, check_schema_version

if TYPE_CHECKING:
    import duckdb

EVENTS_DIR = "events"
CATALOGUE_DIR = "catalogue"
STAGING_DIR = "_staging"
EVENTS_FILE = "part-0.parquet"  # a trace's one events file in its partition
# How event columns are encoded (measured on bench/bench_nsys_ingest.py's 5 M rows: 1.57 -> 1.18 CPU-s of writing,
# 18.8 -> 9.0 MB of Parquet):
# - args_json is near-unique JSON text: no dictionary, no statistics, zstd.
# - start times and correlation ids are near-unique, mostly increasing integers: delta-encoded (no dictionary),
#   zstd, statistics kept (time-range pruning).
# - the other columns are dictionary-encoded; their pages are a few bytes of run lengths, so only the ones with
#   long or many distinct values (names, durations, other ids) are worth a zstd context per column chunk.
# - min/max statistics only where a filter can use them: numbers, kind and category.
_EVENT_DELTA_COLUMNS = {"ts_ns": "DELTA_BINARY_PACKED", "correlation_id": "DELTA_BINARY_PACKED"}
_EVENT_DICT_COLUMNS = [f.name for f in EVENT_SCHEMA if f.name != "args_json" and f.name not in _EVENT_DELTA_COLUMNS]
_EVENT_STATS_COLUMNS = [f.name for f in EVENT_SCHEMA if f.type != pa.string() or f.name in ("kind", "category")]
_EVENT_ZSTD_COLUMNS = {"args_json", "ts_ns", "correlation_id", "external_id", "flow_id", "name", "raw_name",
                       "short_name", "dur_ns"}
_EVENT_COMPRESSION = {f.name: ("zstd" if f.name in _EVENT_ZSTD_COLUMNS else "none") for f in EVENT_SCHEMA}


class ObjectPath:
    """A path in an object store, shaped like the ``Path`` a local lake uses: ``/`` joins, ``str`` is the
    ``s3://`` URL (what DuckDB reads), ``exists()`` asks the store (a prefix exists when an object is under it)."""

    __slots__ = ("fs", "key")

    def __init__(self, fs: pafs.FileSystem, key: str) -> None:
        self.fs = fs
        self.key = key  # bucket/prefix/..., no scheme

    def __truediv__(self, name: str) -> ObjectPath:
        return ObjectPath(self.fs, f"{self.key}/{name}")

    def __str__(self) -> str:
        return f"s3://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.fs, self.key.rsplit("/", 1)[0])

    def exists(self) -> bool:
        return self.fs.get_file_info(self.key).type != pafs.FileType.NotFound


class Lake:
    """The lake at ``root``: a local folder, or ``s3://bucket/prefix`` with ``s3`` settings (default: from the
    environment, ``S3Settings.from_env``).  ``Lake(other_lake)`` is the same lake with the same settings."""

    root: Path | ObjectPath

    def __init__(self, root: str | os.PathLike[str] | Lake, s3: S3Settings | None = None) -> None:
        if isinstance(root, Lake):
            self.root, self.url, self.s3, self.fs = root.root, root.url, root.s3, root.fs
            return
        if is_s3_url(root):
            self.url = normalise_s3_url(root)
            self.s3: S3Settings | None = s3 or S3Settings.from_env()
            self.fs: pafs.FileSystem = self.s3.arrow_filesystem()
            self.root = ObjectPath(self.fs, self.url[len("s3://"):])
        else:
            self.root = Path(root)
            self.url = str(self.root)
            self.s3 = None
            self.fs = pafs.LocalFileSystem()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"Lake({self.url!r})"

    @property
    def is_object_store(self) -> bool:
        return isinstance(self.root, ObjectPath)

    # -- paths -------------------------------------------------------------------------------
    def events_dir(self, trace_id: str) -> Path | ObjectPath:
        return self.root / EVENTS_DIR / f"trace_id={trace_id}"

    def events_path(self, trace_id: str) -> Path | ObjectPath:
        return self.events_dir(trace_id) / EVENTS_FILE

    def catalogue_path(self, trace_id: str) -> Path | ObjectPath:
        return self.root / CATALOGUE_DIR / f"{trace_id}.parquet"

    def events_glob(self) -> str:
        return str(self.root / EVENTS_DIR / "*" / "*.parquet")

    def catalogue_glob(self) -> str:
        return str(self.root / CATALOGUE_DIR / "*.parquet")

    def _key(self, path: Path | ObjectPath) -> str:
        """``path`` as this lake's filesystem names it."""
        return path.key if isinstance(path, ObjectPath) else str(path)

    def _staging(self) -> Path:
        if self.is_object_store:  # staged on local disk, uploaded whole when complete
            return Path(tempfile.mkdtemp(prefix="taxbreak-lake-"))
        path = self.root / STAGING_DIR / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def register_filesystem(self, con: duckdb.DuckDBPyConnection) -> None:
        """Let DuckDB connection ``con`` read this lake's ``s3://`` paths (an fsspec filesystem with this lake's
        endpoint and credentials, replacing one registered earlier); nothing to do for a local lake."""
        if self.s3 is None:
            return
        if con.filesystem_is_registered("s3"):
            con.unregister_filesystem("s3")
        con.register_filesystem(self.s3.fsspec_filesystem())

    # -- reading -----------------------------------------------------------------------------
    def _is_file(self, path: Path | ObjectPath) -> bool:
        return self.fs.get_file_info(self._key(path)).type == pafs.FileType.File

    def _read(self, path: Path | ObjectPath) -> pa.Table:
        table = pq.read_table(self._key(path), filesystem=self.fs)
        check_schema_version(table.schema.metadata, str(path))
        return table

    def has_events(self, trace_id: str) -> bool:
        return self._is_file(self.events_path(trace_id))

    def catalogue_row(self, trace_id: str) -> dict | None:
        path = self.catalogue_path(trace_id)
        if not self._is_file(path):
            return None
        rows = self._read(path).to_pylist()
        return rows[0] if rows else None

    def catalogue_paths(self) -> list[Path | ObjectPath]:
        """Every catalogue file, by name (temporary files of a writer excluded)."""
        selector = pafs.FileSelector(self._key(self.root / CATALOGUE_DIR), allow_not_found=True)
        names = sorted(
            info.base_name for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
            and not info.base_name.startswith(".")
        )
        return [self.root / CATALOGUE_DIR / name for name in names]

    def catalogue(self) -> pa.Table:
        """All catalogue rows (refusing files of an unknown schema major version)."""
        tables = [self._read(path).cast(CATALOGUE_SCHEMA) for path in self.catalogue_paths()]
        if not tables:
            return CATALOGUE_SCHEMA.empty_table()
        return pa.concat_tables(tables)

    def read_events(self, trace_id: str) -> pa.Table:
        return self._read(self.events_path(trace_id))

    def check_events_version(self, trace_id: str) -> str:
        """The schema version of a trace's events file, read from its footer alone; refuses unknown majors."""
        path = self.events_path(trace_id)
        return check_schema_version(pq.read_schema(self._key(path), filesystem=self.fs).metadata, str(path))

    # -- writing -----------------------------------------------------------------------------
    def write_events(
        self, trace_id: str, batches: Iterable[pa.RecordBatch], info: TraceInfo, *, file_name: str,
        source_path: str, file_bytes: int,
    ) -> dict:
        """Stream ``batches`` into a staged partition, publish it atomically, record the catalogue row."""
        staging = self._staging()
        try:
            part = staging / EVENTS_FILE
            kinds: Counter[str] = Counter()
            n_rows = 0
            t_min: int | None = None
            t_max: int | None = None
            with pq.ParquetWriter(
                part, EVENT_SCHEMA, compression=_EVENT_COMPRESSION, use_dictionary=_EVENT_DICT_COLUMNS,
                write_statistics=_EVENT_STATS_COLUMNS, column_encoding=_EVENT_DELTA_COLUMNS,
            ) as writer:
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    if batch.schema != EVENT_SCHEMA:
                        batch = batch.cast(EVENT_SCHEMA)
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
            if isinstance(target, ObjectPath):  # one object, replaced whole by the upload's completion
                self._upload(part, self.events_path(trace_id))
            else:
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

    def _uploader(self):  # noqa: ANN202 - s3fs.S3FileSystem
        """Uploads go through s3fs: one PUT, or a multipart upload it aborts when a part fails.  (pyarrow's S3
        output stream completes the upload when closed, also on an exception, and exposes no abort.)"""
        assert self.s3 is not None
        return self.s3.fsspec_filesystem()

    def _upload(self, local: Path, target: ObjectPath) -> None:
        """Copy ``local`` to the object ``target``; the object appears (or is replaced) only when complete."""
        self._uploader().put_file(str(local), target.key)

    def write_catalogue_row(self, row: dict) -> None:
        path = self.catalogue_path(row["trace_id"])
        table = pa.Table.from_pylist([row], schema=CATALOGUE_SCHEMA)
        if isinstance(path, ObjectPath):
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            self._uploader().pipe_file(path.key, sink.getvalue().to_pybytes())  # one PUT
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(table, tmp)
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
