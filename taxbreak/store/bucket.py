"""The bucket users drop reports into: a local folder or an S3-compatible prefix, plus the sensor's cursor.

No Dagster here: listing, hashing, downloading, ingesting one object (the sensor's runs and ``taxbreak retry``),
and the pure function that picks which files a tick takes.

The cursor is a single high-water mark ``(changed_ns, name)``: files are ordered by the time they last
changed, then by name, and a tick takes the files after the mark.  It stays the same size however many
files the bucket holds.  A file that changed less than ``settle_s`` ago is still being written (or
uploaded) and is left for a later tick, and the mark never moves past ``now - settle_s``, so a file that
arrives later always sorts after it.  For local files the change time is ``max(mtime, ctime)``: a copy
that keeps an old mtime (``cp -p``, ``rsync -a``, ``tar x``) still gets a fresh ctime when it lands.

Nothing in a bucket can stop the others: a local bucket lists regular files only (a FIFO, a device, a socket,
a link leaving the bucket is left out and named in ``LocalBucket.rejected``), a link is followed only to a
regular file inside the bucket, and opening never blocks.  Object keys are used exactly as stored (an empty
segment ``inbox//x.json``, a ``..`` segment, a 300-character name): the local copy of an object has a short
name of its own, and the catalogue and every message name the object's URL.  A trace's sidecar
``<trace>.meta.json`` is read with the trace, from the same bucket (a local folder or S3), into its catalogue row
(``ingest_from``); one dropped after its trace was ingested updates that row (``apply_sidecar``) without reading
the events again.  The analysis then reads the lake alone: moving or emptying the bucket loses nothing.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from taxbreak.config import ingest_limits
from taxbreak.ingest import IngestError, IngestResult, Lake, Sidecar, ingest_file, trace_suffixes
from taxbreak.ingest.base import clean_dead, make_owned_dir, open_regular
from taxbreak.ingest.objects import S3Settings
from taxbreak.ingest.sidecar import SIDECAR_SUFFIX, sidecar_update

HASH_CHUNK_BYTES = 1 << 20
DOWNLOAD_PREFIX = "taxbreak-dl-"
LOCAL_NAME_MAX_BYTES = 160  # longer object names get a short local copy name (file systems allow 255)


@dataclass(frozen=True, order=True)
class Entry:
    """One object in the bucket; ``name`` is relative to the bucket root with '/' separators."""

    changed_ns: int
    name: str
    size_bytes: int

    @property
    def is_sidecar(self) -> bool:
        return self.name.lower().endswith(SIDECAR_SUFFIX)

    @property
    def trace_name(self) -> str:
        """The trace a sidecar describes (``x.json.meta.json`` -> ``x.json``); the name itself for a trace."""
        return self.name[: -len(SIDECAR_SUFFIX)] if self.is_sidecar else self.name


def _hidden(part: str) -> bool:
    """A hidden name (``.partial.json``, ``.git``); ``.`` and ``..`` are plain key segments in object storage."""
    return part.startswith(".") and part not in (".", "..")


def is_bucket_trace_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    if base.startswith(".") or any(_hidden(part) for part in name.split("/")[:-1]):
        return False
    return base.endswith(SIDECAR_SUFFIX) or base.endswith(trace_suffixes())


def local_copy_name(name: str) -> str:
    """A file name for the local copy of object ``name``: its base name when short, else ``object`` + its trace
    suffix (adapters look at the suffix)."""
    base = name.rsplit("/", 1)[-1]
    if base not in ("", ".", "..") and len(base.encode("utf-8", "surrogateescape")) <= LOCAL_NAME_MAX_BYTES:
        return base
    lower = base.lower()
    suffix = max((s for s in (*trace_suffixes(), SIDECAR_SUFFIX) if lower.endswith(s)), key=len, default="")
    return "object" + suffix


class Bucket(Protocol):
    url: str

    def list(self) -> Iterator[Entry]: ...
    def open(self, name: str) -> IO[bytes]: ...
    def local_path(self, name: str) -> Path | None: ...
    def download(self, name: str, dest: Path) -> None: ...
    def describe(self, name: str) -> str: ...


def sha256_of(bucket: Bucket, name: str) -> str:
    """The trace id of a bucket object (OSError when it cannot be read, never a block on a FIFO)."""
    digest = hashlib.sha256()
    with bucket.open(name) as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


class LocalBucket:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()  # the catalogue's source paths then work from any directory
        self.url = str(self.root)
        self.rejected: dict[str, str] = {}  # name -> why the last listing left it out

    def list(self) -> Iterator[Entry]:
        """Regular files with trace names, recursively (links to folders are not followed); what is left out
        for not being a regular file inside the bucket is in ``self.rejected``."""
        self.rejected = {}
        if not self.root.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel_dir = os.path.relpath(dirpath, self.root)
            for fname in filenames:
                name = fname if rel_dir == "." else f"{rel_dir.replace(os.sep, '/')}/{fname}"
                if not is_bucket_trace_name(name):
                    continue
                try:
                    st = os.stat(self.resolve(name))
                except FileNotFoundError:  # removed between listing and stat
                    continue
                except OSError as exc:
                    self.rejected[name] = exc.strerror or str(exc)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    self.rejected[name] = "not a regular file"
                    continue
                yield Entry(max(st.st_mtime_ns, st.st_ctime_ns), name, st.st_size)

    def resolve(self, name: str) -> Path:
        """The file ``name`` stands for: itself, or the target of a link that stays inside the bucket (OSError
        for a link leading out of it)."""
        path = self.root / name
        if not path.is_symlink():
            return path
        target = path.resolve()
        if not target.is_relative_to(self.root.resolve()):
            raise OSError(errno.EXDEV, f"a link leading out of the bucket (to {target})", str(path))
        return target

    def open(self, name: str) -> IO[bytes]:
        path = self.resolve(name)
        if not os.path.lexists(path):  # FileNotFoundError, as an object store says it (no sidecar, a trace gone)
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(self.root / name))
        try:
            return open_regular(path)
        except IngestError as exc:
            raise OSError(errno.EINVAL, str(exc)) from None

    def local_path(self, name: str) -> Path | None:
        return self.resolve(name)

    def download(self, name: str, dest: Path) -> None:
        with self.open(name) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)

    def describe(self, name: str) -> str:
        return str(self.root / name)


class S3Bucket:
    """``s3://bucket/prefix`` through s3fs (endpoint and credentials from ``s3``, else the AWS_* variables)."""

    def __init__(self, url: str, s3: S3Settings | None = None) -> None:
        self.url = url.rstrip("/")
        self.prefix = self.url[len("s3://"):]
        self.fs = (s3 or S3Settings.from_env()).fsspec_filesystem()

    def list(self) -> Iterator[Entry]:
        try:
            found = self.fs.find(self.prefix, detail=True)
        except FileNotFoundError:
            return
        for path, info in found.items():
            if info.get("type") != "file" or not path.startswith(self.prefix + "/"):
                continue
            name = path[len(self.prefix) + 1:]  # exactly as stored: an empty segment is part of the key
            if not is_bucket_trace_name(name):
                continue
            modified = info["LastModified"]
            yield Entry(int(modified.timestamp()) * 1_000_000_000 + modified.microsecond * 1000, name,
                        int(info["size"]))

    def open(self, name: str) -> IO[bytes]:
        return self.fs.open(f"{self.prefix}/{name}", "rb")

    def local_path(self, name: str) -> Path | None:
        return None

    def download(self, name: str, dest: Path) -> None:
        self.fs.get_file(f"{self.prefix}/{name}", str(dest))

    def describe(self, name: str) -> str:
        return f"{self.url}/{name}"


