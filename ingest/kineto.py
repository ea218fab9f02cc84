"""Kineto (PyTorch profiler) Chrome-trace JSON -> events of the common schema.

Route (see ``../shared/STACK.md``): the bytes around the ``traceEvents`` array (head + ``[]`` + tail) are
parsed as JSON, which both validates the byte range and yields the top-level metadata; the array's bytes are
copied by the kernel (gzip: decompressed first, by ISA-L's igzip) into temporary files in ``workdir``, pieces of about
``PIECE_BYTES`` cut between two elements, each a JSON array, because DuckDB reads one JSON array file on one
thread only.  A cut that fell inside an element (``},{`` in a string or an args array) leaves its piece invalid,
so DuckDB's read fails and the array is read once more as one file.  DuckDB then reads the pieces once,
streaming, in order, in parallel on the machine's cores (at most ``DUCKDB_MAX_THREADS``; small pieces keep the
rows it holds back for order, and so the memory, small) within ``DUCKDB_MEMORY_LIMIT``, with a fixed column list
(``ts``/``dur`` as ``DECIMAL(21,3)``: exact integer ns -- the decimal's unscaled value -- never through a binary
float; sub-ns digits are rounded half away from zero), and the per-event SQL turns it into staged rows in
absolute ns, written as Arrow record batches to an uncompressed IPC stream in ``workdir``; the trace origin, the
row count and the processes of the launch calls are gathered from the batches on the way.  The stage is then
read back batch by batch (ns made relative to the origin, device rows given their launching process) into the
common schema.  Both passes run on a producer thread ahead of their consumer (``ingest.base.prefetched``: DuckDB
parses while this batch is checked; the lake's thread finishes the next batches while it writes this one).  Memory stays
flat with the trace size; the workdir holds the array's bytes and then the stage (about the size of the JSON).
When the byte-range check or DuckDB's read fails (an unexpected layout, an element that is not an object), the
file is re-read with ``ijson``, streaming, into newline-delimited JSON and the same SQL runs on that.

Conventions (``docs/architecture.md``): ``ts_ns`` counts from the earliest timestamp of the trace's timed
(non-metadata) events; device-side events (kernel, memcpy, memset, gpu_annotation, and sync/profiler ranges
that carry a device) get the launching host process as ``pid`` -- the only host process of the trace's launch
calls, or, with several, the one whose launch has the same correlation id -- with the source pid kept in
``args_json`` as ``_source_pid``, and their stream as ``tid``.  Skipped elements are counted by reason:
``not_an_object``, ``bad_ts``/``bad_dur`` (not a number), ``missing_ts`` (a timed event without ``ts``),
``ts_out_of_range``/``dur_out_of_range`` (beyond int64 ns, or ts below -2^62 ns), ``negative_dur``,
``end_out_of_range`` (ts + dur beyond int64 ns), ``bad_correlation`` (a correlation id that is not an int64).
One such number never fails the file.

Limits (``taxbreak.config``): a gzip file may expand to ``ingest.max_gzip_ratio`` times its size (files up to
64 MiB of JSON always may), the JSON written to the workdir is at most ``ingest.max_temp_bytes``, and arrays and
objects may nest ``ingest.max_json_depth`` deep; beyond, the file fails with the limit named.  Messages name the
source file, never a file of the workdir.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from isal import igzip, isal_zlib

from taxbreak.ingest.base import (
    AdapterOutput,
    IngestError,
    IngestLimits,
    NotATraceError,
    OpenContext,
    TraceId,
    TraceInfo,
    event_batch,
    prefetched,
    trace_id_of,
)
from taxbreak.ingest.redact import redact
from taxbreak.schemas import LAUNCH_KINDS

SOURCE_FORMAT = "kineto"
CHUNK_BYTES = 1 << 20
COPY_RANGE_BYTES = 64 << 20
# DuckDB reads one JSON array file on one thread: the events array is cut between elements into files of about
# PIECE_BYTES (fewer when that gives each DuckDB thread one), not below PIECE_MIN_BYTES, read in parallel, in order
PIECE_BYTES = 8 << 20
PIECE_MIN_BYTES = 1 << 20
BOUNDARY_WINDOW_BYTES = 64 << 10  # bytes searched for a cut at a time
HEAD_SEARCH_LIMIT_BYTES = 64 << 20  # the traceEvents key must start within this many bytes for the fast path
TAIL_WINDOWS_BYTES = (64 << 10, 1 << 20, 8 << 20, 64 << 20)
ROWS_PER_BATCH = 65_536
PREFETCH_BATCHES = 1  # batches a producer thread may have ready ahead of their consumer (memory stays flat)
DUCKDB_MEMORY_LIMIT = "256MB"
DUCKDB_MAX_THREADS = 4  # the JSON pass uses the cores the machine has, up to this many (memory_limit bounds them)
TOOL_VERSION_PREFIXES = ("schemaversion", "cupti", "cuda", "hip", "roctracer", "rocm", "torch", "pytorch", "kineto")
METADATA_VALUE_MAX_BYTES = 64 << 10  # top-level metadata values larger than this are summarised, not kept
# A stored event's ts, dur and ts + dur fit int64 ns (exact µs with 3 decimals); ts is not below -2^62 ns, so
# times made relative to the origin fit int64 unless a trace spans both extremes (then it fails, clearly).
MAX_US = "9223372036854775.807"
MIN_TS_US = "-4611686018427387.904"
GZIP_FREE_BYTES = 64 << 20  # any gzip file may expand to this much, whatever its ratio

_HEAD_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_ELEMENT_BOUNDARY_RE = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # '}' ',' '{' between two elements
# The closing bracket of an array of objects follows a '}' (or the '[' of an empty array).
_TAIL_CANDIDATE_RE = re.compile(r"[}\[][ \t\r\n]*(\])[ \t\r\n]*[,}]")
_DECODER = json.JSONDecoder()
_WS_RE = re.compile(r"[ \t\r\n]*")
_WS = b" \t\r\n"

# Kineto columns read by DuckDB.  ts/dur: exact decimal µs (3 decimals = ns); pid/tid/id: text (Kineto mixes
# ints and strings); args: the JSON object verbatim.
READ_COLUMNS: dict[str, str] = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    "ts": "DECIMAL(21,3)",
    "dur": "DECIMAL(21,3)",
    "id": "VARCHAR",
    "args": "JSON",
}

# Typed view of the args keys the schema has columns for (one parse of args per event).
_ARGS_STRUCTURE = json.dumps(
    {
        "correlation": "BIGINT",
        "External id": "BIGINT",
        "device": "INTEGER",
        "stream": "BIGINT",
        "grid": "BIGINT[]",
        "block": "BIGINT[]",
        "registers per thread": "BIGINT",
        "shared memory": "BIGINT",
        "bytes": "BIGINT",
        "size": "BIGINT",
        "memory bytes": "BIGINT",
        "kind": "VARCHAR",
    }
)

_SOURCE = "read_json($path, format := $format, columns := $columns)"

# Source category/phase -> schema kind (a SQL expression over the source columns ph, cat, name).
_KIND_SQL = """
    CASE
        WHEN ph = 'M' THEN 'metadata'
        WHEN ph IN ('s', 'f', 't') THEN 'flow'
        WHEN ph IN ('i', 'I') THEN 'instant'
        WHEN cat IN ('cpu_op', 'Operator') THEN 'framework_op'
        WHEN cat = 'python_function' THEN 'python_function'
        WHEN cat = 'user_annotation' THEN 'user_annotation'
        WHEN cat = 'gpu_user_annotation' THEN 'gpu_annotation'
        WHEN cat IN ('cuda_runtime', 'Runtime') THEN
            CASE WHEN name LIKE 'cudaGraphLaunch%' OR name LIKE 'hipGraphLaunch%' THEN 'graph_launch'
                 ELSE 'runtime_api' END
        WHEN cat = 'cuda_driver' THEN
            CASE WHEN name LIKE 'cuGraphLaunch%' OR name LIKE 'hipGraphLaunch%' THEN 'graph_launch'
                 ELSE 'driver_api' END
        WHEN cat IN ('kernel', 'Kernel') THEN 'kernel'
        WHEN cat IN ('gpu_memcpy', 'Memcpy') THEN 'memcpy'
        WHEN cat IN ('gpu_memset', 'Memset') THEN 'memset'
        WHEN cat = 'cuda_sync' THEN 'sync'
        WHEN cat = 'cuda_profiler_range' THEN 'profiler_range'
        ELSE 'other'
    END"""

# Device-side events: the host process launched them (architecture.md).
_DEVICE_SQL = (
    "(kind IN ('kernel', 'memcpy', 'memset', 'gpu_annotation') "
    "OR (kind IN ('sync', 'profiler_range') AND device_id IS NOT NULL))"
)

# The one JSON pass: the source rows -> staged rows (exact decimal µs, source pid; the origin and the launching
# processes are known only at the end of the pass, so they are applied when the stage is read back).
_STAGE_SQL = rf"""
WITH src AS (
    SELECT ph, cat, name, pid, tid, ts, dur, id, args,
           CAST(args AS VARCHAR) AS args_text,
           json_transform(args, '{_ARGS_STRUCTURE}') AS a,
           {_KIND_SQL} AS kind
    FROM {_SOURCE}
), t AS (
    SELECT *,
        CASE WHEN cat IN ('cuda_runtime', 'Runtime', 'cuda_driver') AND contains(name, '_v')
             THEN regexp_replace(name, '_v[0-9]+$', '') ELSE name END AS plain_name,
        a.device AS device_id,
        a.stream AS stream_id
    FROM src
), d AS (
    SELECT *, {_DEVICE_SQL} AS is_device,
        CASE
            WHEN ts IS NULL THEN CASE WHEN kind <> 'metadata' THEN 'missing_ts' END
            WHEN ts > {MAX_US} OR ts < {MIN_TS_US} THEN 'ts_out_of_range'
            WHEN dur < 0 THEN 'negative_dur'
            WHEN dur > {MAX_US} THEN 'dur_out_of_range'
            WHEN ts + coalesce(dur, 0) > {MAX_US} THEN 'end_out_of_range'
            WHEN a.correlation IS NULL AND contains(args_text, '"correlation":')
                 AND NOT contains(args_text, '"correlation":null') THEN 'bad_correlation'
        END AS skip_reason
    FROM t
)
SELECT
    kind,
    cat AS category,
    ph AS phase,
    plain_name AS name,
    CASE WHEN plain_name IS DISTINCT FROM name THEN name END AS raw_name,
    CASE WHEN skip_reason IS NULL THEN ts END AS ts_us,
    CASE WHEN skip_reason IS NULL THEN dur END AS dur_us,
    pid,
    CASE WHEN is_device AND stream_id IS NOT NULL THEN CAST(stream_id AS VARCHAR) ELSE tid END AS tid,
    device_id,
    stream_id,
    a.correlation AS correlation_id,
    CASE WHEN a."External id" IS NOT NULL THEN a."External id"
         WHEN contains(args_text, '"external id"') THEN TRY_CAST(json_extract_string(args, '$."external id"') AS BIGINT)
    END AS external_id,
    TRY_CAST(id AS BIGINT) AS flow_id,
    a.grid[1] AS grid_x, a.grid[2] AS grid_y, a.grid[3] AS grid_z,
    a.block[1] AS block_x, a.block[2] AS block_y, a.block[3] AS block_z,
    a."registers per thread" AS registers_per_thread,
    a."shared memory" AS shared_memory_bytes,
    CASE WHEN kind IN ('memcpy', 'memset') THEN coalesce(a.bytes, a.size, a."memory bytes") END AS bytes,
    CASE
        WHEN kind = 'memcpy' THEN coalesce(a.kind, nullif(regexp_extract(name, '^Memcpy (\S+)', 1), ''))
        WHEN kind = 'memset' THEN coalesce(a.kind, nullif(regexp_extract(name, '\(([^)]*)\)', 1), ''))
    END AS copy_kind,
    args_text AS args_json,
    is_device,
    skip_reason
