"""Where things live. Every path has an embedded default and an environment override.

The lake may be an ``s3://bucket/prefix`` URL (``TAXBREAK_LAKE``); ``Paths.lake`` then holds it as a ``Path``
(``s3:/bucket/prefix``, one slash), which ``taxbreak.ingest.Lake`` accepts and turns back into the URL.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    lake: Path
    warehouse: Path
    inbox: Path
    cache: Path

    @classmethod
    def from_env(cls, base: Path | None = None) -> Paths:
        root = Path(base) if base is not None else Path(os.environ.get("TAXBREAK_HOME", "warehouse"))
        return cls(
            lake=Path(os.environ.get("TAXBREAK_LAKE", root / "lake")),
            warehouse=Path(os.environ.get("TAXBREAK_WAREHOUSE", root / "taxbreak.duckdb")),
            inbox=Path(os.environ.get("TAXBREAK_INBOX", root / "inbox")),
            cache=Path(os.environ.get("TAXBREAK_CACHE", root / "cache")),
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Paths:
        """The environment's paths, with a command's ``--lake`` / ``--warehouse`` options applied."""
        paths = cls.from_env()
        if getattr(args, "lake", None):
            paths = replace(paths, lake=Path(args.lake))
        if getattr(args, "warehouse", None):
            paths = replace(paths, warehouse=Path(args.warehouse))
        return paths


def add_path_args(p: argparse.ArgumentParser, *, lake: bool = True, warehouse: bool = True) -> None:
    """The ``--lake`` / ``--warehouse`` options every subcommand that touches them shares."""
    if lake:
        p.add_argument("--lake", help="lake root (default $TAXBREAK_LAKE or warehouse/lake)")
    if warehouse:
        p.add_argument("--warehouse", help="DuckDB file (default $TAXBREAK_WAREHOUSE or warehouse/taxbreak.duckdb)")


S3_ENDPOINT_ENV = ("TAXBREAK_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")


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
        return cls(
            endpoint_url=endpoint_url or next((v for v in map(_env, S3_ENDPOINT_ENV) if v), None),
            access_key_id=access_key_id or _env("AWS_ACCESS_KEY_ID"),
            secret_access_key=secret_access_key or _env("AWS_SECRET_ACCESS_KEY"),
            region=region or _env("AWS_DEFAULT_REGION"),
        )

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
