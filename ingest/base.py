"""What every adapter is, returns and raises, and the schema conventions they share.

An adapter is one module with an opener ``open_trace(path, trace_id, ctx: OpenContext) -> AdapterOutput`` and one
``Adapter`` line in the registry (``taxbreak.ingest.ADAPTERS``): its name (the catalogue's ``source_format``), file
name suffixes and how its bytes are recognised.  Conventions every adapter follows (docs/architecture.md):

- batches are built by ``event_batch``: the common event schema's columns in order (``EVENT_SCHEMA``; each field's
  unit in its metadata), ``trace_id`` and ``source_format`` filled, fields the source lacks NULL, every column cast
  to its field's type; times are int64 ns, ``ts_ns`` counted from the trace origin (the earliest timed event);
- ``AdapterOutput.info`` is complete once the batches are exhausted; the catalogue's ``source_format`` is the
  registry name, set by ``ingest_file``, not by the adapter;
- versions are stamped in one place, the lake: the events file carries ``EVENT_SCHEMA``'s name and version in its
  metadata, the catalogue row ``schema_version`` (``lake.catalogue_row``), never an adapter;
- errors are ``IngestError`` (``NotATraceError`` for a file that is no trace at all) naming the file and the problem.
"""

from __future__ import annotations

import importlib
import os
import queue
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import pyarrow as pa

from taxbreak.schemas import EVENT_SCHEMA


class IngestError(Exception):
    """A source file cannot be ingested. The message names the file and the problem."""


@dataclass
class TraceInfo:
    """Trace-level facts an adapter learns; filled in while its batches are consumed."""

    source_format: str
    tool_versions: dict[str, Any] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)
    host_name: str | None = None
    start_epoch_ns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    skipped_counts: dict[str, int] = field(default_factory=dict)
    source_event_count: int | None = None


@dataclass
class AdapterOutput:
    """``batches`` conform to EVENT_SCHEMA; ``info`` is complete once ``batches`` is exhausted."""

    info: TraceInfo
    batches: Iterator[pa.RecordBatch]


class NotATraceError(IngestError):
    """The file is not a trace at all (no traceEvents, not JSON, not a SQLite database): recorded with the status
    'not_a_trace', so it is neither analysed nor offered for retry as a failed trace."""


# -- the common event schema, as every adapter builds it ------------------------------------------------------
def event_batch(columns: Mapping[str, pa.Array], n_rows: int, *, trace_id: str, source_format: str) -> pa.RecordBatch:
    """``n_rows`` events of the common schema from ``columns`` (arrays named after ``EVENT_SCHEMA`` fields; other
    names are ignored): ``trace_id`` and ``source_format`` are filled here, a field not given is NULL, and each
    column is cast to its field's type when it differs."""
    arrays = []
    for f in EVENT_SCHEMA:
        if f.name == "trace_id":
            a = pa.repeat(pa.scalar(trace_id, pa.string()), n_rows)
        elif f.name == "source_format":
            a = pa.repeat(pa.scalar(source_format, pa.string()), n_rows)
        else:
            a = columns.get(f.name)
            if a is None:
                a = pa.nulls(n_rows, f.type)
        arrays.append(a if a.type == f.type else a.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=EVENT_SCHEMA)


# -- the adapter registry's entries -----------------------------------------------------------------------------
SNIFF_BYTES = 64  # how much of a file's start the signatures and sniffs see


@dataclass(frozen=True)
class IngestLimits:
    """How much one file may cost the ingest, past which it fails naming the limit and its setting (the caller's
    settings ``ingest.*``, ``taxbreak.config.ingest_limits``; these defaults are those settings' defaults):
    ``max_gzip_ratio``, how many times its size a gzip trace may expand (beyond 64 MiB); ``max_temp_bytes``, the JSON
    one ingest may write to its workdir; ``max_json_depth``, how deep event args may nest."""

    max_gzip_ratio: float = 200.0
    max_temp_bytes: int = 32 << 30
    max_json_depth: int = 128


@dataclass(frozen=True)
class OpenContext:
    """What ``ingest_file`` hands every opener: ``workdir``, a temporary folder of this ingest (removed after it);
    ``cache_dir``, conversions kept across ingests (nsys exports); ``progress(done, total)`` for bytes read;
    ``limits``, what one file may cost."""

    workdir: Path
    cache_dir: Path | None = None
    progress: Callable[[int, int], None] | None = None
    limits: IngestLimits = IngestLimits()


# A trace id, or (an adapter opened while its file is hashed: ``Adapter.early_open``) how to get it once known
TraceId = str | Callable[[], str]
Opener = Callable[[Path, TraceId, OpenContext], AdapterOutput]


def trace_id_of(trace_id: TraceId) -> str:
    """The trace id an opener was given (waits for the file's hash when it was given how to get it)."""
    return trace_id if isinstance(trace_id, str) else trace_id()