FROM d
"""


# -- reading the source ----------------------------------------------------------------------------------
class _Source:
    """The file's bytes, decompressed when gzip (by ISA-L's igzip: about 3.6 times zlib's speed on a Kineto
    trace); counts raw bytes read for progress."""

    def __init__(self, path: Path, limits: IngestLimits) -> None:
        self.path = path
        self.raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        magic = self.raw.read(2)
        self.raw.seek(0)
        self.is_gzip = magic == b"\x1f\x8b"
        self.fh: IO[bytes] = igzip.GzipFile(fileobj=self.raw, mode="rb") if self.is_gzip else self.raw
        self.out_bytes = 0
        self.limit_bytes, self.limit_note = _expansion_limit(path, self.is_gzip, limits)

    def read(self, n: int) -> bytes:
        try:
            data = self.fh.read(n)
        except (gzip.BadGzipFile, isal_zlib.error, OSError, EOFError) as exc:
            if not self.is_gzip:  # the file's own read failed
                raise IngestError(f"{self.path}: corrupt gzip data ({exc})") from None
            raise _gzip_error(self.path, exc, self.out_bytes + GZIP_FREE_BYTES) from None
        self.out_bytes += len(data)
        if self.out_bytes > self.limit_bytes:
            raise IngestError(f"{self.path}: {self.limit_note}; not ingested")
        return data

    def raw_pos(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.raw.close()


def _gzip_error(path: Path, exc: Exception, upto_bytes: int) -> IngestError:
    """What is wrong with the gzip file ``path``, said as zlib says it: igzip found a fault (``exc``); the file is
    inflated once more by zlib, up to ``upto_bytes`` (a little past where igzip stopped; only a broken file pays
    this), so that the message is zlib's, as before igzip (igzip names a corrupt block in its own words and reads
    garbage after the last member as a truncation)."""
    try:
        with open(path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as fh:
            done = 0
            while done <= upto_bytes and (chunk := fh.read(CHUNK_BYTES)):
                done += len(chunk)
    except (gzip.BadGzipFile, zlib.error, OSError) as zlib_exc:
        return IngestError(f"{path}: corrupt gzip data ({zlib_exc})")
    except EOFError:
        return IngestError(f"{path}: truncated gzip file (the compressed stream ends before its end marker)")
    return IngestError(f"{path}: corrupt gzip data ({exc})")  # zlib reads what igzip refused: igzip's words


def _expansion_limit(path: Path, is_gzip: bool, limits: IngestLimits) -> tuple[int, str]:
    """(bytes of JSON the file may yield, what the limit is), from the limits the caller passed (its settings
    ``ingest.max_gzip_ratio`` and ``ingest.max_temp_bytes``)."""
    size = path.stat().st_size
    temp = limits.max_temp_bytes
    temp_note = (f"more than {temp:,} bytes of JSON, the temporary space one ingest may use "
                 "(setting ingest.max_temp_bytes, $TAXBREAK_MAX_TEMP_BYTES)")
    if not is_gzip:
        return temp, temp_note
    ratio = limits.max_gzip_ratio
    by_ratio = max(int(size * ratio), GZIP_FREE_BYTES)
    if by_ratio < temp:
        return by_ratio, (f"gzip data expanding more than {ratio:g} times its {size:,} bytes (a gzip bomb?); "
                          "the limit is setting ingest.max_gzip_ratio, $TAXBREAK_MAX_GZIP_RATIO")
    return temp, temp_note


def _check_not_empty(path: Path) -> int:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise IngestError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    if size == 0:
        raise NotATraceError(f"{path}: the file is empty")
    return size


def _is_object_rest(text: str, i: int) -> bool:
    """True when ``text[i:]`` is ``(, "key": value)* }`` then whitespace only: the rest of the top object."""
    dec = _DECODER
    n = len(text)
    while True:
        i = _WS_RE.match(text, i).end()
        if i >= n:
            return False
        if text[i] == "}":
            return _WS_RE.match(text, i + 1).end() == n
        if text[i] != ",":
            return False
        i = _WS_RE.match(text, i + 1).end()
        if i >= n or text[i] != '"':
            return False
        try:
            _, i = dec.raw_decode(text, i)
        except ValueError:
            return False
        i = _WS_RE.match(text, i).end()
        if i >= n or text[i] != ":":
            return False
        i = _WS_RE.match(text, i + 1).end()
        try:
            _, i = dec.raw_decode(text, i)
        except ValueError:
            return False


def _find_array_end(fh: IO[bytes], size: int, lo: int = 0) -> int | None:
    """Offset of the ``]`` closing the events array in ``fh`` (whose ``[`` is at offset ``lo``), or None.

    The first ``]`` (scanning forward in a tail window) after which the rest parses as the end of the top-level
    object is the closing one, provided the window starts inside the array; growing windows must agree.
    """
    previous: int | None = None
    for window in TAIL_WINDOWS_BYTES:
        start = max(lo, size - window)
        fh.seek(start)
        text = fh.read(size - start).decode("utf-8", "surrogateescape")
        found = None
        for m in _TAIL_CANDIDATE_RE.finditer(text):
            if _is_object_rest(text, m.end(1)):
                found = start + len(text[: m.start(1)].encode("utf-8", "surrogateescape"))
                break
        if start == lo:
            return found
        if found is not None and found == previous:
            return found
        previous = found
    return None


def _piece_bytes(array_bytes: int) -> int:
    """About how many bytes of the array go to one piece: at most ``PIECE_BYTES``, and small enough that every
    DuckDB thread gets one, but not below ``PIECE_MIN_BYTES``."""
    return max(PIECE_MIN_BYTES, min(PIECE_BYTES, -(-array_bytes // _duckdb_threads())))


def _piece_ranges(fh: IO[bytes], lo: int, hi: int, piece_bytes: int) -> list[tuple[int, int]]:
    """The array ``fh[lo:hi]`` (``[`` ... ``]``) cut into byte ranges of about ``piece_bytes``.

    Each cut is at a ``}`` ``,`` ``{`` (whitespace around the comma allowed): the range before it ends with the
    ``}``, the next starts with the ``{``.  Such bytes may also lie inside an element (a string, or an array of
    objects in args); a piece cut there, closed with ``]``, is not valid JSON (its last element is unfinished),
    so DuckDB's read fails and the caller reads the array as one piece instead.
    """
    ranges = []
    start, pos = lo, lo + piece_bytes
    while hi - pos > piece_bytes // 2:
        fh.seek(pos)
        window = fh.read(min(BOUNDARY_WINDOW_BYTES, hi - pos))
        if not window:
            break
        m = _ELEMENT_BOUNDARY_RE.search(window)
        if m is None:  # one long element: look further on
            pos += len(window)
            continue
        ranges.append((start, pos + m.start() + 1))
        start = pos + m.end() - 1
        pos = start + piece_bytes
    ranges.append((start, hi))
    return ranges


def _copy_range(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    """``src[start:end]`` appended to ``dst`` by the kernel (no bytes through Python)."""
    pos = start
    while pos < end:
        n = os.copy_file_range(src_fd, dst_fd, min(COPY_RANGE_BYTES, end - pos), pos)
        if n == 0:  # the file shrank: the piece ends short, DuckDB's read fails, the file check names it
            break
        pos += n


def _write_piece(src_fd: int, piece: Path, start: int, end: int, opened: bool, closed: bool) -> int:
    """Piece file ``piece``: ``[`` unless the range opens the array, the range, ``]`` unless it closes it."""
    fd = os.open(piece, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if not opened:
            os.write(fd, b"[")
        _copy_range(src_fd, fd, start, end)
        if not closed:
            os.write(fd, b"]")
    finally:
        os.close(fd)
    return end - start


def _piece_path(workdir: Path, i: int) -> Path:
    return workdir / f"events-{i:05d}.json"


def _write_pieces(
    src: IO[bytes], ranges: list[tuple[int, int]], workdir: Path, progress: Callable[[int], None] | None
) -> list[Path]:
    """Piece files of the source's ranges, copied on the machine's cores (``copy_file_range`` frees the GIL)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    last = len(ranges) - 1
    pieces = [_piece_path(workdir, i) for i in range(len(ranges))]
    done = 0
    with ThreadPoolExecutor(max_workers=_duckdb_threads(), thread_name_prefix="taxbreak-kineto-copy") as pool:
        futures = [pool.submit(_write_piece, src.fileno(), pieces[i], a, b, i == 0, i == last)
                   for i, (a, b) in enumerate(ranges)]
        for future in as_completed(futures):
            done += future.result()
            if progress is not None:
                progress(done)
    return pieces


