"""Ingest: one adapter per input format, each turning a file into events of the common schema.

``ingest_file`` is the single entry point used by the CLI and the pipeline: it hashes the file (the
hash is the trace id), skips content already in the lake, picks the adapter from the file's bytes,
streams the adapter's batches into the lake and records the outcome in the catalogue.  A file that
fails is recorded as failed with its reason and never raises past this function.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taxbreak.ingest.base import AdapterOutput, IngestError, TraceInfo
from taxbreak.ingest.lake import Lake

__all__ = [
    "AdapterOutput",
    "IngestError",
    "IngestResult",
    "Lake",
    "TraceInfo",
    "detect_format",
    "file_sha256",
    "ingest_file",
    "iter_trace_files",
]

SIDECAR_SUFFIX = ".meta.json"
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".db", ".nsys-rep", ".qdrep")


@dataclass
class IngestResult:
    path: str
    trace_id: str
    status: str  # "ingested", "unchanged" (already in the lake), or "failed"
    row: dict | None
    error: str | None = None


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def detect_format(path: str | os.PathLike[str]) -> str:
    """'kineto', 'nsys-sqlite' or 'nsys-rep', from the file's first bytes (then its name)."""
    with open(path, "rb") as fh:
        head = fh.read(64)
    if not head:
        raise IngestError(f"{path}: the file is empty")
    if head.startswith(b"SQLite format 3\x00"):
        return "nsys-sqlite"
    if head.startswith(b"NVIDIA Tegra Profiler Report") or b"Nsight" in head[:32]:
        return "nsys-rep"
    if head[:2] == b"\x1f\x8b":
        return "kineto"
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"["):
        return "kineto"
    name = str(path).lower()
    if name.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    if name.endswith((".sqlite", ".db")):
        raise IngestError(f"{path}: named like a SQLite export but is not a SQLite database")
    if name.endswith((".json", ".json.gz")):
        raise IngestError(f"{path}: not JSON (the file does not start with '{{' or '[')")
    raise IngestError(f"{path}: unrecognised format (expected Kineto JSON, Nsight SQLite or .nsys-rep)")


def is_trace_file(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and not name.startswith(".") and not name.endswith(SIDECAR_SUFFIX) and name.endswith(
        TRACE_SUFFIXES
    )


def iter_trace_files(paths: list[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders into trace files (folders recursively, sidecars left out)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if is_trace_file(q)))
        else:
            out.append(p)
    return out


def _open_adapter(
    fmt: str, path: Path, trace_id: str, workdir: Path, cache_dir: Path | None,
    progress: Callable[[int, int], None] | None,
) -> AdapterOutput:
    if fmt == "kineto":
        from taxbreak.ingest.kineto import read_kineto

        return read_kineto(path, trace_id, workdir=workdir, progress=progress)
    if fmt == "nsys-sqlite":
        from taxbreak.ingest.nsys_sqlite import read_nsys_sqlite

        return read_nsys_sqlite(path, trace_id)
    if fmt == "nsys-rep":
        from taxbreak.ingest.nsys_rep import read_nsys_rep

        return read_nsys_rep(path, trace_id, cache_dir=cache_dir)
    raise IngestError(f"{path}: no adapter for format {fmt!r}")


def ingest_file(
    path: str | os.PathLike[str],
    lake: Lake,
    *,
    force: bool = False,
    cache_dir: Path | None = None,
    tmp_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> IngestResult:
    """Ingest one file into ``lake``; never raises for a bad file (the catalogue records why)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        trace_id = file_sha256(p)
    except OSError as exc:
        return IngestResult(str(p), "", "failed", None, f"{p}: cannot read the file ({exc.strerror or exc})")
    existing = lake.catalogue_row(trace_id)
    if not force and existing is not None and existing["status"] == "ingested" and lake.has_events(trace_id):
        return IngestResult(str(p), trace_id, "unchanged", existing)
    if not force and existing is not None and existing["status"] == "failed":
        # Failed content is retried only when it changes (a new hash) or on explicit request.
        return IngestResult(str(p), trace_id, "failed", existing, existing["error"])
    fmt: str | None = None
    try:
        fmt = detect_format(p)
        with tempfile.TemporaryDirectory(prefix="taxbreak-", dir=tmp_dir) as work:
            out = _open_adapter(fmt, p, trace_id, Path(work), cache_dir, progress)
            row = lake.write_events(
                trace_id, out.batches, out.info, file_name=p.name, source_path=str(p), file_bytes=size
            )
        return IngestResult(str(p), trace_id, "ingested", row)
    except IngestError as exc:
        message = str(exc)
    except MemoryError:
        message = f"{p}: ran out of memory while ingesting"
    except Exception as exc:  # noqa: BLE001 - an adapter bug must not stop the other files; record it verbatim
        message = f"{p}: unexpected {type(exc).__name__} while ingesting: {exc}"
    if existing is not None and existing["status"] == "ingested" and lake.has_events(trace_id):
        # A forced re-ingest of content already stored failed: keep the good copy and its row.
        return IngestResult(str(p), trace_id, "failed", existing, message)
    row = lake.record_failure(
        trace_id, file_name=p.name, source_path=str(p), file_bytes=size, error=message, source_format=fmt
    )
    return IngestResult(str(p), trace_id, "failed", row, message)
