"""Ingest: one adapter per input format, each turning a file into events of the common schema.

``ADAPTERS`` is the registry: one line per format (its name, file suffixes, how its bytes are recognised, its
opener; ``base.Adapter``).  Detection, folder and bucket listings and dispatch all read it, so a new trace format is
its adapter module plus one line there.

``ingest_file`` is the single entry point used by the CLI and the pipeline: it hashes the file (the
hash is the trace id), skips content already in the lake, picks the adapter from the file's bytes,
streams the adapter's batches into the lake and records the outcome in the catalogue.  The trace's sidecar
``<trace>.meta.json`` (``taxbreak.ingest.sidecar``) is read at the same time into the catalogue row's
``metadata_json``, so
the analysis reads the lake alone; a sidecar found beside content already stored updates that row (the events are
not read again).  A file that
fails is recorded as failed with its reason and never raises past this function; a file that is no trace
at all (not JSON, JSON without ``traceEvents``, empty) is recorded as 'not_a_trace'.

Only regular files are read (a FIFO or a device is refused without blocking).  The bytes hashed are the bytes
parsed: the file's identity (inode, size, mtime, ctime) is taken when it is opened for hashing and compared
once the adapter has read it; a file changed or replaced meanwhile is read again from the start (once), and
never stored under the old content's hash.  With ``force`` the hash runs on a thread while an adapter whose opening
parses nothing (``Adapter.early_open``) is opened; without it the hash comes first, so stored content costs its hash.
Temporary folders are named after their process (``taxbreak-ingest-<host>-<pid>-...``); the first ingest of a
process removes those of dead processes and recovers the lake (``Lake.recover``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import pyarrow as pa

from taxbreak.ingest import request_lists
from taxbreak.ingest.base import (
    SNIFF_BYTES,
    Adapter,
    AdapterOutput,
    IngestError,
    IngestLimits,
    NotATraceError,
    OpenContext,
    TraceId,
    TraceInfo,
    clean_dead,
    file_identity,
    json_or_gzip,
    make_owned_dir,
    open_regular,
    starts_with,
)
from taxbreak.ingest.lake import Lake
from taxbreak.ingest.oserrors import WRITE_SIDE, classify
from taxbreak.ingest.sidecar import (
    SIDECAR_CHECKED_KEY,
    SIDECAR_KEYS,
    SIDECAR_SOURCE_KEY,
    SIDECAR_SUFFIX,
    sidecar_update,
)

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AdapterOutput",
    "IngestError",
    "IngestResult",
    "Lake",
    "NotATraceError",
    "OpenContext",
    "Sidecar",
    "TraceInfo",
    "adapter_for",
    "detect_format",
    "file_sha256",
    "ingest_file",
    "iter_trace_files",
    "trace_suffixes",
]

# The registry: one line per trace format (base.Adapter says what each field means).  Signatures are tried before
# sniffs, so Kineto's loose JSON/gzip test never takes a file an Nsight signature recognises.
ADAPTERS: tuple[Adapter, ...] = (
    Adapter("kineto", "Kineto JSON", (".json", ".json.gz"), "taxbreak.ingest.kineto:open_trace", sniff=json_or_gzip,
            misnamed="not JSON (the file does not start with '{' or '[')",
            early_open=lambda head: not head.startswith(b"\x1f\x8b")),  # plain JSON: opening copies, parses nothing
    Adapter("nsys-sqlite", "Nsight SQLite", (".sqlite", ".db"), "taxbreak.ingest.nsys_sqlite:open_trace",
            signature=starts_with(b"SQLite format 3\x00"),
            misnamed="named like a SQLite export but is not a SQLite database"),
    Adapter("nsys-rep", ".nsys-rep", (".nsys-rep", ".qdrep"), "taxbreak.ingest.nsys_rep:open_trace",
            signature=lambda head: head.startswith(b"NVIDIA Tegra Profiler Report") or b"Nsight" in head[:32]),
)


def trace_suffixes() -> tuple[str, ...]:
    """Every registered adapter's file name suffixes."""
    return tuple(s for a in ADAPTERS for s in a.suffixes)


TRACE_SUFFIXES = trace_suffixes()  # the registry's suffixes when this module loaded (listings call trace_suffixes)
WORK_PREFIX = "taxbreak-ingest-"


