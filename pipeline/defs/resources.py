"""Resources: where the bucket, the lake and the warehouse are.

Every field has an embedded default (``taxbreak.config.Paths``: ``warehouse/inbox``, ``warehouse/lake``,
``warehouse/taxbreak.duckdb``) and an environment override, resolved when the resource is used so the
same definitions run on a laptop, in CI and on a fleet:

| variable | meaning |
| --- | --- |
| ``TAXBREAK_BUCKET`` | local folder or ``s3://bucket/prefix`` (default ``$TAXBREAK_INBOX``) |
| ``TAXBREAK_S3_ENDPOINT_URL`` | S3-compatible endpoint (MinIO, Ceph, moto); AWS_* give the credentials |
| ``TAXBREAK_SETTLE_S`` | seconds a file must be unchanged before the sensor takes it (default 10) |
| ``TAXBREAK_LAKE`` / ``TAXBREAK_WAREHOUSE`` / ``TAXBREAK_CACHE`` | lake root, DuckDB file, adapter cache |

The lake root may be ``s3://bucket/prefix`` too, on the same endpoint and credentials as the bucket unless its
own fields say otherwise; the warehouse and the cache are local files (DuckDB needs a POSIX filesystem).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from taxbreak.config import Paths, S3Settings, is_s3_url, normalise_s3_url
from taxbreak.pipeline.bucket import Bucket, bucket_for_url, open_bucket

if TYPE_CHECKING:
    import duckdb

    from taxbreak.ingest import Lake


class _S3Fields(dg.ConfigurableResource):
    """The object store's endpoint and credentials; unset fields fall back to the environment (``S3Settings``)."""

    endpoint_url: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str | None = None

    def s3(self) -> S3Settings:
        return S3Settings.from_env(endpoint_url=self.endpoint_url, access_key_id=self.access_key_id,
                                   secret_access_key=self.secret_access_key, region=self.region)


class BucketResource(_S3Fields):
    """Where reports are dropped: a local folder or ``s3://bucket/prefix``."""

    url: str | None = None
    settle_s: float | None = None
    max_files_per_tick: int = 200

    def resolved_url(self) -> str:
        return self.url or os.environ.get("TAXBREAK_BUCKET") or str(Paths.from_env().inbox)

    def resolved_settle_s(self) -> float:
        if self.settle_s is not None:
            return self.settle_s
        return float(os.environ.get("TAXBREAK_SETTLE_S") or 10.0)

    def get(self) -> Bucket:
        return open_bucket(self.resolved_url(), self.s3())

    def for_url(self, url: str) -> tuple[Bucket, str]:
        """The bucket of a recorded source path or URL (``taxbreak retry``), with this resource's S3 settings."""
        return bucket_for_url(url, self.s3())


class LakeResource(_S3Fields):
    """The Parquet lake (events partitions + catalogue; a local folder or ``s3://bucket/prefix``) and the
    adapters' cache folder (local)."""

    root: str | None = None
    cache: str | None = None

    def path(self) -> Path | str:
        """The root: a ``Path``, or the ``s3://`` URL as a string."""
        root = self.root or Paths.from_env().lake
        return normalise_s3_url(root) if is_s3_url(root) else Path(root)

    def cache_path(self) -> Path:
        return Path(self.cache) if self.cache else Paths.from_env().cache

    def get(self) -> Lake:
        from taxbreak.ingest import Lake

        root = self.path()
        return Lake(root, s3=self.s3() if isinstance(root, str) else None)


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file, and the exports readers use while a run writes (``<dir>/exports``)."""

    path: str | None = None

    def file(self) -> Path:
        return Path(self.path) if self.path else Paths.from_env().warehouse

    def exports_dir(self) -> Path:
        return self.file().parent / "exports"

    @contextlib.contextmanager
    def writer(
        self, read_only: bool = False, traces: list[str] | None = None,
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """The one connection to the file, under the one writer rule of ``taxbreak.warehouse.writer``.

        DuckDB lets no other process open a file that one process holds read-write, so every step (writers,
        checks, exports) takes the lock; the ``duckdb_writer`` pool (limit 1) keeps steps of concurrent runs
        from queueing on it, and the lock also covers the CLI and a second instance sharing the file.  A writing
        step publishes the readers' snapshot when it ends.
        """
        from taxbreak.warehouse import writer

        with writer(self.file(), read_only=read_only, traces=traces) as con:
            yield con


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={"bucket": BucketResource(), "lake": LakeResource(), "warehouse": WarehouseResource()}
    )
