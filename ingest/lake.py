"""The Parquet lake: per-trace event partitions published atomically, and the trace catalogue.

Layout under the lake root::

    events/trace_id=<sha256>/part-0.parquet   events in the common schema (Hive partition per trace)
    requests/trace_id=<sha256>/part-0.parquet the per-step request list read from <trace>.requests.jsonl[.gz]
                                              (taxbreak.ingest.request_lists); only traces that had one
    catalogue/<sha256>.parquet                one catalogue row per trace (ingested or failed)
    _staging/                                 work in progress; never read

A partition is written under ``_staging`` and its file renamed into place (``os.replace``: an old copy is
swapped, never removed first) only when complete, so a reader never sees half a trace, and a failed ingest
leaves nothing behind but its catalogue row.  The events file and then the catalogue row are published under
a per-trace lock (``_locks/<sha256>.lock``, ``flock``: released by the kernel when the process dies); a trace
counts as stored only when its catalogue row says 'ingested' *and* its events file exists (``Lake.is_stored``).
A second writer of the same content that finds it stored when it takes the lock has lost a race to identical
bytes: that is success, and nothing is written.  ``Lake.recover`` removes what dead processes left: staging
folders and temporary catalogue files named after a pid of this host that is gone, and completes the publish
of an events partition without a catalogue row (a writer killed between the two renames) whose lock nobody
holds: the events file carries its catalogue row in its footer (key ``taxbreak.catalogue_row``), so the row is
written from it (a file without one is removed).  The catalogue row is the commit point: readers take traces
from the catalogue (``is_stored``), never from a listing of ``events/``.

The root may also be ``s3://bucket/prefix`` on any S3-compatible store (endpoint and credentials:
``taxbreak.ingest.objects.S3Settings``).  Object storage has no directory rename, so there each partition is its one
object ``part-0.parquet``: written to a local temporary file, then uploaded (s3fs) by a single PUT or a
multipart upload, which S3 makes visible only when completed (a reader sees the old object or the new one,
never part of one; a failed part aborts the upload).  Catalogue rows are single objects likewise, and nothing
is staged in the store, so a failed ingest leaves only its catalogue object.  Reads use
``pyarrow.fs.S3FileSystem``; DuckDB reads such a lake through ``Lake.register_filesystem``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from taxbreak.ingest.base import TraceInfo, clean_dead, make_owned_dir, owned_name, prefetched
from taxbreak.ingest.objects import S3Settings, S3Store, Store, open_store
from taxbreak.ingest.redact import redact, redact_args, redact_location, redact_names
from taxbreak.schemas import CATALOGUE_SCHEMA, EVENT_SCHEMA, SCHEMA_VERSION, check_schema_version

if TYPE_CHECKING:
    import duckdb

EVENTS_DIR = "events"
REQUESTS_DIR = "requests"  # requests/trace_id=<sha256>/part-0.parquet: a trace's request list (request_lists.py)
CATALOGUE_DIR = "catalogue"
STAGING_DIR = "_staging"
LOCKS_DIR = "_locks"
STAGING_PREFIX = "w-"  # _staging/w-<host>-<pid>-<random>: whose staging folder it is (base.owned_name)
OBJECT_STAGING_PREFIX = "taxbreak-lake-"  # <temp>/taxbreak-lake-<host>-<pid>-<random>: staged for an S3 upload
TMP_PREFIX = ".tmp-"  # catalogue/.tmp-<host>-<pid>-<random>-<sha256>.parquet while a row is written
INT64_MAX = (1 << 63) - 1
FOOTER_ROW_KEY = "taxbreak.catalogue_row"  # the catalogue row, in the events file's footer (recovery)
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
            self.root, self.url, self.s3, self.store = root.root, root.url, root.s3, root.store
            self.fs = root.fs
            return
        # the one object store of the lake and the marts (taxbreak.ingest.objects): every read, listing, put and
        # delete of the lake's files goes through it; ``root`` / ``fs`` give the same files as paths for pyarrow
        self.store: Store = open_store(root, s3)
        self.url = self.store.url
        self.fs: pafs.FileSystem = self.store.arrow_fs
        if isinstance(self.store, S3Store):
            self.s3: S3Settings | None = self.store.s3
            self.root = ObjectPath(self.fs, self.store.prefix)
        else:
            self.s3 = None
            self.root = Path(root)

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

    def requests_dir(self, trace_id: str) -> Path | ObjectPath:
        return self.root / REQUESTS_DIR / f"trace_id={trace_id}"

    def requests_path(self, trace_id: str) -> Path | ObjectPath:
        return self.requests_dir(trace_id) / EVENTS_FILE

    def has_requests(self, trace_id: str) -> bool:
        return self._is_file(self.requests_path(trace_id))

    def publish_requests(self, trace_id: str, write: Callable[[Path], dict]) -> dict:
        """The trace's request list: ``write(staged_path)`` writes it (raising when refused: nothing is published,
        and a list published before is removed, since it no longer is the one beside the trace), then it is moved
        into place under the trace's lock. Returns what ``write`` returned."""
        staging = self._staging()
        try:
            part = staging / EVENTS_FILE
            try:
                info = write(part)
            except Exception:
                with self.trace_lock(trace_id):
                    self.remove_requests(trace_id)
                raise
            with self.trace_lock(trace_id):
                self.store.put_file(part, self._rel(self.requests_path(trace_id)))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return info

    def remove_requests(self, trace_id: str) -> bool:
        """Remove the trace's request list, if any; True when there was one."""
        target = self.requests_path(trace_id)
        if not self._is_file(target):
            return False
        self.store.delete([self._rel(target)])
        return True

    def catalogue_path(self, trace_id: str) -> Path | ObjectPath:
        return self.root / CATALOGUE_DIR / f"{trace_id}.parquet"

    def events_glob(self) -> str:
        return str(self.root / EVENTS_DIR / "*" / "*.parquet")

    def catalogue_glob(self) -> str:
        return str(self.root / CATALOGUE_DIR / "*.parquet")

    def _key(self, path: Path | ObjectPath) -> str:
        """``path`` as this lake's filesystem names it."""
        return path.key if isinstance(path, ObjectPath) else str(path)

    def _rel(self, path: Path | ObjectPath) -> str:
        """``path`` as the store names it: relative to the lake's root."""
        if isinstance(path, ObjectPath):
            return path.key[len(self.store.key("")) + 1:]
        return Path(path).relative_to(self.root).as_posix()

    def _staging(self) -> Path:
        if self.is_object_store:  # staged on local disk, uploaded whole when complete
            return make_owned_dir(OBJECT_STAGING_PREFIX)
        return make_owned_dir(STAGING_PREFIX, self.root / STAGING_DIR)

    @contextlib.contextmanager
    def trace_lock(self, trace_id: str, *, wait: bool = True):  # noqa: ANN201 - a context manager of bool
        """Hold the per-trace publish lock (local lakes; an object store has none: yields True).  With
        ``wait=False`` yields False at once when another process holds it."""
        if self.is_object_store:
            yield True
            return
        locks = self.root / LOCKS_DIR
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{trace_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # releases the lock

    def is_stored(self, trace_id: str) -> dict | None:
        """The catalogue row of a trace stored whole (row 'ingested' and events file present), else None."""
        row = self.catalogue_row(trace_id)
        if row is not None and row["status"] == "ingested" and self.has_events(trace_id):
            return row
        return None

    def recover(self) -> dict[str, int]:
        """Remove what dead writers left in a local lake (see the module doc); returns counts per kind.

        Safe alongside live writers: only entries named after a dead pid of this host are removed, and an
        orphan partition only while holding its trace's lock (a live writer holds it between its renames)."""
        out = {"staging": 0, "catalogue_tmp": 0, "orphan_partitions": 0, "completed_publishes": 0}
        if self.is_object_store:  # staged on local disk; nothing half-written is ever visible in the store
            out["staging"] = clean_dead(None, OBJECT_STAGING_PREFIX)
            return out
        out["staging"] = clean_dead(self.root / STAGING_DIR, STAGING_PREFIX)
        out["catalogue_tmp"] = clean_dead(self.root / CATALOGUE_DIR, TMP_PREFIX)
        events = self.root / EVENTS_DIR
        try:
            parts = [e.name for e in os.scandir(events) if e.name.startswith("trace_id=")]
        except OSError:
            return out
        for name in parts:
            trace_id = name[len("trace_id="):]
            if self.catalogue_path(trace_id).exists():
                continue
            with self.trace_lock(trace_id, wait=False) as held:
                if held and not self.catalogue_path(trace_id).exists():
                    row = self._footer_row(trace_id)
                    if row is not None:
                        self.write_catalogue_row(row)
                        out["completed_publishes"] += 1
                    else:
                        shutil.rmtree(events / name, ignore_errors=True)
                        out["orphan_partitions"] += 1
        return out

    def _footer_row(self, trace_id: str) -> dict | None:
        """The catalogue row stored in a trace's events file footer, or None (no file, unreadable, no row)."""
        try:
            meta = pq.read_metadata(self._key(self.events_path(trace_id)), filesystem=self.fs).metadata or {}
            row = json.loads(meta[FOOTER_ROW_KEY.encode()])
        except (OSError, KeyError, ValueError, pa.ArrowException):
            return None
        return row if isinstance(row, dict) and row.get("trace_id") == trace_id else None

    def register_filesystem(self, con: duckdb.DuckDBPyConnection) -> None:
        """Let DuckDB connection ``con`` read this lake's ``s3://`` paths (an fsspec filesystem with this lake's
        endpoint and credentials, replacing one registered earlier); nothing to do for a local lake."""
        self.store.register_filesystem(con)

    # -- reading -----------------------------------------------------------------------------
    def _is_file(self, path: Path | ObjectPath) -> bool:
        return self.store.is_file(self._rel(path))

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
        names = [n for n in self.store.names(CATALOGUE_DIR) if n.endswith(".parquet") and not n.startswith(".")]
        return [self.root / CATALOGUE_DIR / name for name in names]

    def catalogue(self, trace_ids: list[str] | None = None) -> pa.Table:
        """All catalogue rows, or those of ``trace_ids`` (sorted; read from their own files only, so the cost does
        not grow with the lake), refusing files of an unknown schema major version."""
        if trace_ids is None:
            paths = self.catalogue_paths()
        else:
            paths = [p for p in (self.catalogue_path(t) for t in sorted(set(trace_ids))) if self._is_file(p)]
        tables = []
        for path in paths:
            try:
                tables.append(_to_catalogue_schema(self._read(path)))
            except FileNotFoundError:  # removed since the listing (`forget`): the lake after it (issue 30)
                continue
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
        source_path: str, file_bytes: int, replace: bool = True,
    ) -> dict:
        """Stream ``batches`` into a staged partition, publish it atomically, record the catalogue row; returns
        the row now in the catalogue (see ``publish_events``)."""
        return self.publish_events(trace_id, batches, info, file_name=file_name, source_path=source_path,
                                   file_bytes=file_bytes, replace=replace)[0]

    def publish_events(
        self, trace_id: str, batches: Iterable[pa.RecordBatch], info: TraceInfo, *, file_name: str,
        source_path: str, file_bytes: int, replace: bool = False,
    ) -> tuple[dict, bool]:
        """``write_events``, returning (catalogue row, published).  ``published`` is False when, with
        ``replace`` False, the trace was found stored when the lock was taken: a concurrent ingest of the same
        bytes won; its row is returned and nothing is written.

        Every adapter's rows pass here: rows no valid trace can hold are dropped and counted in the row's
        skipped counts (``missing_ts``: no start outside metadata; ``negative_dur``; ``end_out_of_range``:
        ts + dur beyond int64), and secrets in ``args_json`` and event names are redacted (``redact.redact_args``,
        ``redact.redact_names``)."""
        staging = self._staging()
        try:
            part = staging / EVENTS_FILE
            facts = _Facts()
            with pq.ParquetWriter(
                part, EVENT_SCHEMA, compression=_EVENT_COMPRESSION, use_dictionary=_EVENT_DICT_COLUMNS,
                write_statistics=_EVENT_STATS_COLUMNS, column_encoding=_EVENT_DELTA_COLUMNS,
            ) as writer:
                # the checks, redaction and facts run on the prefetch thread with the adapter's batches, so this
                # thread only encodes Parquet (the write overlaps them instead of alternating with them); the
                # stream is stopped here, also on an error
                with contextlib.closing(prefetched(_checked(batches, facts), 2)) as stream:
                    for batch in stream:
                        writer.write_batch(batch)
                row = catalogue_row(
                    trace_id, file_name=file_name, source_path=source_path, file_bytes=file_bytes, info=info,
                    status="ingested", error=None, event_count=facts.n_rows,
                    event_counts=dict(sorted(facts.kinds.items())), duration_ns=facts.duration_ns(),
                    extra_skipped=dict(facts.dropped), kernel_gpu_count=len(facts.kernel_devices),
                )
                writer.add_key_value_metadata({FOOTER_ROW_KEY: json.dumps(row, default=str)})
            with self.trace_lock(trace_id):
                if not replace:
                    stored = self.is_stored(trace_id)
                    if stored is not None:
                        return stored, False
                # one rename over an old copy, never removed first; on S3 one object, replaced whole by the
                # upload's completion
                self.store.put_file(part, self._rel(self.events_path(trace_id)))
                self.write_catalogue_row(row)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return row, True

    def write_catalogue_row(self, row: dict) -> None:
        """The trace's catalogue file, written whole (a local temporary file named for this process, so ``recover``
        can tell a dead writer's; on S3 one PUT)."""
        path = self.catalogue_path(row["trace_id"])
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pylist([row], schema=CATALOGUE_SCHEMA), sink)
        self.store.put_bytes(self._rel(path), sink.getvalue().to_pybytes(),
                             tmp_name=f"{owned_name(TMP_PREFIX)}-{path.name}")

    def remove_trace(self, trace_id: str) -> list[str]:
        """Remove a trace's catalogue row, then its events partition (a local partition is first renamed out of
        ``events/`` into the staging folder, so no reader sees part of it) and its request list; returns what was
        removed."""
        removed = []
        cat = self.catalogue_path(trace_id)
        if self._is_file(cat):
            self.store.delete([self._rel(cat)])
            removed.append(str(cat))
        events = self.events_dir(trace_id)
        if self.store.exists(self._rel(events)):
            if isinstance(events, Path):
                trash = self._staging() / "forgotten"
                os.rename(events, trash)
                shutil.rmtree(trash.parent, ignore_errors=True)
            else:
                self.store.delete([self._rel(events)])
            removed.append(str(events))
        if self.remove_requests(trace_id):  # its request list (taxbreak.ingest.request_lists), if it had one
            removed.append(str(self.requests_path(trace_id)))
        return removed

    def update_metadata(self, trace_id: str, update: dict) -> dict | None:
        """Merge ``update`` into a stored trace's ``metadata_json`` (a None value removes its key), under the
        trace's lock; the events are not touched.  Returns the new row, or None when the trace is not stored."""
        with self.trace_lock(trace_id):
            row = self.is_stored(trace_id)
            if row is None:
                return None
            meta = json.loads(row["metadata_json"] or "{}")
            for key, value in update.items():
                if value is None:
                    meta.pop(key, None)
                else:
                    meta[key] = value
            row = dict(row, metadata_json=json.dumps(redact(meta), sort_keys=True, default=str))
            self.write_catalogue_row(row)
        return row

    def record_failure(
        self, trace_id: str, *, file_name: str, source_path: str, file_bytes: int, error: str,
        source_format: str | None, status: str = "failed",
    ) -> dict:
        """A failed trace keeps no events.  A copy of the same content stored whole (by this process earlier or
        a concurrent one) is never overwritten: its row is returned instead (check and write under the lock).
        ``status`` 'not_a_trace': the file is no trace at all (recorded so it is not tried again)."""
        row = catalogue_row(
            trace_id, file_name=file_name, source_path=source_path, file_bytes=file_bytes,
            info=TraceInfo(source_format=source_format or ""), status=status, error=error,
            event_count=0, event_counts={}, duration_ns=None,
        )
        if source_format is None:
            row["source_format"] = None
        with self.trace_lock(trace_id):
            stored = self.is_stored(trace_id)
            if stored is not None:
                return stored
            self.write_catalogue_row(row)
        return row