def open_bucket(url: str, s3: S3Settings | None = None) -> Bucket:
    if url.startswith("s3://"):
        return S3Bucket(url, s3)
    if "://" in url and not url.startswith("file://"):
        raise ValueError(f"unsupported bucket URL {url!r}: use a local folder or s3://bucket/prefix")
    return LocalBucket(url.removeprefix("file://"))


def bucket_for_url(url: str, s3: S3Settings | None = None) -> tuple[Bucket, str]:
    """The bucket holding one recorded source (a local path or ``s3://bucket/key``) and the name in it."""
    if url.startswith("s3://"):
        bucket_name, _, key = url[len("s3://"):].partition("/")
        return S3Bucket(f"s3://{bucket_name}", s3), key
    path = Path(url.removeprefix("file://"))
    return LocalBucket(path.parent), path.name


def bucket_sidecar(b: Bucket, trace_name: str) -> Sidecar:
    """The sidecar of bucket object ``trace_name``: the object ``<trace_name>.meta.json`` of the same bucket."""
    side = trace_name + SIDECAR_SUFFIX
    return Sidecar(lambda: b.open(side), b.describe(side))


def ingest_from(b: Bucket, name: str, store: Lake, *, force: bool, cache_dir: Path | None) -> IngestResult:
    """``ingest_file`` on a bucket object: in place for a local folder; object storage is downloaded to a
    temporary file first (named like the object, or ``object<suffix>`` when that name is too long) and the
    catalogue and messages name the object's URL.  The object's sidecar is read from the bucket with it (one GET
    on S3) into the catalogue row.  Never raises for one object: what cannot be read is a
    failed result with the reason (no catalogue row: its content, hence its trace id, is unknown)."""
    url = b.describe(name)
    sidecar = bucket_sidecar(b, name)
    try:
        local = b.local_path(name)
    except OSError as exc:
        return IngestResult(url, "", "failed", None, f"{url}: not ingested: {exc.strerror or exc}")
    if local is not None:
        return ingest_file(local, store, force=force, cache_dir=cache_dir, source_path=url,
                           file_name=name.rsplit("/", 1)[-1], sidecar=sidecar, limits=ingest_limits())
    clean_dead(None, DOWNLOAD_PREFIX)
    tmp = make_owned_dir(DOWNLOAD_PREFIX)
    try:
        dest = tmp / local_copy_name(name)
        try:
            b.download(name, dest)
        except Exception as exc:  # noqa: BLE001 - a store error (gone, denied, network) fails this object only
            return IngestResult(url, "", "failed", None, f"{url}: cannot download the object ({exc})")
        return ingest_file(dest, store, force=force, cache_dir=cache_dir, source_path=url,
                           file_name=name.rsplit("/", 1)[-1], sidecar=sidecar, limits=ingest_limits())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def apply_sidecar(b: Bucket, trace_name: str, store: Lake, *, cache_dir: Path | None) -> IngestResult:
    """The sidecar ``<trace_name>.meta.json`` changed: record it in the trace's catalogue row (metadata key
    ``taxbreak_sidecar``, or ``taxbreak_sidecar_error`` when it is invalid;
    ``taxbreak.ingest.sidecar.sidecar_update``) without
    reading the events again, from a local folder or S3 alike.  A trace not stored yet is ingested instead (its
    sidecar with it).  Status 'meta_updated' (or what ``ingest_from`` returns)."""
    url = b.describe(trace_name)
    try:
        trace_id = sha256_of(b, trace_name)
    except OSError as exc:
        return IngestResult(url, "", "failed", None, f"{url}: cannot read the trace ({exc.strerror or exc})")
    if store.is_stored(trace_id) is None:
        return ingest_from(b, trace_name, store, force=False, cache_dir=cache_dir)
    sidecar = bucket_sidecar(b, trace_name)
    update = sidecar_update(sidecar.open, sidecar.where)  # removed: the stored copy goes with it
    row = store.update_metadata(trace_id, update)
    if row is None:  # removed meanwhile
        return ingest_from(b, trace_name, store, force=False, cache_dir=cache_dir)
    error = update["taxbreak_sidecar_error"]
    return IngestResult(url, trace_id, "meta_updated", row, str(error) if error else None)


