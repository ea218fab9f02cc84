"""The object store the lake lives in (a local folder or ``s3://bucket/prefix``): what an S3 URL is and the store's
endpoint and credentials.  Part of the ingest (it imports nothing of taxbreak above ``schemas/``); the callers pass an
``S3Settings`` or let ``S3Settings.from_env`` read the environment variables below."""

from __future__ import annotations

import os
from dataclasses import dataclass

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