@dataclass
class IngestResult:
    path: str
    trace_id: str
    status: str  # "ingested", "unchanged" (already in the lake), "failed", or "not_a_trace"
    row: dict | None
    error: str | None = None
    replayed: bool = False  # the outcome an earlier attempt on these bytes recorded (at ``row``'s time), not read now


def _sha256_of(fh: BinaryIO) -> str:
    digest = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The trace id of a regular file (IngestError, an OSError, for anything else: never blocks on a FIFO)."""
    with open_regular(path) as fh:
        return _sha256_of(fh)


def adapter_for(path: str | os.PathLike[str]) -> Adapter:
    """The registered adapter for the file at ``path``: from its first bytes (signatures, then sniffs), then its
    name (``base.Adapter``); NotATraceError naming the file when none fits."""
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if not head:
        raise NotATraceError(f"{path}: the file is empty")
    for test in ("signature", "sniff"):
        for adapter in ADAPTERS:
            matches = getattr(adapter, test)
            if matches is not None and matches(head):
                return adapter
    name = str(path).lower()
    for adapter in ADAPTERS:
        if name.endswith(adapter.suffixes):
            if adapter.misnamed is None:
                return adapter
            raise NotATraceError(f"{path}: {adapter.misnamed}")
    labels = [a.label for a in ADAPTERS]
    expected = ", ".join(labels[:-1]) + " or " + labels[-1] if len(labels) > 1 else labels[0]
    raise NotATraceError(f"{path}: unrecognised format (expected {expected})")


def detect_format(path: str | os.PathLike[str]) -> str:
    """The name of the registered adapter for ``path`` ('kineto', 'nsys-sqlite', 'nsys-rep', ...)."""
    return adapter_for(path).name


def is_trace_file(path: Path) -> bool:
    """A trace file by name, and a regular file (not a link: folders are expanded without following links)."""
    name = path.name.lower()
    return (path.is_file() and not path.is_symlink() and not name.startswith(".")
            and not name.endswith(SIDECAR_SUFFIX) and name.endswith(trace_suffixes()))


def iter_trace_files(paths: list[str | os.PathLike[str]], links: list[Path] | None = None) -> list[Path]:
    """Expand files and folders into trace files (folders recursively without following links, sidecars,
    FIFOs, devices and links left out); a file named explicitly is kept (``ingest_file`` says what it is).
    ``links``: when given, the symbolic links met in the folders (to files or folders) are appended to it, so a
    caller can say they were skipped (issue 30: a folder of links only said "no trace files found")."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = []
            for dirpath, dirnames, filenames in os.walk(p):  # os.walk does not descend into linked folders
                if links is not None:
                    links.extend(q for n in (*dirnames, *filenames) if not n.startswith(".")
                                 and (q := Path(dirpath) / n).is_symlink())
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                found.extend(q for f in filenames if is_trace_file(q := Path(dirpath) / f))
            out.extend(sorted(found))
        else:
            out.append(p)
    return out


_RECOVERED: set[str] = set()


def _recover_once(lake: Lake, tmp_dir: Path | None) -> None:
    """Once per process and place: remove temporary folders of dead ingests and recover the lake."""
    for key, action in ((f"tmp:{tmp_dir}", lambda: clean_dead(tmp_dir, WORK_PREFIX)),
                        (f"lake:{lake.url}", lake.recover)):
        if key not in _RECOVERED:
            _RECOVERED.add(key)
            try:
                action()
            except OSError:
                pass  # best effort: a lake or folder not writable here is still read


class _FileChanged(IngestError):
    pass


def _checked(batches: Iterator[pa.RecordBatch], path: Path, identity: tuple, shown: str) -> Iterator[pa.RecordBatch]:
    """``batches``, then a check that the file is still the one hashed (before anything is published)."""
    yield from batches
    try:
        now = file_identity(os.stat(path))
    except OSError:
        now = None
    if now != identity:
        raise _FileChanged(f"{shown}: the file changed while it was ingested; nothing was stored")


def _scrub(message: str, path: Path, shown: str, work: Path | None) -> str:
    """A message for the catalogue: the source as the user knows it, never a temporary file."""
    if work is not None and str(work) in message:
        message = re.sub(re.escape(str(work)) + r"[^\s'\")]*", "(a temporary file of the ingest)", message)
    if shown != str(path):
        message = message.replace(str(path), shown)
    return message