def _split_in_place(fh: IO[bytes], path: Path, ranges: list[tuple[int, int]], workdir: Path) -> list[Path]:
    """Pieces of the array file ``path`` (``[`` at 0), made from the last range back, the file cut short after
    each: the workdir holds the array's bytes once, plus one piece.  The first range is the file itself."""
    pieces = [_piece_path(workdir, i) for i in range(len(ranges))]
    last = len(ranges) - 1
    for i in range(last, 0, -1):
        a, b = ranges[i]
        _write_piece(fh.fileno(), pieces[i], a, b, False, i == last)
        fh.truncate(a)
    fh.truncate(ranges[0][1])
    if last > 0:
        fh.seek(0, 2)
        fh.write(b"]")
    fh.flush()
    os.replace(path, pieces[0])
    return pieces


def _copy_events_array(
    path: Path, workdir: Path, progress: Callable[[int, int], None] | None, limits: IngestLimits,
    piece_bytes: int | None = None,
) -> tuple[list[Path], dict[str, Any]] | None:
    """The traceEvents array's bytes as JSON-array files in ``workdir`` (pieces of about ``piece_bytes``, cut
    between elements; default ``_piece_bytes``; one piece when 0), and the top-level metadata.

    DuckDB reads one JSON array file on one thread; the pieces go to its threads in parallel, in order.  Plain
    JSON is checked in place (head, array end, tail) and the pieces are copied by the kernel straight from it;
    gzip data is decompressed to ``workdir/events.json`` first, then cut into pieces in place.
    Returns None when the byte-range layout check fails (the caller falls back to streaming JSON parsing).
    Raises IngestError for an empty file or broken gzip data.
    """
    total = _check_not_empty(path)
    src = _Source(path, limits)
    buf = bytearray()
    head = b""
    unpacked = workdir / "events.json"
    fh: IO[bytes] | None = None
    try:
        while True:  # find the key; keep what precedes it
            chunk = src.read(CHUNK_BYTES)
            if not chunk:
                if not bytes(buf).strip(_WS):
                    raise NotATraceError(f"{path}: the file is empty after decompression")
                return None
            searched = max(0, len(buf) - 64)
            buf += chunk
            m = _HEAD_RE.search(buf, searched)
            if m:
                head = bytes(buf[: m.start()]) + b'"traceEvents": '
                break
            if len(buf) > HEAD_SEARCH_LIMIT_BYTES:
                return None
        if src.is_gzip:
            with open(unpacked, "wb") as out:
                out.write(buf[m.end() - 1 :])
                del buf
                while chunk := src.read(CHUNK_BYTES):
                    out.write(chunk)
                    if progress is not None:
                        progress(src.raw_pos(), total)
            fh = open(unpacked, "r+b")  # noqa: SIM115 - closed below
            lo = 0
        else:  # plain JSON: the array is a byte range of the file itself
            if total > src.limit_bytes:
                raise IngestError(f"{path}: {src.limit_note}; not ingested")
            fh, lo = src.raw, m.end() - 1
            del buf
        size = os.fstat(fh.fileno()).st_size
        end = _find_array_end(fh, size, lo)
        if end is None:
            return None
        fh.seek(end + 1)
        tail = fh.read()
        try:
            doc = json.loads(head + b"[]" + tail, object_pairs_hook=_pairs_once(path))
        except (ValueError, RecursionError):  # the streaming parser says what is wrong (or how deep it nests)
            return None
        if not isinstance(doc, dict) or doc.get("traceEvents") != []:
            return None
        doc.pop("traceEvents")
        if piece_bytes is None:
            piece_bytes = _piece_bytes(end + 1 - lo)
        ranges = _piece_ranges(fh, lo, end + 1, piece_bytes) if piece_bytes else [(lo, end + 1)]
        if src.is_gzip:
            pieces = _split_in_place(fh, unpacked, ranges, workdir)
        else:
            pieces = _write_pieces(fh, ranges, workdir, None if progress is None else (
                lambda done: progress(lo + done, total)))
        if progress is not None:
            progress(total, total)
    finally:
        if fh is not None and fh is not src.raw:
            fh.close()
        src.close()
    return pieces, doc