def _to_catalogue_schema(table: pa.Table) -> pa.Table:
    """A catalogue file as CATALOGUE_SCHEMA: columns added by later minor versions (schemas/CHANGELOG.md) are NULL
    in files written before them."""
    for field in CATALOGUE_SCHEMA:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(CATALOGUE_SCHEMA.names).cast(CATALOGUE_SCHEMA)


def catalogue_row(
    trace_id: str, *, file_name: str, source_path: str, file_bytes: int, info: TraceInfo, status: str,
    error: str | None, event_count: int, event_counts: dict[str, int], duration_ns: int | None,
    extra_skipped: dict[str, int] | None = None, kernel_gpu_count: int | None = None,
) -> dict:
    """The catalogue row; the one place every adapter's trace metadata passes, so secrets are redacted here."""
    merged = Counter(info.skipped_counts)
    merged.update(extra_skipped or {})
    skipped = dict(sorted((k, v) for k, v in merged.items() if v))
    source_count = info.source_event_count
    if source_count is None and status == "ingested":
        source_count = event_count + sum(skipped.values())
    return {
        "trace_id": trace_id,
        "file_name": redact_location(file_name),
        "source_path": redact_location(source_path),
        "file_bytes": file_bytes,
        "source_format": info.source_format,
        "tool_versions_json": json.dumps(redact(info.tool_versions), sort_keys=True, default=str),
        "gpu_names_json": json.dumps(info.gpu_names),
        "gpu_count": len(info.gpu_names),
        "kernel_gpu_count": kernel_gpu_count,
        "host_name": info.host_name,
        "start_epoch_ns": info.start_epoch_ns,
        "duration_ns": duration_ns,
        "event_count": event_count,
        "event_counts_json": json.dumps(event_counts, sort_keys=True),
        "skipped_counts_json": json.dumps(skipped),
        "source_event_count": source_count,
        "metadata_json": json.dumps(redact(info.metadata), sort_keys=True, default=str),
        "ingested_at_ns": time.time_ns(),
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "error": redact_location(error),
    }