def _open_adapter(
    adapter: Adapter, path: Path, trace_id: TraceId, workdir: Path, cache_dir: Path | None,
    progress: Callable[[int, int], None] | None, limits: IngestLimits,
) -> AdapterOutput:
    out = adapter.open(path, trace_id, OpenContext(workdir=workdir, cache_dir=cache_dir, progress=progress,
                                                   limits=limits))
    out.info.source_format = adapter.name  # the catalogue's source_format is the registry's name
    return out


# -- the sidecar, read with its trace ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sidecar:
    """Where a trace's sidecar is: ``open()`` (FileNotFoundError when there is none) and ``where``, its name in
    the catalogue and messages.  ``Sidecar.beside(path, shown)``: the file ``<path>.meta.json``."""

    open: Callable[[], IO[bytes]]
    where: str

    @classmethod
    def beside(cls, path: Path, shown: str) -> Sidecar:
        side = path.with_name(path.name + SIDECAR_SUFFIX)

        def opener() -> IO[bytes]:
            if not os.path.lexists(side):
                raise FileNotFoundError(str(side))
            try:
                return open_regular(side)  # a FIFO or a device is refused, never waited on
            except IngestError as exc:
                raise OSError(str(exc).removeprefix(f"{side}: ")) from None

        return cls(opener, shown + SIDECAR_SUFFIX)


def _with_sidecar(batches: Iterator[pa.RecordBatch], info: TraceInfo, update: dict) -> Iterator[pa.RecordBatch]:
    """``batches``, then the sidecar's keys merged into ``info.metadata`` (an adapter fills its metadata while its
    batches are read; the catalogue row is made from ``info`` after the last one)."""
    yield from batches
    for key in SIDECAR_KEYS:  # the trace's own top-level keys never pass for a sidecar
        info.metadata.pop(key, None)
    info.metadata.update({k: v for k, v in update.items() if v is not None})


def _refresh_sidecar(lake: Lake, row: dict, sidecar: Sidecar, shown: str) -> dict:
    """A stored trace met again: record its sidecar when it differs from the catalogue's (events not read).  No
    sidecar beside this copy clears the recorded one only when this copy is the recorded source (another copy of
    the same bytes without a sidecar says nothing about it)."""
    update = sidecar_update(sidecar.open, sidecar.where)
    meta = json.loads(row.get("metadata_json") or "{}")
    if update[SIDECAR_SOURCE_KEY] is None and meta.get(SIDECAR_CHECKED_KEY) and row.get("source_path") != shown:
        return row
    if all(meta.get(k) == v for k, v in update.items() if k in SIDECAR_KEYS):
        return row
    return lake.update_metadata(row["trace_id"], update) or row


def ingest_file(
    path: str | os.PathLike[str],
    lake: Lake,
    *,
    force: bool = False,
    cache_dir: Path | None = None,
    tmp_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    source_path: str | None = None,
    file_name: str | None = None,
    sidecar: Sidecar | None = None,
    limits: IngestLimits | None = None,
) -> IngestResult:
    """Ingest one file into ``lake``; never raises for a bad file (the catalogue records why).

    ``source_path`` / ``file_name``: what the catalogue and messages call the file when ``path`` is a local
    copy (an object downloaded from S3); default ``path`` and its name.  ``sidecar``: where the trace's sidecar
    is (an object beside the trace's object); default the file beside ``path``, named after ``source_path``.
    An invalid or unreadable sidecar never fails the trace: the catalogue records why (``taxbreak.ingest.sidecar``)."""
    p = Path(path)
    shown = source_path or str(p)
    name = file_name or p.name
    side = sidecar or Sidecar.beside(p, shown)
    _recover_once(lake, tmp_dir)
    for attempt in (1, 2):
        result = _ingest_once(p, lake, force, cache_dir, tmp_dir, progress, limits or IngestLimits(), shown, name,
                              side, last=attempt == 2)
        if result is not None:
            return _with_request_list(lake, result, p, shown, tmp_dir)
    raise AssertionError("unreachable")


