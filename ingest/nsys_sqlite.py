"""Nsight Systems SQLite exports (``nsys export --type sqlite``) into the common event schema.

The file is untrusted and opened read-only through ADBC-SQLite with ``mode=ro&immutable=1`` (no locks, no
journal, nothing written beside it, extension loading off).  Each event table is streamed in record batches
and turned into events one batch at a time, so memory stays bounded whatever the file size.

Throughput (bench/bench_nsys_ingest.py; the costs below are CPU-seconds on its 5 M rows):
- SQLite builds ``args_json`` itself with ``json_object`` over the INTEGER/TEXT columns we do not map (2.3 s for
  the kernel table's 22; reading them into Arrow would cost more, and DuckDB's ``to_json(struct_pack(...))``
  far more).  REAL/BLOB/untyped columns, which json_object would print inexactly, are read raw and added by
  DuckDB (NVTX payloads only, in the exports seen).
- Every other field is computed in Arrow (``_TablePlan.build``); names and everything derived from a name (the
  runtime kind, the version suffix) are worked out once per string id and resolved per row with one ``take``.
  (The same projection in DuckDB, one query per batch, cost 1.8 s against 0.7 s.)
- Tables of ``SPLIT_ROWS`` rows or more are read in rowid ranges by ``READERS`` threads, each on its own
  read-only connection, which also build the events; the caller only writes Parquet.  A bounded queue caps
  what is in flight.

Conventions (docs/architecture.md): ``ts_ns = start - origin`` with ``origin`` the earliest start among the
stored events, the catalogue's ``start_epoch_ns = TARGET_INFO_SESSION_START_TIME.utcEpochNs + origin``;
``pid``/``tid`` decoded from ``globalTid``; device-side rows (kernel, memcpy, memset, sync, graph trace) carry
the launching process from ``globalPid`` and the stream id as ``tid``, so ``(pid, correlation_id)`` joins a
kernel to its launch call.  Columns the schema has no field for go to ``args_json`` unchanged.

Hostile or damaged content never fails the ingest for one value:
- Text that is not valid UTF-8 (a binary blob in a TEXT column, as NVIDIA DLProf's 2022.1 exports have in
  ``TARGET_INFO_SYSTEM_ENV``; bad bytes in ``StringIds``) is decoded with each undecodable byte replaced by U+FFFD;
  the catalogue's ``metadata_json`` counts the repaired values per ``table.column`` (``text_repairs``) and says so in
  ``notes``.  A blob in a TEXT column that goes to ``args_json`` is written there as ``"0x<hex>"`` (lossless).
- Rows with impossible times are skipped and counted per table and reason in ``skipped_counts_json``
  (``<table>:start_null``, ``start_out_of_range``, ``end_null``, ``end_out_of_range``, ``end_before_start``):
  a time must lie in ``[0, MAX_TIMESTAMP_NS]`` (nsys times are ns since the session start or, in some modes, since
  the epoch; both are far below it, and no shift or difference of such values overflows int64), and an event must
  not end before it starts.  ``origin`` is the earliest start among the rows kept (``_valid_sql``; ``_invalid``
  is the same rule in Arrow, applied per batch only where a cheap check finds a bad row).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbc_driver_manager as adbc
import adbc_driver_sqlite
import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from taxbreak.ingest import nsys_schema as S
from taxbreak.ingest.base import AdapterOutput, IngestError, OpenContext, TraceInfo, event_batch

SOURCE_FORMAT = "nsys-sqlite"
BATCH_ROWS = 32768
PREFETCH_BATCHES = 2  # source batches queued ahead of the transform (memory: about READERS + this many)
READERS = 2  # reader threads (connections) for tables of at least SPLIT_ROWS rows
SPLIT_ROWS = 262_144
SQLITE_MAGIC = b"SQLite format 3\x00"
OSRT_ENV = "TAXBREAK_NSYS_OSRT"
# TARGET_INFO_SYSTEM_ENV properties copied into the catalogue (the rest, e.g. the environment, is left out).
SYSTEM_ENV_KEYS = (
    "Hostname", "NvDriverVersion", "CudaDriverVersion", "OsDescription", "TargetInstallDir", "CpuDescription",
    "CpuCores", "HardwarePlatform",
)
MASK = S.GLOBAL_ID_MASK
SHIFT = S.GLOBAL_ID_SHIFT
MAX_TIMESTAMP_NS = 1 << 62  # about 146 years of ns: no real nsys time comes near it (see the module docstring)
# Tables whose rows may legitimately have no end (NVTX marks; NVTX ranges without an end are left out by the
# plan's WHERE and counted by _nvtx_skips).
END_OPTIONAL_TABLES = ("NVTX_EVENTS",)


class _Tally:
    """Counts shared by the reader threads (skipped rows per reason, repaired text values per column)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, key: str, n: int) -> None:
        if n:
            with self._lock:
                self.counts[key] = self.counts.get(key, 0) + int(n)