def _twice(path: Path) -> IngestError:
    return IngestError(f"{path}: the key traceEvents appears twice at the top level: which array is the trace is "
                       "unknown (a JSON reader keeps one and drops the other); not ingested")


def _pairs_once(path: Path) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json.loads`` object hook that refuses an object with ``traceEvents`` twice (``dict`` keeps the last)."""
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if sum(k == "traceEvents" for k, _ in pairs) > 1:
            raise _twice(path)
        return dict(pairs)
    return hook


# -- streaming fallback (ijson) ----------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _exact_number_text(value: Any) -> str | None:
    """Decimal text of a JSON number or numeric string (None when it is neither)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, str):
        try:
            return str(Decimal(value.strip()))
        except InvalidOperation:
            return None
    return None


def _fallback_to_ndjson(
    path: Path, workdir: Path, limits: IngestLimits
) -> tuple[Path, dict[str, Any], dict[str, int]]:
    """Stream-parse the whole file with ijson into ``workdir/events.ndjson``.

    Returns (ndjson path, top-level metadata, skipped counts).
    """
    import ijson
    from ijson.common import ObjectBuilder

    _check_not_empty(path)
    out_path = workdir / "events.ndjson"
    meta: dict[str, Any] = {}
    skipped: dict[str, int] = {}
    found_events = False
    src = _Source(path, limits)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with open(out_path, "w", encoding="utf-8") as out:
            # basic_parse: no prefix strings (ijson's prefixes grow with the depth: quadratic in a deep nest)
            parser = ijson.basic_parse(src, use_float=False)
            try:
                event, value = next(parser)
            except StopIteration:
                raise NotATraceError(f"{path}: the file is empty after decompression") from None
            if event != "start_map":
                what = "an array" if event == "start_array" else f"a {event}"
                raise NotATraceError(
                    f"{path}: not a Kineto trace: the top level is {what}, not an object with traceEvents"
                )
            key: str | None = None
            builder: ObjectBuilder | None = None
            depth = 0
            max_depth = limits.max_json_depth - 2  # the top-level object and the events array are two levels
            in_events = False
            for event, value in parser:
                if builder is None:
                    if not in_events and event == "map_key":
                        key = value
                        continue
                    if not in_events and event == "end_map":  # the end of the top-level object
                        key = None
                        continue
                    if key == "traceEvents" and not in_events:
                        if found_events:  # a second array: merging both would be a trace nobody recorded
                            raise _twice(path)
                        if event == "start_array":
                            in_events, found_events = True, True
                            continue
                        raise IngestError(f"{path}: traceEvents is not an array (it is a {event})")
                    if in_events and event == "end_array":
                        in_events = False
                        continue
                    builder = ObjectBuilder()
                    depth = 0
                builder.event(event, value)
                if event in ("start_map", "start_array"):
                    depth += 1
                    if depth > max_depth:
                        raise IngestError(f"{path}: arrays and objects nested deeper than {max_depth + 2} levels "
                                          "(setting ingest.max_json_depth, $TAXBREAK_MAX_JSON_DEPTH)")
                elif event in ("end_map", "end_array"):
                    depth -= 1
                if depth:
                    continue
                item, builder = builder.value, None
                if not in_events:
                    meta[key] = item  # type: ignore[index]
                    continue
                line = _normalise_event(item, skipped)
                if line is not None:
                    out.write(line)
                    out.write("\n")
    except IngestError:
        raise
    except ijson.JSONError as exc:
        msg = str(exc)
        if "premature EOF" in msg or "Incomplete" in msg or "incomplete" in msg:
            raise IngestError(f"{path}: truncated JSON: the file ends before the JSON document does") from None
        raise IngestError(f"{path}: not valid JSON ({msg.strip()})") from None
    finally:
        src.close()
        if gc_was_enabled:
            gc.enable()
    if not found_events:
        raise NotATraceError(f"{path}: JSON without traceEvents: not a Kineto/Chrome trace")
    return out_path, meta, skipped