def _with_request_list(lake: Lake, result: IngestResult, p: Path, shown: str, tmp_dir: Path | None) -> IngestResult:
    """A stored trace with a request list beside it (``<trace>.requests.jsonl[.gz]``, ``request_lists``): the list
    converted into the lake unless the one recorded is this file unchanged; its counts, or why it was refused, in
    the catalogue row (``REQUESTS_KEY`` / ``REQUESTS_ERROR_KEY``). No list beside this copy changes nothing (another
    copy of the same bytes without one says nothing about it)."""
    if result.status not in ("ingested", "unchanged") or result.row is None:
        return result
    src = request_lists.beside(p)
    if src is None:
        return result
    where = shown + src.name[len(p.name):]
    meta = json.loads(result.row.get("metadata_json") or "{}")
    rec = meta.get(request_lists.REQUESTS_KEY)
    try:
        st = src.stat()
        if (isinstance(rec, dict) and rec.get("where") == where and rec.get("bytes") == st.st_size
                and rec.get("mtime_ns") == st.st_mtime_ns and lake.has_requests(result.trace_id)):
            return result
    except OSError:
        pass  # convert says why
    update: dict = {request_lists.REQUESTS_KEY: None, request_lists.REQUESTS_ERROR_KEY: None}
    try:
        update[request_lists.REQUESTS_KEY] = lake.publish_requests(
            result.trace_id, lambda dest: request_lists.convert(src, dest, where, temp_dir=tmp_dir))
    except request_lists.RequestListError as exc:
        update[request_lists.REQUESTS_ERROR_KEY] = str(exc)
    except OSError as exc:
        update[request_lists.REQUESTS_ERROR_KEY] = f"{where}: cannot store the request list ({exc.strerror or exc})"
    row = lake.update_metadata(result.trace_id, update) or result.row
    return dataclasses.replace(result, row=row)


@dataclass
class _Opened:
    """The adapter opened on the file: the sidecar's update, the workdir, the adapter's output; or the error opening
    raised (raised by ``_ingest_once`` where it records failures, so an opening done while the file was hashed,
    ``_open_early``, fails as one done after the catalogue check)."""

    adapter: Adapter
    side: dict | None = None
    work: Path | None = None
    out: AdapterOutput | None = None
    error: Exception | None = None

    @classmethod
    def open(
        cls, adapter: Adapter, p: Path, trace_id: TraceId, sidecar: Sidecar, cache_dir: Path | None,
        tmp_dir: Path | None, progress: Callable[[int, int], None] | None, limits: IngestLimits,
    ) -> _Opened:
        opened = cls(adapter)
        try:
            opened.side = sidecar_update(sidecar.open, sidecar.where)
            opened.work = make_owned_dir(WORK_PREFIX, tmp_dir)
            opened.out = _open_adapter(adapter, p, trace_id, opened.work, cache_dir, progress, limits)
        except Exception as exc:  # noqa: BLE001 - raised by the caller, where failures are recorded
            opened.error = exc
        except BaseException:
            opened.discard()
            raise
        return opened

    def discard(self) -> None:
        """Not ingested after all (the hash failed, or the file changed): the batches are never pulled."""
        if self.out is not None:
            close = getattr(self.out.batches, "close", None)
            if close is not None:
                close()
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)