@dataclass(frozen=True)
class Adapter:
    """One trace format of the registry (``taxbreak.ingest.ADAPTERS``).

    ``name``: the catalogue's ``source_format``; ``label``: how messages name the format; ``suffixes``: lower-case
    file name endings (folders and buckets list these); ``opener``: ``"module:function"`` (imported on first use, so
    listing a folder never imports a parser) or the function itself.  Recognising a file, by its first
    ``SNIFF_BYTES``: every adapter's ``signature`` (bytes only this format starts with) first, in registry order,
    then every ``sniff`` (a looser shape test: JSON, gzip), then the name: a file named with one of ``suffixes``
    whose bytes matched nothing is this format when ``misnamed`` is None, else not a trace, for the reason
    ``misnamed`` gives.  ``early_open``: a test of the first bytes; where it holds, the opener's own work (before
    its batches are pulled) parses nothing and the opener reads its trace id only once its batches are pulled, so
    ``ingest_file`` with ``force`` opens it while the file is hashed (the opener is then given a ``TraceId``
    callable, not the id); without ``force`` the hash comes first, so stored content is skipped unopened."""

    name: str
    label: str
    suffixes: tuple[str, ...]
    opener: str | Opener
    signature: Callable[[bytes], bool] | None = None
    sniff: Callable[[bytes], bool] | None = None
    misnamed: str | None = None
    early_open: Callable[[bytes], bool] | None = None

    def open(self, path: Path, trace_id: TraceId, ctx: OpenContext) -> AdapterOutput:
        opener = self.opener
        if isinstance(opener, str):
            module, _, function = opener.partition(":")
            opener = getattr(importlib.import_module(module), function)
        return opener(path, trace_id, ctx)


def starts_with(*magic: bytes) -> Callable[[bytes], bool]:
    """A signature: the file starts with one of ``magic``."""
    return lambda head: head.startswith(magic)


def json_or_gzip(head: bytes) -> bool:
    """A sniff: gzip-compressed, or JSON text (an object or array after an optional BOM and whitespace)."""
    return head[:2] == b"\x1f\x8b" or head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")


# -- files: regular files only, temporary folders owned by a process -------------------------------------------
def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; never blocks (a FIFO, a device, a socket is refused
    with an IngestError naming the file and what it is, before any byte is read)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise IngestError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise IngestError(f"{path}: not a regular file ({_file_kind(mode)}); only regular files are ingested")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _file_kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK,
                       "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return what
    return "not a plain file"


def file_identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What changes when a file's bytes change or it is replaced: inode, device, size, mtime, ctime."""
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_HOST = socket.gethostname().replace("-", "_")[:40] or "host"


def owned_name(prefix: str) -> str:
    """``<prefix><host>-<pid>-<random>``: a temporary name that says which live process owns it."""
    return f"{prefix}{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def make_owned_dir(prefix: str, parent: str | os.PathLike[str] | None = None) -> Path:
    """A new temporary folder named by ``owned_name`` (in ``parent``, default the system's temporary folder)."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    path = base / owned_name(prefix)
    path.mkdir(mode=0o700)
    return path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def owner_is_dead(name: str, prefix: str) -> bool:
    """True when ``name`` (made by ``owned_name(prefix)``) belongs to a process of this host that is gone."""
    if not name.startswith(prefix):
        return False
    parts = name[len(prefix):].split("-")
    if len(parts) < 3 or parts[0] != _HOST or not parts[1].isdigit():
        return False  # another host's (a shared folder), or not ours: never touched
    pid = int(parts[1])
    return pid != os.getpid() and not pid_alive(pid)


def clean_dead(parent: str | os.PathLike[str] | None, prefix: str, min_age_s: float = 0.0) -> int:
    """Remove the entries of ``parent`` named by ``owned_name(prefix)`` whose process (on this host) is gone and
    that have not changed for ``min_age_s``; returns how many were removed.  A pid reused since is alive, so its
    entries wait for that process to end: never removed while their name points at a live process."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        if not owner_is_dead(entry.name, prefix):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < min_age_s:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


_T = TypeVar("_T")
_END = object()


def prefetched(items: Iterable[_T], depth: int = 1) -> Iterator[_T]:
    """``items``, produced in a worker thread at most ``depth`` ahead of the consumer.

    DuckDB's read, Arrow's kernels and IPC/Parquet I/O release the GIL, so producer and consumer use two cores
    (the lake pulls every adapter's batches through it, so an adapter's parse overlaps the Parquet write of the
    batch before; the Kineto adapter's own passes use it too).
    An exception of the producer is raised here, in the consumer, as it was; when the consumer stops early the
    producer stops after the item it is making."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((True, _END))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=work, name="taxbreak-ingest-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                raise item
            if item is _END:
                return
            yield item
    finally:
        stop.set()
        worker.join()