_MAX_US_DEC = Decimal(MAX_US)


def _normalise_event(item: Any, skipped: dict[str, int]) -> str | None:
    """One traceEvents element as an NDJSON line for DuckDB, or None (counted in ``skipped``)."""
    if not isinstance(item, dict):
        skipped["not_an_object"] = skipped.get("not_an_object", 0) + 1
        return None
    for field in ("ts", "dur"):
        if field in item and item[field] is not None:
            text = _exact_number_text(item[field])
            reason = None
            if text is None:
                reason = f"bad_{field}"
            elif not Decimal(text).is_finite() or abs(Decimal(text)) > _MAX_US_DEC:
                reason = f"{field}_out_of_range"  # beyond DECIMAL(21,3) too: skipped here, not in the SQL
            if reason is not None:
                skipped[reason] = skipped.get(reason, 0) + 1
                return None
            item[field] = text  # DuckDB casts the decimal text exactly
    return json.dumps(item, default=_plain, ensure_ascii=False)


# -- trace-level facts -----------------------------------------------------------------------------------
def _small_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in redact(meta).items():  # no secrets of the capture's environment in the catalogue
        text = json.dumps(value, default=str)
        out[key] = value if len(text) <= METADATA_VALUE_MAX_BYTES else f"<{len(text)} bytes of JSON, not kept>"
    return out