class _Facts:
    """What ``publish_events`` learns from the rows it writes (for the catalogue row)."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.n_rows = 0
        self.t_min: int | None = None
        self.t_max: int | None = None
        self.kernel_devices: set[int] = set()

    def duration_ns(self) -> int | None:
        return (self.t_max - self.t_min) if self.t_min is not None and self.t_max is not None else None


# the event columns secrets are redacted from, and how (names: once per distinct suspect value)
_REDACTED_COLUMNS = (("args_json", redact_args), ("name", redact_names), ("raw_name", redact_names))


def _checked(batches: Iterable[pa.RecordBatch], facts: _Facts) -> Iterator[pa.RecordBatch]:
    """``batches`` as stored: cast to EVENT_SCHEMA, impossible rows dropped (counted), ``args_json`` and names
    redacted, empty
    batches left out; ``facts`` updated with each batch yielded."""
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if batch.schema != EVENT_SCHEMA:
                batch = batch.cast(EVENT_SCHEMA)
            batch, end = _drop_impossible(batch, facts.dropped)
            if batch.num_rows == 0:
                continue
            for column, redactor in _REDACTED_COLUMNS:
                values = batch.column(column)
                clean = redactor(values)
                if clean is not values:
                    batch = batch.set_column(batch.schema.get_field_index(column), column, clean)
            facts.n_rows += batch.num_rows
            kind = batch.column("kind")
            for item in pc.value_counts(kind).to_pylist():
                facts.kinds[item["values"]] += item["counts"]
            is_kernel = pc.equal(kind, "kernel")
            if pc.any(is_kernel).as_py():
                devices = pc.unique(pc.filter(batch.column("device_id"), is_kernel)).drop_null()
                facts.kernel_devices.update(devices.to_pylist())
            # metadata events (Kineto ph 'M') never move the trace start or duration
            timed = pc.not_equal(kind, "metadata")
            lo = pc.min(pc.filter(batch.column("ts_ns"), timed)).as_py()
            hi = pc.max(pc.filter(end, timed)).as_py()
            if lo is not None:
                facts.t_min = lo if facts.t_min is None else min(facts.t_min, lo)
            if hi is not None:
                facts.t_max = hi if facts.t_max is None else max(facts.t_max, hi)
            yield batch
    finally:  # the adapter's stream is closed with this one (its temporary files, connections)
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _drop_impossible(batch: pa.RecordBatch, dropped: Counter[str]) -> tuple[pa.RecordBatch, pa.Array]:
    """``batch`` without rows no trace can hold (counted by reason in ``dropped``), and its rows' end times.

    Reasons, first match: ``missing_ts`` (no start, outside metadata), ``negative_dur``, ``end_out_of_range``
    (ts_ns + dur_ns does not fit int64).  A well-formed batch costs a null count, a min and a checked add."""
    ts, dur = batch.column("ts_ns"), batch.column("dur_ns")
    bad = None
    if ts.null_count:
        bad = pc.and_(pc.is_null(ts), pc.fill_null(pc.not_equal(batch.column("kind"), "metadata"), True))
        _count(dropped, "missing_ts", bad, None)
    lo_dur = pc.min(dur).as_py()
    if lo_dur is not None and lo_dur < 0:
        neg = pc.fill_null(pc.less(dur, 0), False)
        _count(dropped, "negative_dur", neg, bad)
        bad = neg if bad is None else pc.or_(bad, neg)
    dur0 = pc.fill_null(dur, 0)
    try:
        end = pc.add_checked(ts, dur0)
    except pa.ArrowInvalid:  # overflow somewhere: find the rows (dur >= 0 here unless already dropped)
        over = pc.fill_null(pc.greater(ts, pc.subtract(pa.scalar(INT64_MAX, pa.int64()), pc.max_element_wise(
            dur0, pa.scalar(0, pa.int64())))), False)
        under = pc.fill_null(pc.and_(pc.less(dur0, 0), pc.less(ts, pc.subtract(
            pa.scalar(-INT64_MAX - 1, pa.int64()), dur0))), False)
        over = pc.or_(over, under)
        _count(dropped, "end_out_of_range", over, bad)
        bad = over if bad is None else pc.or_(bad, over)
        end = None
    if bad is None or not pc.any(bad).as_py():
        return batch, end if end is not None else pc.add(ts, dur0)
    batch = batch.filter(pc.invert(bad))
    return batch, pc.add_checked(batch.column("ts_ns"), pc.fill_null(batch.column("dur_ns"), 0))


def _count(dropped: Counter[str], reason: str, mask: pa.Array, already: pa.Array | None) -> None:
    """Count the rows of ``mask`` not already dropped for an earlier reason."""
    if already is not None:
        mask = pc.and_(mask, pc.invert(already))
    n = pc.sum(pc.cast(mask, pa.int64())).as_py() or 0
    if n:
        dropped[reason] += n