# -- the cursor ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cursor:
    changed_ns: int = -1
    name: str = ""

    def dumps(self) -> str:
        return json.dumps({"changed_ns": self.changed_ns, "name": self.name}, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(int(data["changed_ns"]), str(data["name"]))


TICK_MAX_BYTES = 4 << 30  # a sensor tick hashes at most this many bytes (always at least one file)


def select_new(
    entries: list[Entry] | Iterator[Entry], cursor: Cursor, *, now_ns: int, settle_s: float, max_files: int,
    max_bytes: int | None = None,
) -> tuple[list[Entry], Cursor, int]:
    """Files after ``cursor`` that have settled, oldest first, at most ``max_files`` and, past the first, at most
    ``max_bytes`` in all (the sensor hashes each: its work per tick is bounded; the rest waits for the next).

    Returns (batch, new cursor, number of newer files left for a later tick because they are still settling).
    """
    limit_ns = now_ns - int(settle_s * 1e9)
    fresh = sorted(e for e in entries if (e.changed_ns, e.name) > (cursor.changed_ns, cursor.name))
    settled = [e for e in fresh if e.changed_ns <= limit_ns]
    batch, total = [], 0
    for e in settled[:max_files]:
        if batch and max_bytes is not None and total + e.size_bytes > max_bytes:
            break
        batch.append(e)
        total += e.size_bytes
    new_cursor = Cursor(batch[-1].changed_ns, batch[-1].name) if batch else cursor
    return batch, new_cursor, len(fresh) - len(settled)