def _fill_info(info: TraceInfo, meta: dict[str, Any]) -> None:
    info.metadata = _small_metadata(meta)
    info.tool_versions = {
        k: v
        for k, v in meta.items()
        if k.lower().startswith(TOOL_VERSION_PREFIXES) and "version" in k.lower() and isinstance(v, str | int | float)
    }
    devices = meta.get("deviceProperties")
    if isinstance(devices, list):
        info.gpu_names = [str(d.get("name", "")) for d in devices if isinstance(d, dict)]
    host = meta.get("host_name") or meta.get("hostname")
    info.host_name = str(host) if host is not None else None


def _start_epoch_ns(meta: dict[str, Any], origin_abs_ns: int) -> int | None:
    """Absolute time of ts_ns = 0: baseTimeNanoseconds + origin, or the origin itself when ts is epoch µs."""
    base = meta.get("baseTimeNanoseconds")
    if isinstance(base, int) and not isinstance(base, bool):
        return base + origin_abs_ns
    if origin_abs_ns > 10**18:  # later than 2001-09-09 in ns: the timestamps are epoch µs
        return origin_abs_ns
    return None


# -- DuckDB ----------------------------------------------------------------------------------------------
def _duckdb_threads() -> int:
    return max(1, min(os.cpu_count() or 1, DUCKDB_MAX_THREADS))


