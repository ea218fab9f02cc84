"""The bucket users drop reports into: a local folder or an S3-compatible prefix, plus the sensor's cursor.

No Dagster here: listing, hashing, downloading, ingesting one object (the sensor's runs and ``taxbreak retry``),
and the pure function that picks which files a tick takes.

The cursor is a single high-water mark ``(changed_ns, name)``: files are ordered by the time they last
changed, then by name, and a tick takes the files after the mark.  It stays the same size however many
files the bucket holds.  A file that changed less than ``settle_s`` ago is still being written (or
uploaded) and is left for a later tick, and the mark never moves past ``now - settle_s``, so a file that
arrives later always sorts after it.  For local files the change time is ``max(mtime, ctime)``: a copy
that keeps an old mtime (``cp -p``, ``rsync -a``, ``tar x``) still gets a fresh ctime when it lands.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from taxbreak.config import S3Settings
from taxbreak.ingest import SIDECAR_SUFFIX, TRACE_SUFFIXES, IngestResult, Lake, ingest_file

HASH_CHUNK_BYTES = 1 << 20


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


def is_bucket_trace_name(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    if base.startswith(".") or any(part.startswith(".") for part in name.split("/")[:-1]):
        return False
    return base.endswith(SIDECAR_SUFFIX) or base.endswith(TRACE_SUFFIXES)


class Bucket(Protocol):
    url: str

    def list(self) -> Iterator[Entry]: ...
    def open(self, name: str) -> IO[bytes]: ...
    def local_path(self, name: str) -> Path | None: ...
    def download(self, name: str, dest: Path) -> None: ...
    def describe(self, name: str) -> str: ...


def sha256_of(bucket: Bucket, name: str) -> str:
    digest = hashlib.sha256()
    with bucket.open(name) as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


class LocalBucket:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()  # the catalogue's source paths then work from any directory
        self.url = str(self.root)

    def list(self) -> Iterator[Entry]:
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
                    st = os.stat(os.path.join(dirpath, fname))
                except FileNotFoundError:  # removed between listing and stat
                    continue
                yield Entry(max(st.st_mtime_ns, st.st_ctime_ns), name, st.st_size)

    def open(self, name: str) -> IO[bytes]:
        return open(self.root / name, "rb")

    def local_path(self, name: str) -> Path | None:
        return self.root / name

    def download(self, name: str, dest: Path) -> None:
        shutil.copyfile(self.root / name, dest)

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
            if info.get("type") != "file":
                continue
            name = path[len(self.prefix):].lstrip("/")
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


def ingest_from(b: Bucket, name: str, store: Lake, *, force: bool, cache_dir: Path | None) -> IngestResult:
    """``ingest_file`` on a bucket object: in place for a local folder; object storage is downloaded to a
    temporary file named like the object first (adapters look at the suffix) and the catalogue then records
    the object's URL as the source."""
    local = b.local_path(name)
    if local is not None:
        return ingest_file(local, store, force=force, cache_dir=cache_dir)
    with tempfile.TemporaryDirectory(prefix="taxbreak-dl-") as tmp:
        dest = Path(tmp) / Path(name).name
        b.download(name, dest)
        result = ingest_file(dest, store, force=force, cache_dir=cache_dir)
    url = b.describe(name)
    if result.row is not None and result.status != "unchanged" and result.row["source_path"] != url:
        result.row["source_path"] = url
        store.write_catalogue_row(result.row)
    if result.error:
        result.error = result.error.replace(str(dest), url)
    return result


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


def select_new(
    entries: list[Entry] | Iterator[Entry], cursor: Cursor, *, now_ns: int, settle_s: float, max_files: int,
) -> tuple[list[Entry], Cursor, int]:
    """Files after ``cursor`` that have settled, oldest first, at most ``max_files``.

    Returns (batch, new cursor, number of newer files left for a later tick because they are still settling).
    """
    limit_ns = now_ns - int(settle_s * 1e9)
    fresh = sorted(e for e in entries if (e.changed_ns, e.name) > (cursor.changed_ns, cursor.name))
    settled = [e for e in fresh if e.changed_ns <= limit_ns]
    batch = settled[:max_files]
    new_cursor = Cursor(batch[-1].changed_ns, batch[-1].name) if batch else cursor
    return batch, new_cursor, len(fresh) - len(settled)