def _open_early(
    p: Path, trace_id: Callable[[], str], sidecar: Sidecar, cache_dir: Path | None, tmp_dir: Path | None,
    progress: Callable[[int, int], None] | None, limits: IngestLimits,
) -> _Opened | None:
    """The adapter opened while the file is hashed, when its registry line says its opening parses nothing
    (``Adapter.early_open``); None otherwise (then it is opened after the hash)."""
    try:
        adapter = adapter_for(p)
        with open(p, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except Exception:  # noqa: BLE001 - found again, and reported, after the hash
        return None
    if adapter.early_open is None or not adapter.early_open(head):
        return None
    return _Opened.open(adapter, p, trace_id, sidecar, cache_dir, tmp_dir, progress, limits)


def _ingest_once(
    p: Path, lake: Lake, force: bool, cache_dir: Path | None, tmp_dir: Path | None,
    progress: Callable[[int, int], None] | None, limits: IngestLimits, shown: str, name: str, sidecar: Sidecar, *,
    last: bool,
) -> IngestResult | None:
    """One attempt; None when the file changed while it was read and ``last`` is False (the caller retries).

    With ``force`` (the catalogue is not asked whether the content is known) the file is hashed on a thread and an
    adapter whose opening parses nothing (``Adapter.early_open``) is opened meanwhile.  Without it the hash comes
    first, alone: content already in the lake is skipped for the price of its hash (opened early, its adapter's
    preparation would be wasted there: 0.55 -> 1.1 CPU-s for a stored 512 MiB Kineto trace, measured)."""
    early: _Opened | None = None
    try:
        with open_regular(p) as fh:
            identity = file_identity(os.fstat(fh.fileno()))
            if force:
                with ThreadPoolExecutor(1, thread_name_prefix="taxbreak-ingest-hash") as pool:
                    hashed = pool.submit(_sha256_of, fh)  # (the reads and hashlib's updates release the GIL)
                    early = _open_early(p, hashed.result, sidecar, cache_dir, tmp_dir, progress, limits)
                # (leaving the pool waits for the hash: the thread reads ``fh``, done before the file is closed)
                trace_id = hashed.result()
            else:
                trace_id = _sha256_of(fh)
            if file_identity(os.fstat(fh.fileno())) != identity:
                raise _FileChanged(f"{shown}: the file changed while it was hashed")
    except BaseException as exc:
        if early is not None:
            early.discard()
        if isinstance(exc, _FileChanged):
            return None if not last else IngestResult(shown, "", "failed", None, str(exc))
        if isinstance(exc, IngestError):
            return IngestResult(shown, "", "failed", None, _scrub(str(exc), p, shown, None))
        if isinstance(exc, OSError):
            return IngestResult(shown, "", "failed", None, f"{shown}: cannot read the file ({exc.strerror or exc})")
        raise
    size = identity[2]
    existing = None if force else lake.catalogue_row(trace_id)  # (with ``force`` nothing known is skipped)
    if existing is not None and existing["status"] == "ingested" and lake.has_events(trace_id):
        return IngestResult(shown, trace_id, "unchanged", _refresh_sidecar(lake, existing, sidecar, shown))
    if existing is not None and existing["status"] in ("failed", "not_a_trace"):
        # Failed content is retried only when it changes (a new hash) or on explicit request.
        return IngestResult(shown, trace_id, existing["status"], existing, existing["error"], replayed=True)
    fmt: str | None = None
    status = "failed"
    work: Path | None = None
    try:
        opened = early if early is not None else _Opened.open(adapter_for(p), p, trace_id, sidecar, cache_dir,
                                                              tmp_dir, progress, limits)
        fmt, work = opened.adapter.name, opened.work
        if opened.error is not None:
            raise opened.error
        assert opened.out is not None and opened.side is not None
        out = opened.out
        batches = _with_sidecar(_checked(out.batches, p, identity, shown), out.info, opened.side)
        row, published = lake.publish_events(
            trace_id, batches, out.info, file_name=name, source_path=shown, file_bytes=size, replace=force,
        )
        # not published: a concurrent ingest of the same bytes stored them first -- success all the same
        return IngestResult(shown, trace_id, "ingested" if published else "unchanged", row)
    except _FileChanged as exc:
        if not last:
            return None
        # the bytes hashed are gone: no row under their hash (the new content is read when it settles)
        return IngestResult(shown, trace_id, "failed", None, str(exc))
    except NotATraceError as exc:
        message, status = str(exc), "not_a_trace"
    except IngestError as exc:
        message = str(exc)
    except MemoryError:
        message = f"{p}: ran out of memory while ingesting"
    except RecursionError:
        message = f"{p}: nested too deeply to be read"
    except Exception as exc:  # noqa: BLE001 - an adapter bug must not stop the other files; record it verbatim
        fault = classify(exc)
        if fault is not None and fault.kind in WRITE_SIDE:
            raise  # a full or read-only lake or workdir, not the file's fault: nothing recorded against its bytes
        message = f"{p}: unexpected {type(exc).__name__} while ingesting: {exc}"
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    message = _scrub(message, p, shown, work)
    row = lake.record_failure(
        trace_id, file_name=name, source_path=shown, file_bytes=size, error=message, source_format=fmt,
        status=status,
    )
    if row["status"] == "ingested":
        # The content is stored (a forced re-ingest failed, or a concurrent ingest succeeded): the good copy and
        # its row stay; this attempt's failure is reported, not recorded.
        return IngestResult(shown, trace_id, "failed" if force else "unchanged", row, message if force else None)
    return IngestResult(shown, trace_id, status, row, message)
