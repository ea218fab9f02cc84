"""Nsight Systems SQLite exports (``nsys export --type sqlite``) into the common event schema.

The file is untrusted and opened read-only through ADBC-SQLite with ``mode=ro&immutable=1`` (no locks, no
journal, nothing written beside it, extension loading off).  Each event table is streamed in record batches
and transformed by DuckDB one batch at a time, so memory stays bounded whatever the file size.

Throughput (bench/bench_nsys_ingest.py): SQLite builds ``args_json`` itself with ``json_object`` over the
INTEGER/TEXT columns we do not map (about the cost of reading those columns into Arrow; DuckDB's
``to_json(struct_pack(...))`` over them was the largest single cost before), and that string bypasses DuckDB.
REAL/BLOB/untyped columns, which json_object would print inexactly, are read raw and spliced in by DuckDB.
Tables of ``SPLIT_ROWS`` rows or more are read in rowid ranges by ``READERS`` threads, each on its own read-only
connection, while this thread runs DuckDB and the caller writes Parquet; a bounded queue caps what is in flight.

Conventions (docs/architecture.md): ``ts_ns = start - origin`` with ``origin`` the earliest start among the
stored events, the catalogue's ``start_epoch_ns = TARGET_INFO_SESSION_START_TIME.utcEpochNs + origin``;
``pid``/``tid`` decoded from ``globalTid``; device-side rows (kernel, memcpy, memset, sync, graph trace) carry
the launching process from ``globalPid`` and the stream id as ``tid``, so ``(pid, correlation_id)`` joins a
kernel to its launch call.  Columns the schema has no field for go to ``args_json`` unchanged.
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbc_driver_sqlite.dbapi as adbc_sqlite
import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from taxbreak.ingest import nsys_schema as S
from taxbreak.ingest.base import AdapterOutput, IngestError, TraceInfo
from taxbreak.schemas import EVENT_SCHEMA

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


def _q(ident: str) -> str:
    """Quote an SQL identifier (table/column names come from the untrusted file)."""
    return '"' + ident.replace('"', '""') + '"'


def check_sqlite_file(path: Path) -> None:
    """Refuse files that are not SQLite databases or are shorter than their header says."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    if not head.startswith(SQLITE_MAGIC):
        raise IngestError(
            f"{path}: not a SQLite database (no 'SQLite format 3' header); expected an nsys SQLite export"
        )
    if len(head) < 100:
        raise IngestError(f"{path}: truncated SQLite file ({size} bytes, shorter than the 100-byte header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(head[28:32], "big")
    header_count_valid = head[24:28] == head[92:96]
    if header_count_valid and page_count and size < page_size * page_count:
        raise IngestError(
            f"{path}: truncated SQLite file: the header says {page_count} pages of {page_size} bytes "
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
    """A read-only ADBC connection to one export."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.conn = adbc_sqlite.connect(sqlite_ro_uri(path))
        except Exception as exc:  # noqa: BLE001 - any driver error is a bad input
            raise IngestError(f"{path}: cannot open as SQLite: {exc}") from None
        self._columns: dict[str, list[tuple[str, str]]] = {}
        self._cursors: list[Any] = []  # a stream lives only as long as its cursor

    def close(self) -> None:
        for cur in self._cursors:
            try:
                cur.close()
            except Exception:  # noqa: BLE001 - closing after a failed read must not mask the first error
                pass
        self._cursors.clear()
        self.conn.close()

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        cur = self.conn.cursor()
        try:
            cur.execute(sql, params) if params else cur.execute(sql)
            return cur.fetchall()
        finally:
            cur.close()

    def tables(self) -> set[str]:
        return {r[0] for r in self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def columns(self, table: str) -> list[tuple[str, str]]:
        if table not in self._columns:
            self._columns[table] = [(r[0], r[1] or "") for r in self.rows(
                "SELECT name, type FROM pragma_table_info(?)", (table,))]
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
        names = "".join(f", __t.{_q(c)}" for c, _ in cols)
        if args_sql is not None:
            sentinel += ", '' AS __args"
            names += f", {args_sql} AS __args"
        if rowids is not None:
            cond = "__t.rowid BETWEEN ? AND ?"
            where = f"{where} AND {cond}" if where else f"WHERE {cond}"
        sql = (
            f"SELECT 0 AS __s{sentinel} UNION ALL "
            f"SELECT * FROM (SELECT 1 AS __s{names} FROM {_q(table)} AS __t {where})"
        )
        cur = self.conn.cursor()
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        self._cursors.append(cur)
        cur.execute(sql, rowids) if rowids is not None else cur.execute(sql)
        return cur.fetch_record_batch()

    def small_table(self, table: str) -> list[dict[str, Any]]:
        """A small table (metadata, names) as a list of dicts."""
        cols = [c for c, _ in self.columns(table)]
        names = ", ".join(_q(c) for c in cols)
        return [dict(zip(cols, r, strict=True)) for r in self.rows(f"SELECT {names} FROM {_q(table)}")]


@dataclass
class _TablePlan:
    table: str
    exprs: dict[str, str]  # EVENT_SCHEMA field -> DuckDB expression over src (and joins)
    mapped: set[str]  # source columns consumed by exprs (not repeated in args_json)
    string_args: dict[str, str] = field(default_factory=dict)  # args_json key -> id column resolved in StringIds
    keep_in_args: set[str] = field(default_factory=set)  # mapped columns still copied to args_json
    lookups: dict[str, tuple[str, str]] = field(default_factory=dict)  # new column -> (id column, lookup)
    where: str = ""


def _gid_pid(col: str) -> str:
    return f"CAST(((src.{_q(col)} >> {SHIFT}) & {MASK}) AS VARCHAR)"


def _gid_tid(col: str) -> str:
    return f"CAST((src.{_q(col)} & {MASK}) AS VARCHAR)"


def _col(cols: set[str], name: str, cast: str = "BIGINT") -> str:
    return f"CAST(src.{_q(name)} AS {cast})" if name in cols else "NULL"


def _common_device(cols: set[str], table: str) -> dict[str, str]:
    return {
        "pid": _gid_pid("globalPid"),
        "tid": "CAST(src.\"streamId\" AS VARCHAR)",
        "device_id": _col(cols, "deviceId", "INTEGER"),
        "stream_id": _col(cols, "streamId"),
        "correlation_id": _col(cols, "correlationId"),
        "category": f"'{table}'",
    }


def _plan(table: str, cols: set[str]) -> _TablePlan:
    host = {"pid": _gid_pid("globalTid"), "tid": _gid_tid("globalTid"), "category": f"'{table}'"}
    if table == "CUPTI_ACTIVITY_KIND_RUNTIME":
        kind = (
            "CASE WHEN src.__plain LIKE 'cudaGraphLaunch%' OR src.__plain LIKE 'cuGraphLaunch%' THEN 'graph_launch' "
            "WHEN src.__plain LIKE 'cublas%' OR src.__plain LIKE 'cudnn%' THEN 'library_api' "
            f"WHEN src.\"eventClass\" = {S.EVENT_CLASS_CUDA_RUNTIME} THEN 'runtime_api' "
            f"WHEN src.\"eventClass\" = {S.EVENT_CLASS_CUDA_DRIVER} THEN 'driver_api' ELSE 'other' END"
        )
        return _TablePlan(
            table,
            {**host, "kind": kind, "name": "src.__plain",
             "raw_name": "CASE WHEN src.__raw <> src.__plain THEN src.__raw END",
             "correlation_id": _col(cols, "correlationId")},
            {"globalTid", "correlationId", "nameId"},
            lookups={"__raw": ("nameId", "strs"), "__plain": ("nameId", "plain")},
        )
    if table == "CUPTI_ACTIVITY_KIND_KERNEL":
        exprs = {
            **_common_device(cols, table), "kind": "'kernel'", "name": "src.__dn", "short_name": "src.__sn",
            "grid_x": _col(cols, "gridX"), "grid_y": _col(cols, "gridY"), "grid_z": _col(cols, "gridZ"),
            "block_x": _col(cols, "blockX"), "block_y": _col(cols, "blockY"), "block_z": _col(cols, "blockZ"),
            "registers_per_thread": _col(cols, "registersPerThread"),
            "shared_memory_bytes": "CAST(src.\"staticSharedMemory\" + src.\"dynamicSharedMemory\" AS BIGINT)",
            "graph_id": _col(cols, "graphId"), "graph_node_id": _col(cols, "graphNodeId"),
        }
        lookups = {"__dn": ("demangledName", "strs"), "__sn": ("shortName", "strs")}
        extra: dict[str, str] = {}
        mapped = {"start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName",
                  "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread", "graphId",
                  "graphNodeId"}
        if "mangledName" in cols:
            extra["mangledName"] = "mangledName"
            mapped.add("mangledName")
        return _TablePlan(table, exprs, mapped, string_args=extra, lookups=lookups,
                          keep_in_args={"staticSharedMemory", "dynamicSharedMemory"})
    if table == "CUPTI_ACTIVITY_KIND_MEMCPY":
        exprs = {
            **_common_device(cols, table), "kind": "'memcpy'",
            "name": "'[CUDA memcpy ' || COALESCE(src.__mk_label, CAST(src.\"copyKind\" AS VARCHAR)) || ']'",
            "bytes": _col(cols, "bytes"), "copy_kind": "COALESCE(src.__mk_short, CAST(src.\"copyKind\" AS VARCHAR))",
            "graph_node_id": _col(cols, "graphNodeId"),
        }
        return _TablePlan(table, exprs, {"start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                         "bytes", "graphNodeId"},
                          lookups={"__mk_label": ("copyKind", "memcpy_label"),
                                   "__mk_short": ("copyKind", "memcpy_short")},
                          keep_in_args={"copyKind"})
    if table == "CUPTI_ACTIVITY_KIND_MEMSET":
        exprs = {**_common_device(cols, table), "kind": "'memset'", "name": "'[CUDA memset]'",
                 "bytes": _col(cols, "bytes"), "graph_node_id": _col(cols, "graphNodeId")}
        return _TablePlan(table, exprs, {"start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                         "bytes", "graphNodeId"})
    if table == "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION":
        exprs = {**_common_device(cols, table), "kind": "'sync'",
                 "name": "COALESCE(src.__st, 'sync type ' || CAST(src.\"syncType\" AS VARCHAR))"}
        return _TablePlan(table, exprs, {"start", "end", "deviceId", "streamId", "correlationId", "globalPid"},
                          lookups={"__st": ("syncType", "sync")}, keep_in_args={"syncType"})
    if table == "NVTX_EVENTS":
        ranges = ", ".join(str(t) for t in S.NVTX_RANGE_TYPES)
        marks = ", ".join(str(t) for t in S.NVTX_MARK_TYPES)
        name = "COALESCE(src.\"text\", src.__tx)" if "textId" in cols else "src.\"text\""
        lookups = {"__tx": ("textId", "strs")} if "textId" in cols else {}
        exprs = {
            **host,
            "kind": f"CASE WHEN src.\"eventType\" IN ({marks}) THEN 'nvtx_mark' ELSE 'nvtx_range' END",
            "name": name,
            "dur_ns": f"CASE WHEN src.\"eventType\" IN ({marks}) THEN NULL "
            "ELSE CAST(src.\"end\" - src.\"start\" AS BIGINT) END",
        }
        mapped = {"start", "end", "text", "globalTid"}
        if "domainId" in cols:
            lookups["__dom"] = ("domainId", "domains")
            exprs["domain"] = ("CASE WHEN src.\"domainId\" IS NULL OR src.\"domainId\" = 0 THEN NULL "
                               "ELSE COALESCE(src.__dom, 'domainId=' || CAST(src.\"domainId\" AS VARCHAR)) END")
        if "endGlobalTid" in cols:
            exprs["end_tid"] = (
                "CASE WHEN src.\"endGlobalTid\" IS NOT NULL AND src.\"endGlobalTid\" <> src.\"globalTid\" "
                f"THEN {_gid_tid('endGlobalTid')} END"
            )
        where = (f"WHERE ((\"eventType\" IN ({ranges}) AND \"end\" IS NOT NULL) OR \"eventType\" IN ({marks}))")
        return _TablePlan(table, exprs, mapped, lookups=lookups, where=where)
    if table in ("CUBLAS_EVENTS", "CUDNN_EVENTS", "CUDA_GRAPH_EVENTS", "CUDA_GRAPH_NODE_EVENTS", "OSRT_API"):
        kind = {"CUBLAS_EVENTS": "library_api", "CUDNN_EVENTS": "library_api", "OSRT_API": "os_runtime"}.get(
            table, "other")
        exprs = {**host, "kind": f"'{kind}'", "name": "src.__raw"}
        mapped = {"globalTid", "nameId"}
        if table == "CUDA_GRAPH_EVENTS" and "graphId" in cols:
            exprs["graph_id"] = _col(cols, "graphId")
            mapped.add("graphId")
        if table == "CUDA_GRAPH_NODE_EVENTS":
            exprs["graph_node_id"] = _col(cols, "graphNodeId")
            mapped.add("graphNodeId")
        return _TablePlan(table, exprs, mapped, lookups={"__raw": ("nameId", "strs")})
    if table == "CUPTI_ACTIVITY_KIND_GRAPH_TRACE":
        exprs = {**_common_device(cols, table), "kind": "'other'",
                 "name": "'[CUDA graph ' || CAST(src.\"graphId\" AS VARCHAR) || ']'",
                 "graph_id": _col(cols, "graphId")}
        return _TablePlan(table, exprs, {"start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                         "graphId"})
    raise AssertionError(table)


_SRC_REF = re.compile(r'src\.("(?:[^"]|"")+")')


def _json_safe(decl_type: str) -> bool:
    """Columns of INTEGER or TEXT affinity: SQLite's json_object writes their values exactly."""
    t = (decl_type or "").upper()
    return "INT" in t or "CHAR" in t or "CLOB" in t or "TEXT" in t


@dataclass
class _Source:
    """What to read from SQLite for one table: the raw columns DuckDB needs and the args JSON built in SQLite."""

    raw: list[str]  # columns read as Arrow columns
    raw_args: list[str]  # of those, the ones args_json takes in DuckDB (REAL/BLOB/untyped: exact there)
    args_sql: str | None  # SQLite json_object(...) over the other args columns, or None when there are none

    @property
    def args_passthrough(self) -> bool:
        """args_json is SQLite's ``__args`` as it is: it bypasses DuckDB (copying long strings through it costs)."""
        return self.args_sql is not None and not self.raw_args


def _source(plan: _TablePlan, cols: list[tuple[str, str]], has_strings: bool) -> _Source:
    """Split the table's columns between SQLite (args JSON of INTEGER/TEXT columns) and DuckDB (the rest).

    Building the JSON in SQLite's json_object costs about what reading those columns into Arrow would, and
    DuckDB's to_json(struct_pack(...)) over them afterwards was the largest single cost of the ingest.
    """
    names = [c for c, _ in cols]
    refs = {m.group(1)[1:-1].replace('""', '"') for e in plan.exprs.values() for m in _SRC_REF.finditer(e)}
    refs |= {src for src, _ in plan.lookups.values()} | {"start", "end"}
    args = [(c, t) for c, t in cols if (c not in plan.mapped or c in plan.keep_in_args) and c not in ("start", "end")]
    raw_args = [c for c, t in args if not _json_safe(t)]
    pairs = [f"'{c.replace(chr(39), chr(39) * 2)}', __t.{_q(c)}" for c, t in args if _json_safe(t)]
    for key, id_col in plan.string_args.items():
        value = (f"(SELECT __si.value FROM StringIds AS __si WHERE __si.id = __t.{_q(id_col)})"
                 if has_strings else "NULL")
        pairs.append(f"'{key}', {value}")
    raw = [c for c in names if c in refs or c in raw_args]
    return _Source(raw, raw_args, "json_object(" + ", ".join(pairs) + ")" if pairs else None)


def _select_sql(plan: _TablePlan, src: _Source) -> str:
    exprs = dict(plan.exprs)
    exprs.setdefault("ts_ns", "CAST(src.\"start\" - $origin AS BIGINT)")
    exprs.setdefault("dur_ns", "CAST(src.\"end\" - src.\"start\" AS BIGINT)")
    exprs["trace_id"] = "$trace_id"
    exprs["source_format"] = f"'{SOURCE_FORMAT}'"
    duck = ("CAST(to_json(struct_pack(" + ", ".join(f"{_q(c)} := src.{_q(c)}" for c in src.raw_args)
            + ")) AS VARCHAR)") if src.raw_args else None
    if src.args_sql and duck:
        # Both objects hold scalars only, so each has exactly one closing/opening brace at its end/start.
        exprs["args_json"] = f"rtrim(src.__args, '}}') || ',' || ltrim({duck}, '{{')"
    else:
        exprs["args_json"] = "NULL" if src.args_passthrough else duck or "'{}'"
    select = []
    for fld in EVENT_SCHEMA:
        expr = exprs.get(fld.name, "NULL")
        select.append(f"CAST({expr} AS {_DUCK_TYPES[str(fld.type)]}) AS {fld.name}")
    return "SELECT " + ", ".join(select) + " FROM src WHERE src.__s = 1"


_DUCK_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER"}


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


def _validate(db: NsysDb, path: Path, tables: set[str], read_tables: list[str]) -> None:
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


def _trace_info(db: NsysDb, tables: set[str]) -> TraceInfo:
    info = TraceInfo(source_format=SOURCE_FORMAT)
    meta: dict[str, Any] = {}
    if "META_DATA_EXPORT" in tables:
        export = _kv(db.small_table("META_DATA_EXPORT"))
        meta["export"] = export
        for key, name in (("EXPORT_PRODUCT_VERSION", "nsys_export"), ("EXPORT_SCHEMA_VERSION", "export_schema")):
            if export.get(key):
                info.tool_versions[name] = export[key]
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
                                "WHERE t.globalTid IS NOT NULL")
        }
    info.metadata = meta
    return info