def _utf8(arr: pa.Array) -> tuple[pa.Array, int]:
    """``arr`` (string or binary) as valid UTF-8 strings, and how many values needed repair: each undecodable byte
    becomes U+FFFD.  Valid input (the usual case) costs one validation pass and is returned as it is."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        try:
            arr.validate(full=True)
            return arr, 0
        except pa.ArrowInvalid:
            arr = arr.view(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        return arr, 0
    try:
        return arr.cast(pa.string()), 0  # the cast validates UTF-8
    except pa.ArrowInvalid:
        pass
    out: list[str | None] = []
    bad = 0
    for raw in arr.to_pylist():
        if raw is None:
            out.append(None)
            continue
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(raw.decode("utf-8", errors="replace"))
            bad += 1
    return pa.array(out, pa.string()), bad


def _repair_text(batch: pa.RecordBatch, table: str, tally: _Tally | None, *, args_text: bool = True,
                 ) -> pa.RecordBatch:
    """Every string column of a source batch as valid UTF-8 (repairs counted as ``table.column``).

    ``args_text=False``: the args JSON holds no TEXT column (SQLite's json_object of numbers is ASCII), so it is
    not scanned (the runtime table's, in the exports seen)."""
    cols = list(batch.columns)
    changed = False
    for i, f in enumerate(batch.schema):
        if f.name == "__args" and not args_text:
            continue
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            fixed, bad = _utf8(cols[i])
            if bad:
                cols[i] = fixed.cast(f.type)
                changed = True
                if tally is not None:
                    tally.add(f"{table}.{'args_json' if f.name == '__args' else f.name}", bad)
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema) if changed else batch


def _is_text_affinity(decl_type: str) -> bool:
    t = (decl_type or "").upper()
    return "CHAR" in t or "CLOB" in t or "TEXT" in t


def _as_text_sql(expr: str) -> str:
    """A TEXT column read raw: a blob stored in it is read as its bytes taken as text (repaired in Arrow)."""
    return f"CASE WHEN typeof({expr}) = 'blob' THEN CAST({expr} AS TEXT) ELSE {expr} END"


def _valid_sql(table: str) -> str:
    """SQL: the row's times are possible (the rule of ``_invalid``); used where the origin is found."""
    end = '"end"'
    end_rule = f"({end} IS NULL OR {end} BETWEEN \"start\" AND {MAX_TIMESTAMP_NS})" if table in END_OPTIONAL_TABLES \
        else f"{end} BETWEEN \"start\" AND {MAX_TIMESTAMP_NS}"
    return f'"start" BETWEEN 0 AND {MAX_TIMESTAMP_NS} AND {end_rule}'


def _invalid(table: str, start: pa.Array, end: pa.Array) -> list[tuple[str, pa.Array]]:
    """Arrow: (reason, mask) per rule of ``_valid_sql``, in order; a row is counted under its first reason."""
    def out_of_range(x: pa.Array) -> pa.Array:
        return pc.or_(pc.less(x, 0), pc.greater(x, MAX_TIMESTAMP_NS))

    rules = [("start_null", pc.is_null(start)), ("start_out_of_range", out_of_range(start))]
    if table not in END_OPTIONAL_TABLES:
        rules.append(("end_null", pc.is_null(end)))
    rules += [("end_out_of_range", out_of_range(end)), ("end_before_start", pc.less(end, start))]
    return [(reason, pc.fill_null(mask, False)) for reason, mask in rules]


def _drop_impossible(table: str, batch: pa.RecordBatch, tally: _Tally | None) -> pa.RecordBatch:
    """``batch`` without the rows whose times are impossible (counted per reason as ``table:reason``).

    The usual batch has none: one min/max/null-count check decides that without building any mask.
    """
    start = batch.column("start").cast(pa.int64())
    end = batch.column("end").cast(pa.int64())
    lo_s, hi_s = pc.min_max(start).values()
    if not start.null_count and (end.null_count == 0 or table in END_OPTIONAL_TABLES) and lo_s.is_valid \
            and lo_s.as_py() >= 0 and hi_s.as_py() <= MAX_TIMESTAMP_NS:
        lo_e, hi_e = pc.min_max(end).values()
        if (not lo_e.is_valid or (lo_e.as_py() >= 0 and hi_e.as_py() <= MAX_TIMESTAMP_NS)) \
                and not pc.any(pc.less(end, start)).as_py():
            return batch
    taken = pa.array([False] * batch.num_rows, pa.bool_())  # rows already counted under an earlier reason
    for reason, mask in _invalid(table, start, end):
        hit = pc.and_(mask, pc.invert(taken))
        n = pc.sum(hit).as_py() or 0
        if n and tally is not None:
            tally.add(f"{table}:{reason}", n)
        taken = pc.or_(taken, hit)
    return batch.filter(pc.invert(taken))


def _q(ident: str) -> str:
    """Quote an SQL identifier (table/column names come from the untrusted file)."""
    return '"' + ident.replace('"', '""') + '"'


def check_sqlite_file(path: Path, name: str | None = None) -> None:
    """Refuse files that are not SQLite databases or are shorter than their header says (messages name ``name``,
    default ``path``)."""
    path = Path(path)
    path_name = name or str(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise IngestError(f"{path_name}: cannot read the file ({exc.strerror or exc})") from None
    if not head.startswith(SQLITE_MAGIC):
        raise IngestError(
            f"{path_name}: not a SQLite database (no 'SQLite format 3' header); expected an nsys SQLite export"
        )
    if len(head) < 100:
        raise IngestError(f"{path_name}: truncated SQLite file ({size} bytes, shorter than the 100-byte header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(head[28:32], "big")
    header_count_valid = head[24:28] == head[92:96]
    if header_count_valid and page_count and size < page_size * page_count:
        raise IngestError(
            f"{path_name}: truncated SQLite file: the header says {page_count} pages of {page_size} bytes "
            f"({page_size * page_count} bytes) but the file has {size} bytes"
        )


def sqlite_ro_uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


def _sentinel(decl_type: str) -> str:
    t = (decl_type or "").upper()
    if "INT" in t:
        return "CAST(0 AS INTEGER)"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "CAST(0.0 AS REAL)"
    return "''"


class NsysDb:
    """A read-only ADBC connection to one export.

    Through ``adbc_driver_manager``'s own classes, not its DB-API module: that one imports ``pyarrow.dataset``
    and with it pandas, 0.3 s and 40 MB of every ingest process.
    """

    def __init__(self, path: Path, name: str | None = None, tally: _Tally | None = None) -> None:
        self.path = path
        self.name = name or str(path)  # what messages call the file (the user's .nsys-rep for a converted report)
        self.repairs = tally if tally is not None else _Tally()  # text values repaired, per table.column
        self._statements: list[adbc.AdbcStatement] = []  # a stream lives only as long as its statement
        try:
            self.db = adbc_driver_sqlite.connect(sqlite_ro_uri(path))
        except Exception as exc:  # noqa: BLE001 - any driver error is a bad input
            raise IngestError(f"{self.name}: cannot open as SQLite: {exc}") from None
        try:
            self.conn = adbc.AdbcConnection(self.db)
        except Exception as exc:  # noqa: BLE001
            self.db.close()
            raise IngestError(f"{self.name}: cannot open as SQLite: {exc}") from None
        self._columns: dict[str, list[tuple[str, str]]] = {}

    def close(self) -> None:
        for st in self._statements:
            try:
                st.close()
            except Exception:  # noqa: BLE001 - closing after a failed read must not mask the first error
                pass
        self._statements.clear()
        self.conn.close()
        self.db.close()

    def _execute(self, sql: str, batch_rows: int | None = None) -> tuple[adbc.AdbcStatement, pa.RecordBatchReader]:
        st = adbc.AdbcStatement(self.conn)
        self._statements.append(st)
        if batch_rows:
            st.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
        st.set_sql_query(sql)
        handle, _ = st.execute_query()
        return st, pa.RecordBatchReader._import_from_c(handle.address)

    def rows(self, sql: str, label: str = "query") -> list[tuple]:
        """The rows of ``sql``; text and blob values come back as ``str`` (undecodable bytes as U+FFFD, counted as
        ``label.column``)."""
        st, reader = self._execute(sql)
        table = reader.read_all()
        del reader  # the stream is released before its statement
        self._statements.remove(st)
        st.close()
        cols = []
        for f, col in zip(table.schema, table.columns, strict=True):
            if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_binary(f.type) \
                    or pa.types.is_large_binary(f.type):
                fixed, bad = _utf8(col.combine_chunks())
                self.repairs.add(f"{label}.{f.name}", bad)
                cols.append(fixed.to_pylist())
            else:
                cols.append(col.to_pylist())
        return list(zip(*cols, strict=True))

    def tables(self) -> set[str]:
        """Tables and views (an export rewritten by a tool may hold a kernel table as a view of another)."""
        return {r[0] for r in self.rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}

    def views(self) -> set[str]:
        return {r[0] for r in self.rows("SELECT name FROM sqlite_master WHERE type = 'view'")}

    def columns(self, table: str) -> list[tuple[str, str]]:
        if table not in self._columns:
            literal = "'" + table.replace("'", "''") + "'"
            self._columns[table] = [(r[0], r[1] or "") for r in self.rows(
                f"SELECT name, type FROM pragma_table_info({literal})")]
        return self._columns[table]

    def stream(self, table: str, where: str = "", *, only: list[str] | None = None, args_sql: str | None = None,
               rowids: tuple[int, int] | None = None) -> pa.RecordBatchReader:
        """Columns of ``table`` (all, or ``only``) as Arrow batches, plus ``__s`` (0 on one typed sentinel row,
        then 1) and, with ``args_sql``, that expression over ``__t`` (the table) as the string column ``__args``;
        with ``rowids``, only the rows whose rowid lies in that closed range.

        ADBC-SQLite infers each column's Arrow type from the first rows it sees; a leading typed row keeps a
        column that starts with NULLs from being typed as int64 and then failing on its first string.
        """
        cols = [(c, t) for c, t in self.columns(table) if only is None or c in only]
        sentinel = "".join(f", {_sentinel(t)} AS {_q(c)}" for c, t in cols)
        names = "".join(f", {_as_text_sql('__t.' + _q(c)) if _is_text_affinity(t) else '__t.' + _q(c)} AS {_q(c)}"
                        for c, t in cols)
        if args_sql is not None:
            sentinel += ", '' AS __args"
            names += f", {args_sql} AS __args"
        if rowids is not None:
            cond = f"__t.rowid BETWEEN {int(rowids[0])} AND {int(rowids[1])}"
            where = f"{where} AND {cond}" if where else f"WHERE {cond}"
        sql = (
            f"SELECT 0 AS __s{sentinel} UNION ALL "
            f"SELECT * FROM (SELECT 1 AS __s{names} FROM {_q(table)} AS __t {where})"
        )
        return self._execute(sql, BATCH_ROWS)[1]

    def small_table(self, table: str) -> list[dict[str, Any]]:
        """A small table (metadata, names) as a list of dicts; text as ``str`` (repairs counted as ``table.column``).

        Read through ``stream`` (typed sentinel row, blobs in TEXT columns read as text) so a column that starts
        with NULLs or holds a blob among its text cannot break the driver's type inference."""
        cols = [c for c, _ in self.columns(table)]
        data = self.stream(table).read_all()
        data = data.filter(pc.equal(data.column("__s"), 1))
        out = []
        for c in cols:
            col = data.column(c).combine_chunks()
            fixed, bad = _utf8(col)
            self.repairs.add(f"{table}.{c}", bad)
            out.append(fixed.to_pylist())
        return [dict(zip(cols, r, strict=True)) for r in zip(*out, strict=True)]


class _Cols:
    """One source batch as the plans see it: typed column access, the id lookups, constant columns."""

    def __init__(self, batch: pa.RecordBatch, lookups: dict[str, Lookup], table: str = "",
                 dangling: _Tally | None = None) -> None:
        self.batch = batch
        self.n = batch.num_rows
        self.lookups = lookups
        self.table, self.dangling = table, dangling
        self._names = set(batch.schema.names)

    def has(self, name: str) -> bool:
        return name in self._names

    def int(self, name: str) -> pa.Array:
        """An integer column as int64 (all NULL when this export has no such column)."""
        if name not in self._names:
            return pa.nulls(self.n, pa.int64())
        return _int_ids(self.batch.column(name), None, self.table, name)

    def text(self, name: str) -> pa.Array:
        return self.batch.column(name).cast(pa.string())

    def const(self, value: str) -> pa.Array:
        return pa.repeat(pa.scalar(value, pa.string()), self.n)

    def resolve(self, lookup: str, id_column: str) -> pa.Array:
        """Text for the ids of ``id_column``; a StringIds id that names no string is counted as
        ``table.column`` in ``dangling`` (its text is NULL)."""
        ids = self.int(id_column)
        out = self.lookups[lookup].resolve(ids)
        if self.dangling is not None and lookup in _STRING_LOOKUPS and out.null_count > ids.null_count:
            self.dangling.add(f"{self.table}.{id_column}", out.null_count - ids.null_count)
        return out


# the lookups that are StringIds itself: an id they do not resolve is dangling ("versioned" is NULL by design)
_STRING_LOOKUPS = frozenset({"strs", "plain"})


def _gid_pid(ids: pa.Array) -> pa.Array:
    """The process id packed in a ``globalTid``/``globalPid`` (nsys GlobalId: bits 24-47), as text."""
    return pc.cast(pc.bit_wise_and(pc.shift_right(ids, SHIFT), MASK), pa.string())


def _gid_tid(ids: pa.Array) -> pa.Array:
    """The thread id packed in a ``globalTid`` (bits 0-23), as text."""
    return pc.cast(pc.bit_wise_and(ids, MASK), pa.string())


def _joined(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation; NULL when any part is NULL (SQL's ``||``)."""
    return pc.binary_join_element_wise(*parts, "")


def _or_fallback(primary: pa.Array, fallback: Callable[[], pa.Array]) -> pa.Array:
    """``primary``, with its NULLs filled from ``fallback()`` (built only when some are NULL: it may be costly)."""
    return pc.coalesce(primary, fallback()) if primary.null_count else primary


Build = Callable[[_Cols], dict[str, pa.Array]]


@dataclass
class _TablePlan:
    """How one nsys table becomes EVENT_SCHEMA rows.

    ``build`` returns the schema fields it sets (the rest are NULL; ``ts_ns``/``dur_ns`` default to the row's
    ``start``/``end``) from the source columns in ``reads`` (``start`` and ``end`` always).  Columns in
    ``mapped`` are not repeated in ``args_json`` unless also in ``keep_in_args``; every other column is.
    ``where`` filters in SQLite.
    """

    table: str
    reads: set[str]
    mapped: set[str]
    build: Build
    keep_in_args: set[str] = field(default_factory=set)
    where: str = ""


_DEVICE_READS = {"deviceId", "streamId", "correlationId", "globalPid"}


def _device(c: _Cols) -> dict[str, pa.Array]:
    """Device-side rows carry the launching process (``globalPid``) and the stream as the thread."""
    return {"pid": _gid_pid(c.int("globalPid")), "tid": pc.cast(c.int("streamId"), pa.string()),
            "device_id": c.int("deviceId"), "stream_id": c.int("streamId"), "correlation_id": c.int("correlationId")}


def _host(c: _Cols) -> dict[str, pa.Array]:
    gtid = c.int("globalTid")
    return {"pid": _gid_pid(gtid), "tid": _gid_tid(gtid)}


def _runtime(c: _Cols) -> dict[str, pa.Array]:
    # The kind follows the call's name where the name decides it (graph launches, cuBLAS/cuDNN calls through the
    # runtime table), else its event class; both name-derived parts are worked out once per string (lookups).
    event_class = c.int("eventClass")
    by_class = pc.if_else(pc.equal(event_class, S.EVENT_CLASS_CUDA_RUNTIME), "runtime_api",
                          pc.if_else(pc.equal(event_class, S.EVENT_CLASS_CUDA_DRIVER), "driver_api", "other"))
    kind = pc.coalesce(c.resolve("runtime_kind", "nameId"), pc.fill_null(by_class, "other"))
    return {**_host(c), "kind": kind, "name": c.resolve("plain", "nameId"),
            "raw_name": c.resolve("versioned", "nameId"), "correlation_id": c.int("correlationId")}


def _kernel(c: _Cols) -> dict[str, pa.Array]:
    out = {**_device(c), "kind": c.const("kernel"), "name": c.resolve("strs", "demangledName"),
           "short_name": c.resolve("strs", "shortName"),
           # The symbol as the binary has it: the kernel's raw name (schema 1.1; NULL in exports without it).
           "raw_name": c.resolve("strs", "mangledName"),
           "shared_memory_bytes": pc.add(c.int("staticSharedMemory"), c.int("dynamicSharedMemory")),
           "graph_id": c.int("graphId"), "graph_node_id": c.int("graphNodeId")}
    for src, dst in (("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"), ("blockX", "block_x"),
                     ("blockY", "block_y"), ("blockZ", "block_z"), ("registersPerThread", "registers_per_thread")):
        out[dst] = c.int(src)
    return out


def _memcpy(c: _Cols) -> dict[str, pa.Array]:
    kind_id = c.int("copyKind")
    return {**_device(c), "kind": c.const("memcpy"),
            "name": _or_fallback(c.resolve("memcpy_name", "copyKind"),
                                 lambda: _joined("[CUDA memcpy ", pc.cast(kind_id, pa.string()), "]")),
            "copy_kind": _or_fallback(c.resolve("memcpy_short", "copyKind"), lambda: pc.cast(kind_id, pa.string())),
            "bytes": c.int("bytes"), "graph_node_id": c.int("graphNodeId")}


def _memset(c: _Cols) -> dict[str, pa.Array]:
    return {**_device(c), "kind": c.const("memset"), "name": c.const("[CUDA memset]"), "bytes": c.int("bytes"),
            "graph_node_id": c.int("graphNodeId")}


def _sync(c: _Cols) -> dict[str, pa.Array]:
    return {**_device(c), "kind": c.const("sync"),
            "name": _or_fallback(c.resolve("sync", "syncType"),
                                 lambda: _joined("sync type ", pc.cast(c.int("syncType"), pa.string())))}


def _nvtx(c: _Cols) -> dict[str, pa.Array]:
    mark = pc.is_in(c.int("eventType"), value_set=pa.array(S.NVTX_MARK_TYPES, pa.int64()))
    text = c.text("text")
    out = {**_host(c), "kind": pc.if_else(mark, "nvtx_mark", "nvtx_range"),
           "name": pc.coalesce(text, c.resolve("strs", "textId")) if c.has("textId") else text,
           "dur_ns": pc.if_else(mark, pa.scalar(None, pa.int64()), pc.subtract_checked(c.int("end"), c.int("start")))}
    if c.has("domainId"):
        dom = c.int("domainId")
        named = _or_fallback(c.resolve("domains", "domainId"),
                             lambda: _joined("domainId=", pc.cast(dom, pa.string())))
        out["domain"] = pc.if_else(pc.equal(dom, 0), pa.scalar(None, pa.string()), named)  # 0/NULL: no domain
    if c.has("endGlobalTid"):  # a range ended on another thread
        end_gtid = c.int("endGlobalTid")
        out["end_tid"] = pc.if_else(pc.not_equal(end_gtid, c.int("globalTid")), _gid_tid(end_gtid),
                                    pa.scalar(None, pa.string()))
    return out


def _named_host(kind: str) -> Build:
    def build(c: _Cols) -> dict[str, pa.Array]:
        return {**_host(c), "kind": c.const(kind), "name": c.resolve("strs", "nameId"),
                "graph_id": c.int("graphId"), "graph_node_id": c.int("graphNodeId")}
    return build


def _graph_trace(c: _Cols) -> dict[str, pa.Array]:
    graph = c.int("graphId")
    return {**_device(c), "kind": c.const("other"), "graph_id": graph,
            "name": _joined("[CUDA graph ", pc.cast(graph, pa.string()), "]")}


def _plan(table: str, cols: set[str]) -> _TablePlan:
    def plan(reads: set[str], build: Build, *, keep: set[str] | None = None, where: str = "") -> _TablePlan:
        present = (reads | {"start", "end"}) & cols  # every table has both; a column an older export lacks is NULL
        return _TablePlan(table, present, present, build, keep or set(), where)

    if table == "CUPTI_ACTIVITY_KIND_RUNTIME":
        # eventClass decides the kind and stays in args_json too.
        return plan({"globalTid", "correlationId", "nameId", "eventClass"}, _runtime,
                    keep={"eventClass"})
    if table == "CUPTI_ACTIVITY_KIND_KERNEL":
        return plan(_DEVICE_READS | {"demangledName", "shortName", "mangledName", "gridX", "gridY", "gridZ",
                                     "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory",
                                     "dynamicSharedMemory", "graphId", "graphNodeId"}, _kernel,
                    keep={"staticSharedMemory", "dynamicSharedMemory"})
    if table == "CUPTI_ACTIVITY_KIND_MEMCPY":
        return plan(_DEVICE_READS | {"bytes", "copyKind", "graphNodeId"}, _memcpy, keep={"copyKind"})
    if table == "CUPTI_ACTIVITY_KIND_MEMSET":
        return plan(_DEVICE_READS | {"bytes", "graphNodeId"}, _memset)
    if table == "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION":
        return plan(_DEVICE_READS | {"syncType"}, _sync, keep={"syncType"})
    if table == "NVTX_EVENTS":
        ranges = ", ".join(str(t) for t in S.NVTX_RANGE_TYPES)
        marks = ", ".join(str(t) for t in S.NVTX_MARK_TYPES)
        # eventType, textId, domainId and endGlobalTid are read but stay in args_json as before.
        return plan({"text", "globalTid", "eventType", "textId", "domainId", "endGlobalTid"}, _nvtx,
                    keep={"eventType", "textId", "domainId", "endGlobalTid"},
                    where=f'WHERE (("eventType" IN ({ranges}) AND "end" IS NOT NULL) OR "eventType" IN ({marks}))')
    if table in ("CUBLAS_EVENTS", "CUDNN_EVENTS", "CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS", "OSRT_API"):
        kind = {"CUBLAS_EVENTS": "library_api", "CUDNN_EVENTS": "library_api", "OSRT_API": "os_runtime"}.get(
            table, "other")
        reads = {"globalTid", "nameId"}
        if table == "CUDA_GRAPH_EVENTS":
            reads.add("graphId")
        if table == "CUDA_GRAPH_NODE_EVENTS":
            reads.add("graphNodeId")
        return plan(reads, _named_host(kind))
    if table == "CUPTI_ACTIVITY_KIND_GRAPH_TRACE":
        return plan(_DEVICE_READS | {"graphId"}, _graph_trace)
    raise AssertionError(table)


def _json_safe(decl_type: str) -> bool:
    """Columns of INTEGER or TEXT affinity: SQLite's json_object writes their values exactly."""
    t = (decl_type or "").upper()
    return "INT" in t or "CHAR" in t or "CLOB" in t or "TEXT" in t


@dataclass
class _Source:
    """What to read from SQLite for one table: the columns the plan reads and the args JSON built in SQLite."""

    raw: list[str]  # columns read as Arrow columns
    raw_args: list[str]  # of those, the ones args_json takes through DuckDB (REAL/BLOB/untyped: exact there)
    args_sql: str | None  # SQLite json_object(...) over the other args columns, or None when there are none
    args_text: bool = True  # args_sql includes a TEXT column (its output may then hold bytes that are not UTF-8)


def _source(plan: _TablePlan, cols: list[tuple[str, str]]) -> _Source:
    """Split the table's columns between SQLite (args JSON of INTEGER/TEXT columns) and Arrow (the rest).

    Building the JSON in SQLite's json_object costs less than reading those columns into Arrow, and far less than
    DuckDB's to_json(struct_pack(...)) over them.  REAL/BLOB columns (NVTX payloads) are read raw and added by
    DuckDB, which prints doubles exactly (json_object would print 15 digits).
    """
    args = [(c, t) for c, t in cols if c not in plan.mapped or c in plan.keep_in_args]
    raw_args = [c for c, t in args if not _json_safe(t)]

    def value(c: str, t: str) -> str:  # json_object refuses blobs: one in a TEXT column is written as "0x<hex>"
        col = f"__t.{_q(c)}"
        return f"CASE WHEN typeof({col}) = 'blob' THEN '0x' || hex({col}) ELSE {col} END" if _is_text_affinity(t) \
            else col

    pairs = [f"'{c.replace(chr(39), chr(39) * 2)}', {value(c, t)}" for c, t in args if _json_safe(t)]
    raw = [c for c, _ in cols if c in plan.reads or c in raw_args]
    args_text = any(_is_text_affinity(t) for c, t in args if _json_safe(t))
    return _Source(raw, raw_args, "json_object(" + ", ".join(pairs) + ")" if pairs else None, args_text)


def _osrt_enabled(include_osrt: bool | None) -> bool:
    if include_osrt is not None:
        return include_osrt
    return os.environ.get(OSRT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _kv(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """name/value rows into a dict; repeated names become lists (META_DATA_CAPTURE repeats some)."""
    out: dict[str, Any] = {}
    for r in rows:
        k, v = r.get("name"), r.get("value")
        if k is None:
            continue
        if k in out:
            out[k] = out[k] if isinstance(out[k], list) else [out[k]]
            out[k].append(v)
        else:
            out[k] = v
    return out


def _validate(db: NsysDb, path: str, tables: set[str], read_tables: list[str]) -> None:
    if not tables & set(S.NSYS_MARKER_TABLES):
        raise IngestError(
            f"{path}: a SQLite database but not an Nsight Systems export (no StringIds, NVTX_EVENTS, "
            "CUPTI_ACTIVITY_KIND_* or META_DATA_EXPORT table)"
        )
    needs_strings = [t for t in read_tables if t != "NVTX_EVENTS"]
    if needs_strings and "StringIds" not in tables:
        raise IngestError(
            f"{path}: has {', '.join(needs_strings)} but no StringIds table (names cannot be resolved); "
            "re-export with `nsys export --type sqlite`"
        )
    for t in read_tables:
        have = {c for c, _ in db.columns(t)}
        for col in S.REQUIRED_COLUMNS[t]:
            if col not in have:
                raise IngestError(f"{path}: table {t} lacks required column {col!r} (columns: {sorted(have)})")


def _export_records(db: NsysDb, table: str) -> dict[str, Any]:
    """The export's own records: name/value rows (both tables' layout); a table of other columns is read as
    one record per column of its first row."""
    rows = db.small_table(table)
    if not rows:
        return {}
    if {"name", "value"} <= set(rows[0]):
        return _kv(rows)
    return {k: v for k, v in rows[0].items() if v is not None}


def _trace_info(db: NsysDb, tables: set[str]) -> TraceInfo:
    info = TraceInfo(source_format=SOURCE_FORMAT)
    meta: dict[str, Any] = {}
    export: dict[str, Any] = {}
    for table in reversed(S.EXPORT_META_TABLES):  # META_DATA_EXPORT last: its records win
        if table in tables:
            export.update(_export_records(db, table))
    if export:
        meta["export"] = export
        for name, keys in S.EXPORT_VERSION_KEYS.items():
            found = next((export[k] for k in keys if export.get(k) not in (None, "")), None)
            if found is not None:
                info.tool_versions[name] = found
    if "META_DATA_CAPTURE" in tables:
        capture = _kv(db.small_table("META_DATA_CAPTURE"))
        capture = {k: v for k, v in capture.items() if not k.endswith("ENVIRONMENT_VARIABLE")}
        meta["capture"] = capture
    if "TARGET_INFO_SYSTEM_ENV" in tables and {"name", "value"} <= {c for c, _ in db.columns("TARGET_INFO_SYSTEM_ENV")}:
        env = _kv([{"name": r["name"], "value": r["value"]} for r in db.small_table("TARGET_INFO_SYSTEM_ENV")])
        sysenv = {k: env[k] for k in SYSTEM_ENV_KEYS if k in env}
        meta["system"] = sysenv
        if isinstance(sysenv.get("Hostname"), str) and sysenv["Hostname"]:
            info.host_name = sysenv["Hostname"]
        install = sysenv.get("TargetInstallDir")
        if isinstance(install, str):
            info.tool_versions["nsys_capture_install_dir"] = install
        for k in ("NvDriverVersion", "CudaDriverVersion"):
            if k in sysenv:
                info.tool_versions[k] = sysenv[k]
        gpu_json = env.get("GpuInfo")
        if isinstance(gpu_json, str):
            meta["gpu_info_json"] = gpu_json
    if "TARGET_INFO_GPU" in tables:
        gpus = db.small_table("TARGET_INFO_GPU")
        info.gpu_names = [str(g.get("name")) for g in sorted(gpus, key=lambda g: (g.get("id") or 0))]
    if not info.gpu_names and isinstance(meta.get("gpu_info_json"), str):
        try:
            info.gpu_names = [str(g.get("Name")) for g in json.loads(meta["gpu_info_json"]).get("Gpus", [])]
        except (ValueError, AttributeError):
            pass
    if not info.gpu_names and "TARGET_INFO_CUDA_DEVICE" in tables:
        devs = {r.get("gpuId") for r in db.small_table("TARGET_INFO_CUDA_DEVICE")}
        info.gpu_names = [f"GPU {d} (name not recorded)" for d in sorted(d for d in devs if d is not None)]
    meta.pop("gpu_info_json", None)
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        rows = db.small_table("TARGET_INFO_SESSION_START_TIME")
        if rows:
            meta["session_start"] = rows[0]
    if "PROCESSES" in tables:
        meta["process_names"] = {str(r.get("pid")): r.get("name") for r in db.small_table("PROCESSES")}
    if "ThreadNames" in tables and "StringIds" in tables:
        meta["thread_names"] = {
            f"{(g >> SHIFT) & MASK}/{g & MASK}": n
            for g, n in db.rows("SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId "
                                "WHERE t.globalTid IS NOT NULL", "StringIds")
        }
    info.metadata = meta
    return info


def _origin(dbs: list[NsysDb], read_tables: list[str], counts: dict[str, int]) -> int | None:
    """The earliest start among the rows to be stored: one full scan per table (nsys indexes no start column),
    the tables spread over the connections' threads, largest first, so the scans overlap."""
    queues: list[list[str]] = [[] for _ in dbs]
    loads = [0] * len(dbs)
    for t in sorted(read_tables, key=lambda t: -counts[t]):
        i = loads.index(min(loads))
        queues[i].append(t)
        loads[i] += counts[t]

    def lows(db: NsysDb, tables: list[str]) -> list[int]:
        out = []
        for t in tables:
            where = _plan(t, {c for c, _ in db.columns(t)}).where if t == "NVTX_EVENTS" else ""
            where = f"{where} AND {_valid_sql(t)}" if where else f"WHERE {_valid_sql(t)}"
            (lo,) = db.rows(f'SELECT min("start") FROM {_q(t)} {where}')[0]
            if lo is not None:
                out.append(int(lo))
        return out

    with ThreadPoolExecutor(len(dbs)) as pool:
        found = [lo for part in pool.map(lows, dbs, queues) for lo in part]
    return min(found) if found else None


def _nvtx_skips(db: NsysDb) -> dict[str, int]:
    skipped: dict[str, int] = {}
    for etype, no_end, n in db.rows(
        "SELECT \"eventType\", \"end\" IS NULL, count(*) FROM NVTX_EVENTS GROUP BY 1, 2", "NVTX_EVENTS"
    ):
        if etype in S.NVTX_MARK_TYPES or (etype in S.NVTX_RANGE_TYPES and not no_end):
            continue
        if etype in S.NVTX_RANGE_TYPES:
            reason = "NVTX_EVENTS:range_without_end"
        elif etype == S.NVTX_DOMAIN_CREATE:
            reason = "NVTX_EVENTS:domain_create"
        else:
            reason = f"NVTX_EVENTS:eventType_{etype}"
        skipped[reason] = skipped.get(reason, 0) + int(n)
    return skipped


class Lookup:
    """An id -> text map, resolved one batch at a time in Arrow (a DuckDB join would buffer the whole stream).

    Ids are small non-negative integers in every export seen (StringIds counts from 0 or 1, enums are small), so
    the map is a dense array indexed by id and a batch resolves with one ``take``; an id outside it, or a map
    too sparse for that, resolves through ``index_in`` (unknown ids give NULL either way).
    """

    def __init__(self, keys: pa.Array, values: pa.Array) -> None:
        self.keys, self.values = keys, values
        self.dense: pa.Array | None = None
        hi = pc.max(keys).as_py() if len(keys) else None
        if hi is not None and pc.min(keys).as_py() >= 0 and hi < 4 * len(keys) + 65536:
            slots = pc.index_in(pa.array(range(hi + 1), pa.int64()), value_set=keys)
            self.dense = pc.take(values, slots)

    def resolve(self, ids: pa.Array) -> pa.Array:
        ids = ids.cast(pa.int64())
        if self.dense is None:
            return pc.take(self.values, pc.index_in(ids, value_set=self.keys))
        inside = pc.and_(pc.greater_equal(ids, 0), pc.less(ids, len(self.dense)))
        return pc.take(self.dense, pc.if_else(inside, ids, pa.scalar(None, pa.int64())))


def _lookup(pairs: dict[int, str]) -> Lookup:
    return Lookup(pa.array(list(pairs), pa.int64()), pa.array(list(pairs.values()), pa.string()))


class _NotAnId(IngestError):
    """An id column holding text that is no integer; the reader prefixes the file's name."""


def _int_ids(ids: pa.Array, name: str | None, table: str, column: str) -> pa.Array:
    """An id column as int64, or an IngestError naming the file (``name``; None: ``_NotAnId``, named by the
    reader), the table, the column and a value that is no integer (issue 30: text ids in StringIds surfaced as
    "unexpected ArrowInvalid")."""
    try:
        return ids.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        bad = next((v for v in ids.to_pylist() if v is not None and not _is_int(v)), None)
        what = (f"{table}.{column} holds {str(bad)[:40]!r}, not an integer (Nsight writes integer ids; was the "
                "export rewritten by another tool?)")
        raise (_NotAnId(what) if name is None else IngestError(f"{name}: {what}")) from None


def _is_int(value: object) -> bool:
    try:
        int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return False
    return not isinstance(value, float) or value.is_integer()


def _build_lookups(db: NsysDb, tables: set[str]) -> dict[str, Lookup]:
    """id -> text maps resolved in Arrow per batch (a DuckDB join would buffer the whole stream)."""
    out: dict[str, Lookup] = {}
    if "StringIds" in tables:
        ids = db.stream("StringIds").read_all()
        ids = ids.filter(pc.equal(ids.column("__s"), 1))
        keys = _int_ids(ids.column("id").combine_chunks(), db.name, "StringIds", "id")
        values, bad = _utf8(ids.column("value").combine_chunks())
        db.repairs.add("StringIds.value", bad)
        values = values.cast(pa.string())
    else:
        keys, values = pa.array([], pa.int64()), pa.array([], pa.string())
    plain = pc.replace_substring_regex(values, r"_v[0-9]+$", "")
    out["strs"] = Lookup(keys, values)
    out["plain"] = Lookup(keys, plain)  # runtime names without the version suffix
    out["versioned"] = Lookup(keys, pc.if_else(pc.not_equal(values, plain), values, pa.scalar(None, pa.string())))
    # The runtime rows whose name, not their event class, decides the kind (worked out once per string).
    graph = pc.or_(pc.starts_with(plain, "cudaGraphLaunch"), pc.starts_with(plain, "cuGraphLaunch"))
    library = pc.or_(pc.starts_with(plain, "cublas"), pc.starts_with(plain, "cudnn"))
    out["runtime_kind"] = Lookup(keys, pc.if_else(graph, "graph_launch", pc.if_else(
        library, "library_api", pa.scalar(None, pa.string()))))
    kinds = dict(S.MEMCPY_KINDS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        for r in db.small_table("ENUM_CUDA_MEMCPY_OPER"):
            if r.get("id") is not None and r.get("label"):
                short = kinds.get(r["id"], (None,))[0]
                short = short or str(r.get("name") or r["id"]).removeprefix("CUDA_MEMCPY_KIND_")
                kinds[int(r["id"])] = (short, str(r["label"]))
    out["memcpy_short"] = _lookup({k: v[0] for k, v in kinds.items()})
    out["memcpy_name"] = _lookup({k: f"[CUDA memcpy {v[1]}]" for k, v in kinds.items()})
    syncs = dict(S.SYNC_TYPES)
    if "ENUM_CUPTI_SYNC_TYPE" in tables:
        for r in db.small_table("ENUM_CUPTI_SYNC_TYPE"):
            if r.get("id") is not None and r.get("label"):
                syncs[int(r["id"])] = str(r["label"])
    out["sync"] = _lookup(syncs)
    domains: dict[int, str] = {}
    if "NVTX_EVENTS" in tables and "domainId" in {c for c, _ in db.columns("NVTX_EVENTS")}:
        has_text_id = "textId" in {c for c, _ in db.columns("NVTX_EVENTS")}
        sql = ("SELECT n.domainId, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
               "LEFT JOIN StringIds s ON s.id = n.textId "
               if has_text_id and "StringIds" in tables else "SELECT n.domainId, n.text FROM NVTX_EVENTS n ")
        for dom, name in db.rows(sql + f"WHERE n.eventType = {int(S.NVTX_DOMAIN_CREATE)}", "NVTX_EVENTS"):
            if dom is not None and name is not None:
                domains[int(dom)] = str(name)
    out["domains"] = _lookup(domains)
    return out


def read_nsys_sqlite(path: Path, trace_id: str, *, include_osrt: bool | None = None,
                     source_name: str | None = None) -> AdapterOutput:
    """Stream an nsys SQLite export as EVENT_SCHEMA batches; ``info`` is complete when they are exhausted.

    ``source_name`` is what error messages call the file (default: ``path``); a converted report passes the user's
    ``.nsys-rep``, not the cached export."""
    path = Path(path)
    name = source_name or str(path)
    check_sqlite_file(path, name)
    db = NsysDb(path, name)
    try:
        try:
            tables = db.tables()
        except Exception as exc:  # noqa: BLE001 - a corrupt file surfaces as a driver error here
            raise IngestError(f"{name}: not a readable SQLite database ({exc})") from None
        osrt = _osrt_enabled(include_osrt)
        read_tables = [t for t in S.EVENT_TABLES if t in tables and (t != S.OSRT_TABLE or osrt)]
        _validate(db, name, tables, read_tables)
        info = _trace_info(db, tables)
        _note_repairs(info, db.repairs)
    except IngestError:
        db.close()
        raise
    except Exception as exc:  # noqa: BLE001 - malformed pages surface as driver errors
        db.close()
        raise IngestError(f"{name}: cannot read the export ({exc})") from None
    return AdapterOutput(info=info, batches=_batches(db, name, trace_id, tables, read_tables, info, osrt))


def open_trace(path: Path, trace_id: str, ctx: OpenContext) -> AdapterOutput:
    """The registry's opener (``taxbreak.ingest.ADAPTERS``)."""
    return read_nsys_sqlite(path, trace_id)


def _note_repairs(info: TraceInfo, repairs: _Tally) -> None:
    """Say in the catalogue (``metadata_json``) which text values had undecodable bytes replaced."""
    if not repairs.counts:
        return
    counts = dict(sorted(repairs.counts.items()))
    info.metadata["text_repairs"] = counts
    note = (f"{sum(counts.values()):,} text value(s) held bytes that are not UTF-8; each undecodable byte was "
            "replaced by U+FFFD (" + ", ".join(f"{k} {v:,}" for k, v in counts.items()) + ")")
    notes = [n for n in info.metadata.get("notes", []) if "not UTF-8" not in n]
    info.metadata["notes"] = [*notes, note]


def _note_dangling(info: TraceInfo, dangling: _Tally) -> None:
    """Say in the catalogue (``metadata_json``: ``dangling_string_ids`` and a note) how many rows named a string id
    StringIds does not hold, per table.column: they are stored with a NULL name, counted here, never silently."""
    if not dangling.counts:
        return
    counts = dict(sorted(dangling.counts.items()))
    info.metadata["dangling_string_ids"] = counts
    note = (f"{sum(counts.values()):,} row(s) name a string id that StringIds does not hold: stored with a NULL "
            "name (" + ", ".join(f"{k} {v:,}" for k, v in counts.items()) + ")")
    info.metadata["notes"] = [*info.metadata.get("notes", []), note]


class _Prefetch:
    """Run each ``produce(put)`` in its own daemon thread; iterate what they put, at most ``depth`` items ahead.

    An exception in a thread is raised in the consumer; leaving the ``with`` block early stops the threads
    (their next ``put`` raises) and waits for them, so the caller may close what they were reading.
    """

    _END = object()

    def __init__(self, producers: list[Any], depth: int) -> None:
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(p,), name=f"nsys-sqlite-reader-{i}", daemon=True)
                         for i, p in enumerate(producers)]

    def _put(self, item: Any) -> None:  # noqa: ANN401 - queue items are (table, batch) or markers
        while True:
            if self._stop.is_set():
                raise _Stopped
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _run(self, produce: Any) -> None:  # noqa: ANN401
        try:
            produce(self._put)
            self._put(self._END)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            try:
                self._put(exc)
            except _Stopped:
                pass

    def __enter__(self) -> _Prefetch:
        for t in self._threads:
            t.start()
        return self

    def __iter__(self) -> Iterator[Any]:
        running = len(self._threads)
        while running:
            item = self._q.get()
            if item is self._END:
                running -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            yield item

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            while t.is_alive():
                try:
                    self._q.get(timeout=0.05)
                except queue.Empty:
                    pass
            t.join()


class _Stopped(Exception):
    pass


def _events(plan: _TablePlan, src: _Source, batch: pa.RecordBatch, lookups: dict[str, Lookup], origin: int,
            trace_id: str, duck: Callable[[], duckdb.DuckDBPyConnection], skipped: _Tally | None = None,
            repairs: _Tally | None = None, dangling: _Tally | None = None) -> pa.RecordBatch:
    """One source batch as EVENT_SCHEMA rows, in Arrow (``duck`` only for REAL/BLOB args columns); rows with
    impossible times are left out (counted in ``skipped``), text is made valid UTF-8 (counted in ``repairs``)."""
    batch = _repair_text(_drop_impossible(plan.table, batch, skipped), plan.table, repairs,
                         args_text=src.args_text)
    c = _Cols(batch, lookups, plan.table, dangling)
    out = plan.build(c)
    start = c.int("start")
    out.setdefault("ts_ns", pc.subtract_checked(start, origin))
    out.setdefault("dur_ns", pc.subtract_checked(c.int("end"), start))
    out["category"] = c.const(plan.table)
    if src.raw_args:
        out["args_json"] = _duck_args(duck(), src, batch)
    elif src.args_sql is not None:
        out["args_json"] = batch.column("__args")
    else:
        out["args_json"] = c.const("{}")
    return event_batch(out, c.n, trace_id=trace_id, source_format=SOURCE_FORMAT)


def _duck_args(con: duckdb.DuckDBPyConnection, src: _Source, batch: pa.RecordBatch) -> pa.Array:
    """args_json with the REAL/BLOB columns added by DuckDB (exact doubles) to SQLite's object of the rest."""
    duck = ("CAST(to_json(struct_pack(" + ", ".join(f"{_q(c)} := src.{_q(c)}" for c in src.raw_args)
            + ")) AS VARCHAR)")
    # Both objects hold scalars only, so each has exactly one closing/opening brace at its end/start.
    expr = f"rtrim(src.__args, '}}') || ',' || ltrim({duck}, '{{')" if src.args_sql is not None else duck
    con.register("src", batch)
    try:  # one thread and insertion order kept: the rows come back in the batch's order
        return con.sql(f"SELECT {expr} AS a FROM src").to_arrow_table().column("a").combine_chunks()
    finally:
        con.unregister("src")


def _batches(
    db: NsysDb, path: str, trace_id: str, tables: set[str], read_tables: list[str], info: TraceInfo, osrt: bool,
) -> Iterator[pa.RecordBatch]:
    """``path`` names the file in messages (the user's file); the connections read ``db.path``."""
    extra_dbs: list[NsysDb] = []
    dropped = _Tally()  # rows with impossible times, per table:reason (from the reader threads)
    dangling = _Tally()  # string ids StringIds does not hold, per table.column (the rows are kept, text NULL)
    try:
        skipped: dict[str, int] = {}
        counts = {t: int(db.rows(f"SELECT count(*) FROM {_q(t)}")[0][0]) for t in read_tables}
        source_rows = sum(counts.values())
        if S.OSRT_TABLE in tables and not osrt:
            n = int(db.rows(f"SELECT count(*) FROM {_q(S.OSRT_TABLE)}")[0][0])
            source_rows += n
            if n:
                skipped["OSRT_API:not_requested"] = n
        if "NVTX_EVENTS" in read_tables:
            skipped.update(_nvtx_skips(db))
        # read-only connections, one per reader thread, sharing the repair counts
        dbs = [db] + [NsysDb(db.path, db.name, db.repairs) for _ in range(READERS - 1)]
        extra_dbs.extend(dbs[1:])
        origin = _origin(dbs, read_tables, counts)
        start = info.metadata.get("session_start", {}).get("utcEpochNs")
        info.metadata["origin_ns"] = origin
        if start is not None and origin is not None:
            info.start_epoch_ns = int(start) + origin
        lookups = _build_lookups(db, tables)
        work = []
        for t in read_tables:
            cols = db.columns(t)
            plan = _plan(t, {c for c, _ in cols})
            src = _source(plan, cols)
            work.append((t, plan, src))
        origin_ns = origin or 0
        # Big tables are read in rowid ranges by READERS threads, each on its own read-only connection.
        parts: queue.SimpleQueue = queue.SimpleQueue()
        views = db.views()  # a view has no rowid: read whole
        for t, plan, src in work:
            if counts[t] >= SPLIT_ROWS and t not in views:  # (min and max of the rowid in one query would scan)
                lo = int(db.rows(f"SELECT min(rowid) FROM {_q(t)}")[0][0])
                hi = int(db.rows(f"SELECT max(rowid) FROM {_q(t)}")[0][0])
                step = (hi - lo) // READERS + 1
                for a in range(lo, hi + 1, step):
                    parts.put((t, plan, src, (a, min(a + step - 1, hi))))
            else:
                parts.put((t, plan, src, None))

        def producer(rdb: NsysDb) -> Any:  # noqa: ANN401 - a thread body; ADBC and Arrow compute release the GIL
            def produce(put: Any) -> None:  # noqa: ANN401
                # Each reader also turns what it reads into events, so both cores run SQLite and Arrow while the
                # consumer only writes Parquet.
                cons: list[duckdb.DuckDBPyConnection] = []

                def duck() -> duckdb.DuckDBPyConnection:
                    if not cons:
                        cons.append(duckdb.connect(config={
                            "threads": 1, "preserve_insertion_order": True, "autoinstall_known_extensions": False,
                            "autoload_known_extensions": False}))
                    return cons[0]

                try:
                    while True:
                        try:
                            t, plan, src, rowids = parts.get_nowait()
                        except queue.Empty:
                            return
                        try:
                            first = True
                            for batch in rdb.stream(t, plan.where, only=src.raw, args_sql=src.args_sql,
                                                    rowids=rowids):
                                if first:  # the typed sentinel row leads the stream (UNION ALL keeps its order)
                                    if batch.num_rows == 0 or batch.column("__s")[0].as_py() != 0:
                                        raise IngestError(f"{path}: {t}: the type sentinel row did not come first")
                                    batch, first = batch.slice(1), False
                                if batch.num_rows:
                                    events = _events(plan, src, batch, lookups, origin_ns, trace_id, duck, dropped,
                                                     rdb.repairs, dangling)
                                    if events.num_rows:
                                        put(events)
                        except _NotAnId as exc:
                            raise IngestError(f"{path}: {exc}") from None
                        except (adbc.Error, pa.ArrowException, duckdb.Error) as exc:
                            raise IngestError(f"{path}: cannot read table {t}: {exc}") from None
                finally:
                    for con in cons:
                        con.close()
            return produce

        # SQLite reads and the transform (reader threads) overlap the Parquet write (the caller, this thread);
        # the queue bounds memory.
        with _Prefetch([producer(d) for d in dbs], depth=PREFETCH_BATCHES) as pending:
            yield from pending
        for key, n in dropped.counts.items():
            skipped[key] = skipped.get(key, 0) + n
        info.skipped_counts = dict(sorted(skipped.items()))
        info.source_event_count = source_rows
        _note_repairs(info, db.repairs)
        _note_dangling(info, dangling)
    except IngestError:
        raise
    except (duckdb.Error, adbc.Error) as exc:  # the set-up queries (counts, origin, lookups)
        raise IngestError(f"{path}: cannot read the export ({exc})") from None
    finally:
        for d in extra_dbs:
            d.close()
        db.close()
