"""The object store the lake and the marts live in (a local folder or ``s3://bucket/prefix``): what an S3 URL is, the
store's endpoint and credentials, and the store itself (``open_store``: ``LocalStore`` or ``S3Store``, one interface
over files named by relative paths).  Part of the ingest (it imports nothing of taxbreak above ``schemas/``); the
callers pass an ``S3Settings`` or let ``S3Settings.from_env`` read the environment variables below."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

S3_ENDPOINT_ENV = ("TAXBREAK_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
# S3Settings field -> the environment variables it falls back to, first set wins (the pipeline's resources bind the
# same variables with dagster.EnvVar)
S3_ENV: dict[str, tuple[str, ...]] = {
    "endpoint_url": S3_ENDPOINT_ENV, "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",), "region": ("AWS_DEFAULT_REGION",),
}


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def is_s3_url(location: str | os.PathLike[str]) -> bool:
    """``s3://bucket/prefix``, also as ``s3:/bucket/prefix`` (what ``Path('s3://...')`` turns it into)."""
    return os.fspath(location).startswith("s3:/")


def normalise_s3_url(location: str | os.PathLike[str]) -> str:
    """``s3://bucket/prefix`` without a trailing slash, from either spelling ``is_s3_url`` accepts."""
    text = os.fspath(location)
    if not is_s3_url(text):
        raise ValueError(f"not an s3:// URL: {text!r}")
    key = text[len("s3:/"):].lstrip("/").rstrip("/")
    if not key:
        raise ValueError(f"an s3:// URL needs a bucket: {text!r}")
    return f"s3://{key}"


@dataclass(frozen=True)
class S3Settings:
    """Endpoint and credentials of an S3-compatible store (AWS, MinIO, Ceph, moto).

    Each field falls back to the variables the bucket uses: ``TAXBREAK_S3_ENDPOINT_URL`` (or
    ``AWS_ENDPOINT_URL``), ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``; unset
    everywhere, the SDKs' own defaults apply (AWS, instance or pod credentials)."""

    endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str | None = None

    @classmethod
    def from_env(
        cls, *, endpoint_url: str | None = None, access_key_id: str | None = None,
        secret_access_key: str | None = None, region: str | None = None,
    ) -> S3Settings:
        given = {"endpoint_url": endpoint_url, "access_key_id": access_key_id,
                 "secret_access_key": secret_access_key, "region": region}
        return cls(**{field: given[field] or next((v for v in map(_env, names) if v), None)
                      for field, names in S3_ENV.items()})

    def arrow_filesystem(self):  # noqa: ANN201 - pyarrow.fs.S3FileSystem (pyarrow imported only when used)
        """The store as a ``pyarrow.fs.S3FileSystem`` (the lake's reads and writes)."""
        from urllib.parse import urlsplit

        import pyarrow.fs as pafs

        kwargs: dict[str, str] = {}
        if self.endpoint_url:
            parts = urlsplit(self.endpoint_url if "://" in self.endpoint_url else f"https://{self.endpoint_url}")
            kwargs["endpoint_override"] = parts.netloc
            kwargs["scheme"] = parts.scheme
        if self.access_key_id and self.secret_access_key:
            kwargs["access_key"] = self.access_key_id
            kwargs["secret_key"] = self.secret_access_key
        if self.region:
            kwargs["region"] = self.region
        return pafs.S3FileSystem(**kwargs)

    def fsspec_filesystem(self):  # noqa: ANN201 - s3fs.S3FileSystem
        """The store as an fsspec filesystem (what DuckDB reads ``s3://`` through: httpfs is not used)."""
        import s3fs

        client_kwargs: dict[str, str] = {}
        if self.endpoint_url:
            client_kwargs["endpoint_url"] = self.endpoint_url
        if self.region:
            client_kwargs["region_name"] = self.region
        return s3fs.S3FileSystem(
            key=self.access_key_id or None, secret=self.secret_access_key or None, client_kwargs=client_kwargs,
            use_listings_cache=False,
        )

    def register_filesystem(self, con) -> None:  # noqa: ANN001 - a duckdb.DuckDBPyConnection
        """Let DuckDB connection ``con`` read ``s3://`` paths of this store (``fsspec_filesystem``), replacing one
        registered earlier: the one way the lake's and the marts' readers reach S3 (DuckDB's httpfs is not used)."""
        if con.filesystem_is_registered("s3"):
            con.unregister_filesystem("s3")
        con.register_filesystem(self.fsspec_filesystem())