def _origin(db: NsysDb, read_tables: list[str]) -> int | None:
    lows = []
    for t in read_tables:
        where = ""
        if t == "NVTX_EVENTS":
            plan_where = _plan(t, {c for c, _ in db.columns(t)}).where
            where = plan_where
        (lo,) = db.rows(f"SELECT min(\"start\") FROM {_q(t)} {where}")[0]
        if lo is not None:
            lows.append(int(lo))
    return min(lows) if lows else None


def _nvtx_skips(db: NsysDb) -> dict[str, int]:
    skipped: dict[str, int] = {}
    for etype, no_end, n in db.rows(
        "SELECT \"eventType\", \"end\" IS NULL, count(*) FROM NVTX_EVENTS GROUP BY 1, 2"
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


Lookup = tuple[pa.Array, pa.Array]  # (int64 keys, string values)


def _lookup(pairs: dict[int, str]) -> Lookup:
    return pa.array(list(pairs), pa.int64()), pa.array(list(pairs.values()), pa.string())


def _build_lookups(db: NsysDb, tables: set[str]) -> dict[str, Lookup]:
    """id -> text maps resolved in Arrow per batch (a DuckDB join would buffer the whole stream)."""
    out: dict[str, Lookup] = {}
    if "StringIds" in tables:
        ids = db.stream("StringIds").read_all()
        ids = ids.filter(pc.equal(ids.column("__s"), 1))
        keys = ids.column("id").combine_chunks().cast(pa.int64())
        values = ids.column("value").combine_chunks().cast(pa.string())
        out["strs"] = (keys, values)
        out["plain"] = (keys, pc.replace_substring_regex(values, r"_v[0-9]+$", ""))
    else:
        out["strs"] = out["plain"] = _lookup({})
    kinds = dict(S.MEMCPY_KINDS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        for r in db.small_table("ENUM_CUDA_MEMCPY_OPER"):
            if r.get("id") is not None and r.get("label"):
                short = kinds.get(r["id"], (None,))[0]
                short = short or str(r.get("name") or r["id"]).removeprefix("CUDA_MEMCPY_KIND_")
                kinds[int(r["id"])] = (short, str(r["label"]))
    out["memcpy_short"] = _lookup({k: v[0] for k, v in kinds.items()})
    out["memcpy_label"] = _lookup({k: v[1] for k, v in kinds.items()})
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
        for dom, name in db.rows(sql + "WHERE n.eventType = ?", (S.NVTX_DOMAIN_CREATE,)):
            if dom is not None and name is not None:
                domains[int(dom)] = str(name)
    out["domains"] = _lookup(domains)
    return out


def _enriched(reader: pa.RecordBatchReader, plan: _TablePlan, lookups: dict[str, Lookup]) -> pa.RecordBatchReader:
    """Add the plan's resolved-name columns to every batch of ``reader``."""
    if not plan.lookups:
        return reader
    names = list(plan.lookups)
    schema = reader.schema
    for n in names:
        schema = schema.append(pa.field(n, pa.string()))

    def gen() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            cols = list(batch.columns)
            for n in names:
                src_col, which = plan.lookups[n]
                keys, values = lookups[which]
                idx = pc.index_in(batch.column(src_col).cast(pa.int64()), value_set=keys)
                cols.append(pc.take(values, idx))
            yield pa.RecordBatch.from_arrays(cols, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, gen())


def read_nsys_sqlite(path: Path, trace_id: str, *, include_osrt: bool | None = None) -> AdapterOutput:
    """Stream an nsys SQLite export as EVENT_SCHEMA batches; ``info`` is complete when they are exhausted."""
    path = Path(path)
    check_sqlite_file(path)
    db = NsysDb(path)
    try:
        try:
            tables = db.tables()
        except Exception as exc:  # noqa: BLE001 - a corrupt file surfaces as a driver error here
            raise IngestError(f"{path}: not a readable SQLite database ({exc})") from None
        osrt = _osrt_enabled(include_osrt)
        read_tables = [t for t in S.EVENT_TABLES if t in tables and (t != S.OSRT_TABLE or osrt)]
        _validate(db, path, tables, read_tables)
        info = _trace_info(db, tables)
    except IngestError:
        db.close()
        raise
    except Exception as exc:  # noqa: BLE001 - malformed pages surface as driver errors
        db.close()
        raise IngestError(f"{path}: cannot read the export ({exc})") from None
    return AdapterOutput(info=info, batches=_batches(db, path, trace_id, tables, read_tables, info, osrt))


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


def _batches(
    db: NsysDb, path: Path, trace_id: str, tables: set[str], read_tables: list[str], info: TraceInfo, osrt: bool,
) -> Iterator[pa.RecordBatch]:
    # Insertion order is kept so a passed-through args_json column lines up with DuckDB's output rows.
    con = duckdb.connect(config={"threads": 2, "preserve_insertion_order": True,
                                 "autoinstall_known_extensions": False, "autoload_known_extensions": False})
    current = "(setup)"
    extra_dbs: list[NsysDb] = []
    try:
        source_rows = 0
        skipped: dict[str, int] = {}
        for t in read_tables:
            source_rows += int(db.rows(f"SELECT count(*) FROM {_q(t)}")[0][0])
        if S.OSRT_TABLE in tables and not osrt:
            n = int(db.rows(f"SELECT count(*) FROM {_q(S.OSRT_TABLE)}")[0][0])
            source_rows += n
            if n:
                skipped["OSRT_API:not_requested"] = n
        if "NVTX_EVENTS" in read_tables:
            skipped.update(_nvtx_skips(db))
        origin = _origin(db, read_tables)
        start = info.metadata.get("session_start", {}).get("utcEpochNs")
        info.metadata["origin_ns"] = origin
        if start is not None and origin is not None:
            info.start_epoch_ns = int(start) + origin
        lookups = _build_lookups(db, tables)
        has_strings = "StringIds" in tables
        work = []
        for t in read_tables:
            cols = db.columns(t)
            plan = _plan(t, {c for c, _ in cols})
            src = _source(plan, cols, has_strings)
            work.append((t, plan, src, _select_sql(plan, src)))
        params = {"origin": origin or 0, "trace_id": trace_id}
        # Big tables are read in rowid ranges by READERS threads, each on its own read-only connection.
        parts: queue.SimpleQueue = queue.SimpleQueue()
        for t, plan, src, _ in work:
            lo, hi, n = db.rows(f"SELECT min(rowid), max(rowid), count(*) FROM {_q(t)}")[0]
            if n and n >= SPLIT_ROWS:
                step = (int(hi) - int(lo)) // READERS + 1
                for a in range(int(lo), int(hi) + 1, step):
                    parts.put((t, plan, src, (a, min(a + step - 1, int(hi)))))
            else:
                parts.put((t, plan, src, None))
        dbs = [db] + [NsysDb(path) for _ in range(READERS - 1)]
        extra_dbs.extend(dbs[1:])

        def producer(rdb: NsysDb) -> Any:  # noqa: ANN401 - a thread body; ADBC and Arrow compute release the GIL
            def produce(put: Any) -> None:  # noqa: ANN401
                while True:
                    try:
                        t, plan, src, rowids = parts.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        reader = rdb.stream(t, plan.where, only=src.raw, args_sql=src.args_sql, rowids=rowids)
                        first = True
                        for batch in _enriched(reader, plan, lookups):
                            if first:  # the typed sentinel row leads the stream (UNION ALL keeps its order)
                                if batch.num_rows == 0 or batch.column("__s")[0].as_py() != 0:
                                    raise IngestError(f"{path}: {t}: the type sentinel row did not come first")
                                batch, first = batch.slice(1), False
                            if batch.num_rows:
                                put((t, batch))
                    except (adbc_sqlite.Error, pa.ArrowException) as exc:
                        raise IngestError(f"{path}: cannot read table {t}: {exc}") from None
            return produce

        # SQLite reads (reader threads) overlap DuckDB and the Parquet write (this thread); the queue bounds memory.
        with _Prefetch([producer(d) for d in dbs], depth=PREFETCH_BATCHES) as pending:
            sqls = {t: (sql, src.args_passthrough) for t, _, src, sql in work}
            args_at = EVENT_SCHEMA.get_field_index("args_json")
            for current, src_batch in pending:
                sql, passthrough = sqls[current]
                # One DuckDB query per source batch: memory stays at a batch (a streamed scan would read ahead).
                con.register("src", src_batch)
                out = con.sql(sql, params=params).to_arrow_table()
                if passthrough:
                    if out.num_rows != src_batch.num_rows:
                        raise AssertionError(f"{current}: {out.num_rows} rows out of {src_batch.num_rows}")
                    out = out.set_column(args_at, "args_json", src_batch.column("__args").cast(pa.string()))
                for batch in out.to_batches():
                    if batch.num_rows:
                        if batch.schema != EVENT_SCHEMA:
                            batch = pa.RecordBatch.from_arrays(
                                [col.cast(f.type) for col, f in zip(batch.columns, EVENT_SCHEMA, strict=True)],
                                schema=EVENT_SCHEMA)
                        yield batch
                con.unregister("src")
            current = "(end)"
        info.skipped_counts = skipped
        info.source_event_count = source_rows
    except IngestError:
        raise
    except (duckdb.Error, adbc_sqlite.Error) as exc:
        raise IngestError(f"{path}: cannot read table {current}: {exc}") from None
    finally:
        con.close()
        for d in extra_dbs:
            d.close()
        db.close()