def _connect(workdir: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET threads = $n", {"n": _duckdb_threads()})
    con.execute("SET memory_limit = $m", {"m": DUCKDB_MEMORY_LIMIT})
    con.execute("SET temp_directory = $t", {"t": str(workdir / "duckdb_tmp")})
    return con


@dataclass
class _Staged:
    """The staged rows of one JSON pass and the trace-level facts gathered while writing them."""

    path: Path
    n_rows: int
    skipped: dict[str, int]  # staged rows not stored, by reason (the SQL's skip_reason)
    origin_ns: int
    host_pids: list[str]


def _decimal_ns(col: pa.Array) -> pa.Array:
    """Exact decimal µs with 3 decimals -> int64 ns: the decimal's unscaled integer is the ns count."""
    return pc.cast(col.view(pa.decimal128(col.type.precision, 0)), pa.int64())


class _TooDeep(Exception):
    pass


_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')


def _check_depth(args: pa.Array, max_depth: int) -> None:
    """Raise _TooDeep when an args value nests deeper than ``max_depth``.  A value's count of '[' and '{' bounds
    its depth and needs at least twice that many bytes, so only batches with values longer than ``2 * max_depth`` are
    counted (numpy: the openers' offsets in the batch's bytes, split by row) and only values with more openers are
    scanned (none in a real trace)."""
    if args.null_count == len(args) or len(args) == 0:
        return
    lengths = pc.binary_length(args)
    if (pc.max(lengths).as_py() or 0) <= 2 * max_depth:
        return
    import numpy as np

    width = np.int64 if pa.types.is_large_string(args.type) else np.int32
    offsets = np.frombuffer(args.buffers()[1], dtype=width)[args.offset: args.offset + len(args) + 1]
    data = np.frombuffer(args.buffers()[2], dtype=np.uint8)[offsets[0]: offsets[-1]]
    # '[' (0x5B) and '{' (0x7B) are the only bytes equal to 0x7B with bit 0x20 set; a row's openers are those at
    # offsets from its start to the next row's start (empty rows hold no bytes)
    openers_at = np.flatnonzero((data | 0x20) == 0x7B)
    if len(openers_at) <= max_depth:
        return
    per_row = np.diff(np.searchsorted(openers_at, offsets - offsets[0]))
    if int(per_row.max()) <= max_depth:
        return
    for text in pc.filter(args, pa.array(per_row > max_depth)).to_pylist():
        depth = deepest = 0
        for ch in _JSON_STRING_RE.sub("", text):
            if ch in "[{":
                depth += 1
                if depth > deepest:
                    deepest = depth
            elif ch in "]}":
                depth -= 1
        if deepest > max_depth:
            raise _TooDeep


class _ReadError(Exception):
    """DuckDB's read failed after its first batch (its error reaches Arrow's stream reader as an OSError)."""


def _read_batches(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except OSError as exc:
            raise _ReadError(str(exc)) from None
        yield batch


def _stage(con: duckdb.DuckDBPyConnection, events_path: Path | list[Path], fmt: str, stage_path: Path,
           max_json_depth: int) -> _Staged:
    """The one JSON pass: staged rows -> an uncompressed Arrow IPC stream in the workdir; origin, counts, pids.
    ``events_path``: one file, or the array's pieces (read in parallel, rows in the pieces' order)."""
    paths = [str(p) for p in events_path] if isinstance(events_path, list) else str(events_path)
    src = {"path": paths, "format": fmt, "columns": READ_COLUMNS}
    reader = con.sql(_STAGE_SQL, params=src).to_arrow_reader(ROWS_PER_BATCH)
    in_schema = reader.schema
    i_ts, i_dur = in_schema.get_field_index("ts_us"), in_schema.get_field_index("dur_us")
    schema = in_schema.set(i_ts, pa.field("ts_ns", pa.int64())).set(i_dur, pa.field("dur_ns", pa.int64()))
    i_skip = in_schema.get_field_index("skip_reason")
    i_args = in_schema.get_field_index("args_json")
    max_depth = max_json_depth - 3  # the top-level object, the events array and the event itself
    n_rows = 0
    skipped: dict[str, int] = {}
    lo_timed: int | None = None
    lo_any: int | None = None
    host_pids: set[str] = set()
    launch_kinds: pa.Array | None = None  # made once DuckDB is parsing (see _warm_up)
    with pa.OSFile(str(stage_path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        # DuckDB parses the next batches while this one is checked and written
        for batch in prefetched(_read_batches(reader), PREFETCH_BATCHES):
            if launch_kinds is None:
                launch_kinds = pa.array(LAUNCH_KINDS)
            columns = batch.columns
            _check_depth(columns[i_args], max_depth)
            ts = columns[i_ts] = _decimal_ns(columns[i_ts])
            columns[i_dur] = _decimal_ns(columns[i_dur])
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
            n_rows += batch.num_rows
            kind = batch.column("kind")
            is_meta = pc.equal(kind, "metadata")
            lo = pc.min(ts).as_py()
            if lo is not None:
                lo_any = lo if lo_any is None else min(lo_any, lo)
            if pc.any(is_meta).as_py():
                lo = pc.min(pc.filter(ts, pc.invert(is_meta))).as_py()
            if lo is not None:
                lo_timed = lo if lo_timed is None else min(lo_timed, lo)
            reasons = columns[i_skip]
            if reasons.null_count < len(reasons):
                for item in pc.value_counts(reasons.drop_null()).to_pylist():
                    skipped[item["values"]] = skipped.get(item["values"], 0) + item["counts"]
            launch = pc.is_in(kind, value_set=launch_kinds)
            if pc.any(launch).as_py():
                host_pids.update(p for p in pc.unique(pc.filter(batch.column("pid"), launch)).to_pylist() if p)
    origin = lo_timed if lo_timed is not None else (lo_any if lo_any is not None else 0)
    return _Staged(stage_path, n_rows, skipped, origin, sorted(host_pids))


_JSON_SPECIAL_RE = r'["\\\x00-\x1f]'


def _merge_source_pid(args_text: str | None, pid: str | None) -> str | None:
    """``json_merge_patch(args, {"_source_pid": pid})`` for one row (args NULL: a new object; not an object: kept)."""
    if args_text is None:
        return json.dumps({"_source_pid": pid}, ensure_ascii=False, separators=(",", ":"))
    value = json.loads(args_text)
    if not isinstance(value, dict):
        return args_text
    value.pop("_source_pid", None)
    if pid is not None:
        value["_source_pid"] = pid
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _may_contain(arr: pa.Array, needle: bytes) -> bool:
    """False when no value of the string array ``arr`` contains ``needle`` (one search of its data buffer)."""
    data = arr.buffers()[2]
    return data is not None and re.search(re.escape(needle), memoryview(data)) is not None


def _with_source_pid(args: pa.Array, pid: pa.Array) -> pa.Array:
    """args text with the source pid added (``_source_pid``), row by row.

    Appended as text when args is a plain object without that key and the pid needs no JSON escaping (args
    comes from DuckDB's compact serialisation), else merged as JSON.
    """
    plain = pc.and_(
        pc.and_(pc.starts_with(args, "{"), pc.ends_with(args, "}")),
        pc.invert(pc.match_substring_regex(pid, _JSON_SPECIAL_RE)),
    )
    if _may_contain(args, b'"_source_pid"'):
        plain = pc.and_(plain, pc.invert(pc.match_substring(args, '"_source_pid"')))
    plain = pc.fill_null(plain, False)
    body = pc.utf8_slice_codeunits(args, 0, -1)
    sep = pc.if_else(pc.equal(pc.binary_length(args), 2), "", ",")  # "{}": nothing to separate
    out = pc.binary_join_element_wise(body, sep, '"_source_pid":"', pid, '"}', "")
    if pc.all(plain).as_py():
        return out
    slow = pc.invert(plain)
    fixed = [_merge_source_pid(a, p) for a, p in zip(
        pc.filter(args, slow).to_pylist(), pc.filter(pid, slow).to_pylist(), strict=True)]
    return pc.replace_with_mask(pc.if_else(plain, out, args), slow, pa.array(fixed, pa.string()))


def _open_stage(path: Path) -> pa.RecordBatchStreamReader:
    # read, not memory-mapped: one batch at a time stays resident
    return pa.ipc.open_stream(pa.OSFile(str(path), "rb"))


def _host_map(workdir: Path, stage_path: Path) -> tuple[pa.Array, pa.Array]:
    """(correlation ids, launching processes), for traces with launch calls from several processes (a DuckDB
    connection of its own, made only then: about 15 ms of CPU that a trace with one host process is spared)."""
    stage = _open_stage(stage_path)  # noqa: F841 - scanned by name below
    con = _connect(workdir)
    try:
        table = con.sql(
            f"SELECT correlation_id, min(pid) AS host_pid FROM stage WHERE kind IN {LAUNCH_KINDS} "
            "AND correlation_id IS NOT NULL GROUP BY 1 HAVING count(DISTINCT pid) = 1"
        ).to_arrow_table()
    finally:
        con.close()
    return table.column(0).combine_chunks(), table.column(1).combine_chunks()


def _finish_batch(
    batch: pa.RecordBatch, trace_id: str, origin_ns: int, host_pid: str | None,
    host_map: tuple[pa.Array, pa.Array] | None,
) -> pa.RecordBatch:
    """A staged batch -> EVENT_SCHEMA: ns from the origin, the launching process on device rows."""
    reasons = batch.column("skip_reason")
    if reasons.null_count < batch.num_rows:  # skipped rows (counted by reason when staged)
        batch = batch.filter(pc.is_null(reasons))
    n = batch.num_rows
    pid, args = batch.column("pid"), batch.column("args_json")
    is_device = pc.fill_null(batch.column("is_device"), False)
    if host_map is not None:
        idx = pc.index_in(batch.column("correlation_id"), value_set=host_map[0])
        new_pid = pc.if_else(is_device, pc.take(host_map[1], idx), None)
    elif host_pid is not None:
        new_pid = pc.if_else(is_device, pa.scalar(host_pid), None)
    else:
        new_pid = None
    if new_pid is not None:
        # a device row takes its launching process (IS DISTINCT FROM: a NULL source pid is rewritten too)
        rewrite = pc.and_(pc.is_valid(new_pid), pc.fill_null(pc.not_equal(new_pid, pid), True))
        if pc.any(rewrite).as_py():
            rewritten = _with_source_pid(pc.filter(args, rewrite), pc.filter(pid, rewrite))
            args = pc.replace_with_mask(args, rewrite, rewritten)
            pid = pc.if_else(rewrite, new_pid, pid)
    # staged columns carry the schema's names; the columns no Kineto event fills are NULL
    cols = dict(zip(batch.schema.names, batch.columns, strict=True))
    cols.update(ts_ns=_relative(cols["ts_ns"], origin_ns), pid=pid, args_json=args)
    return event_batch(cols, n, trace_id=trace_id, source_format=SOURCE_FORMAT)


def _relative(ts: pa.Array, origin_ns: int) -> pa.Array:
    try:
        return pc.subtract_checked(ts, origin_ns)
    except pa.ArrowInvalid:
        raise _SpanError from None


class _SpanError(Exception):
    """Times relative to the origin do not fit int64 (a trace with both extreme early and late times)."""


def _read_stage(workdir: Path, staged: _Staged, trace_id: str) -> Iterator[pa.RecordBatch]:
    host_map = _host_map(workdir, staged.path) if len(staged.host_pids) > 1 else None
    host_pid = staged.host_pids[0] if len(staged.host_pids) == 1 else None
    with _open_stage(staged.path) as reader:
        # finished as the lake pulls them: its prefetch thread (ingest.base.prefetched) reads and finishes the next
        # batches while it writes this one (Parquet)
        yield from (_finish_batch(batch, trace_id, staged.origin_ns, host_pid, host_map) for batch in reader)


def _warm_up() -> None:
    """pyarrow imports pandas on its first conversion of a Python value to Arrow (``pa.array``, a compute call with
    a Python literal): about 0.5 s of one core, which otherwise runs while DuckDB's JSON pass waits for its first
    batch to be taken.  Done here on a thread of its own while the events array is copied; a conversion that comes
    while it runs waits for it, as it would have for its own import."""

    def convert() -> None:
        try:
            pa.array([0])
        except Exception:  # noqa: BLE001, S110 - only a warm-up: the real conversions report their own errors
            pass

    threading.Thread(target=convert, name="taxbreak-kineto-warm-up", daemon=True).start()


def read_kineto(
    path: Path, trace_id: TraceId, *, workdir: Path, progress: Callable[[int, int], None] | None = None,
    limits: IngestLimits | None = None,
) -> AdapterOutput:
    """Read a Kineto ``.json``/``.json.gz`` trace; batches conform to EVENT_SCHEMA, ``info`` fills as they go.

    Before the batches are pulled only the events array is copied (plain JSON: by the kernel, nothing parsed), so
    the registry opens plain JSON while the file is hashed (``Adapter.early_open``); ``trace_id`` is read when the
    batches are."""
    path = Path(path)
    info = TraceInfo(source_format=SOURCE_FORMAT)
    _warm_up()
    limits = limits or IngestLimits()
    copied = _copy_events_array(path, workdir, progress, limits)
    if copied is None:
        (workdir / "events.json").unlink(missing_ok=True)
    stage_path = workdir / "stage.arrows"

    def batches() -> Iterator[pa.RecordBatch]:
        con = _connect(workdir)
        try:
            staged = None
            array = copied
            while array is not None:
                pieces, meta = array
                array = None
                skipped: dict[str, int] = {}
                whole = False
                try:
                    staged = _stage(con, pieces, "array", stage_path, limits.max_json_depth)
                except (duckdb.Error, _ReadError):
                    whole = len(pieces) > 1  # maybe a cut inside an element: once more, as one file
                except (pa.ArrowException, _TooDeep):
                    pass  # an unexpected element or layout: stream-parse instead (it names the problem)
                for piece in pieces:
                    piece.unlink(missing_ok=True)
                if whole:
                    array = _copy_events_array(path, workdir, None, limits, piece_bytes=0)
            if staged is None:
                events_path, meta, skipped = _fallback_to_ndjson(path, workdir, limits)
                try:
                    staged = _stage(con, events_path, "newline_delimited", stage_path, limits.max_json_depth)
                except _TooDeep:
                    raise IngestError(f"{path}: event args nested deeper than {limits.max_json_depth} levels "
                                      "(setting ingest.max_json_depth, $TAXBREAK_MAX_JSON_DEPTH)") from None
                except (duckdb.Error, _ReadError, pa.ArrowException) as exc:
                    text = str(exc).replace(str(events_path), "the trace events").replace(str(workdir), "")
                    raise IngestError(f"{path}: cannot read the trace events ({text})") from None
                events_path.unlink(missing_ok=True)
            # the JSON pass's memory goes with its connection (150-200 MB kept by DuckDB's allocator otherwise);
            # the read-back needs DuckDB only for _host_map, which connects itself
            con.close()
            _fill_info(info, meta)
            # rows of the events file + elements never written to it (counted in ``skipped`` by the fallback)
            info.source_event_count = staged.n_rows + sum(skipped.values())
            for reason, n in staged.skipped.items():
                skipped[reason] = skipped.get(reason, 0) + n
            info.skipped_counts = skipped
            info.start_epoch_ns = _start_epoch_ns(meta, staged.origin_ns)
            try:
                yield from _read_stage(workdir, staged, trace_id_of(trace_id))
            except _SpanError:
                raise IngestError(f"{path}: the timestamps span more than int64 nanoseconds (from "
                                  f"{staged.origin_ns} ns); not ingested") from None
        finally:
            con.close()

    return AdapterOutput(info=info, batches=batches())


def open_trace(path: Path, trace_id: TraceId, ctx: OpenContext) -> AdapterOutput:
    """The registry's opener (``taxbreak.ingest.ADAPTERS``)."""
    return read_kineto(path, trace_id, workdir=ctx.workdir, progress=ctx.progress, limits=ctx.limits)