class LocalStore:
    """A local folder as the object store of the lake and the marts (``open_store``): files named by their path
    relative to the folder (``/``-separated), each put whole by one rename, so a reader sees the old file or the new
    one.  ``S3Store`` is the same interface on ``s3://bucket/prefix``."""

    is_remote = False

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.dir = Path(folder)
        self.url = str(self.dir)

    def __str__(self) -> str:
        return self.url

    @property
    def arrow_fs(self):  # noqa: ANN201 - pyarrow.fs.LocalFileSystem
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem()

    def key(self, rel: str) -> str:
        """``rel`` as ``arrow_fs`` names it."""
        return str(self.dir / rel) if rel else str(self.dir)

    def path(self, rel: str) -> str:
        """``rel`` as DuckDB reads it."""
        return self.key(rel)

    def is_file(self, rel: str) -> bool:
        return (self.dir / rel).is_file()

    def exists(self, rel: str) -> bool:
        """A file or a folder (a prefix holding files)."""
        return (self.dir / rel).exists()

    def names(self, rel: str = "") -> list[str]:
        """The files directly under ``rel`` (no sub-folders; one listing, no stat per entry)."""
        try:
            with os.scandir(self.dir / rel) as entries:
                return sorted(e.name for e in entries if e.is_file())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_bytes(self, rel: str) -> bytes | None:
        try:
            return (self.dir / rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_text(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        return None if data is None else data.decode("utf-8")

    def put_file(self, local: Path, rel: str) -> None:
        """Move the staged file ``local`` (on this folder's file system) to ``rel``: one rename over any old copy."""
        place = self.dir / rel
        place.parent.mkdir(parents=True, exist_ok=True)
        os.replace(local, place)

    def put_bytes(self, rel: str, data: bytes, tmp_name: str | None = None) -> None:
        """Write ``rel`` whole: a temporary file beside it (``tmp_name``, default a hidden random name), renamed
        over it; the temporary file never outlives a failure."""
        place = self.dir / rel
        place.parent.mkdir(parents=True, exist_ok=True)
        tmp = place.with_name(tmp_name or f".{place.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, place)
        finally:
            tmp.unlink(missing_ok=True)

    def put_text(self, rel: str, text: str) -> None:
        self.put_bytes(rel, text.encode("utf-8"))

    def delete(self, rels: list[str]) -> None:
        """Delete the files and folders ``rels``; a missing one is no error."""
        for rel in rels:
            place = self.dir / rel
            if place.is_dir() and not place.is_symlink():
                shutil.rmtree(place, ignore_errors=True)
            else:
                place.unlink(missing_ok=True)

    def register_filesystem(self, con) -> None:  # noqa: ANN001 - a duckdb.DuckDBPyConnection
        """Nothing to register: DuckDB reads local files."""


class S3Store:
    """``s3://bucket/prefix`` as the object store of the lake and the marts, with ``LocalStore``'s interface.  Reads
    and listings go through pyarrow's S3 file system; uploads through s3fs (one PUT, or a multipart upload that S3
    shows only when completed and that s3fs aborts when a part fails: pyarrow's output stream completes the upload
    when closed, also on an exception, and exposes no abort)."""

    is_remote = True

    def __init__(self, url: str, s3: S3Settings | None = None) -> None:
        self.url = normalise_s3_url(url)
        self.prefix = self.url[len("s3://"):]
        self.s3 = s3 or S3Settings.from_env()
        self.arrow_fs = self.s3.arrow_filesystem()
        self._up = None

    def __str__(self) -> str:
        return self.url

    @property
    def up(self):  # noqa: ANN201 - s3fs.S3FileSystem, made when first used
        if self._up is None:
            self._up = self.s3.fsspec_filesystem()
        return self._up

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if rel else self.prefix

    def path(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def _type(self, rel: str):  # noqa: ANN202 - pyarrow.fs.FileType
        return self.arrow_fs.get_file_info(self.key(rel)).type

    def is_file(self, rel: str) -> bool:
        import pyarrow.fs as pafs

        return self._type(rel) == pafs.FileType.File

    def exists(self, rel: str) -> bool:
        import pyarrow.fs as pafs

        return self._type(rel) != pafs.FileType.NotFound

    def names(self, rel: str = "") -> list[str]:
        import pyarrow.fs as pafs

        infos = self.arrow_fs.get_file_info(pafs.FileSelector(self.key(rel).rstrip("/"), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)

    def read_bytes(self, rel: str) -> bytes | None:
        try:
            with self.arrow_fs.open_input_stream(self.key(rel)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_text(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        return None if data is None else data.decode("utf-8")

    def put_file(self, local: Path, rel: str) -> None:
        """Upload ``local`` to ``rel``; the object appears (or is replaced) only when complete."""
        self.up.put_file(str(local), self.key(rel))

    def put_bytes(self, rel: str, data: bytes, tmp_name: str | None = None) -> None:
        self.up.pipe_file(self.key(rel), data)  # one PUT (no temporary object: ``tmp_name`` is for local folders)

    def put_text(self, rel: str, text: str) -> None:
        self.put_bytes(rel, text.encode("utf-8"))

    def delete(self, rels: list[str]) -> None:
        """Delete the objects ``rels``, and everything under a ``rel`` that is a prefix (batched: up to 1,000 keys
        per request); a missing one is no error.  (s3fs, not pyarrow: pyarrow leaves an empty ``folder/`` marker
        where it deletes a folder's last object.)"""
        keys = []
        for rel in rels:
            if self.is_file(rel):
                keys.append(self.key(rel))
            else:
                keys += list(self.up.find(self.key(rel)))
        if keys:
            self.up.rm(keys)

    def register_filesystem(self, con) -> None:  # noqa: ANN001 - a duckdb.DuckDBPyConnection
        self.s3.register_filesystem(con)


Store = LocalStore | S3Store


def open_store(location: str | os.PathLike[str], s3: S3Settings | None = None) -> Store:
    """The object store at ``location``: ``s3://bucket/prefix`` (with ``s3``, default from the environment) or a
    local folder."""
    return S3Store(os.fspath(location), s3) if is_s3_url(location) else LocalStore(location)
