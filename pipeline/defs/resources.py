"""Resources: where the bucket, the lake and the warehouse are.

Each field is bound in the ``Definitions`` to its environment variable with ``dg.EnvVar`` (resolved when a run
launches; the UI and the run config show the variable's name, never its value, so credentials never appear):

| variable | field | meaning |
| --- | --- | --- |
| ``TAXBREAK_BUCKET`` | ``bucket.url`` | local folder or ``s3://bucket/prefix`` (default: the inbox) |
| ``TAXBREAK_SETTLE_S`` | ``bucket.settle_s`` | seconds a file must be unchanged before the sensor takes it |
| ``TAXBREAK_LAKE`` / ``TAXBREAK_CACHE`` | ``lake.root`` / ``lake.cache`` | lake root, adapter cache |
| ``TAXBREAK_WAREHOUSE`` | ``warehouse.path`` | the DuckDB file |
| ``TAXBREAK_S3_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL``), ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, \
``AWS_DEFAULT_REGION`` | ``endpoint_url``, ``access_key_id``, ``secret_access_key``, ``region`` of both | S3 store |

Only the variables set when the definitions load are bound (``env_bindings``): ``dg.EnvVar`` of an unset variable
fails the launch, and an unset variable must mean the embedded default.  A field left unset (``None``) is resolved
when the resource is used through the settings registry ``taxbreak.config`` (``setting``, ``Paths``,
``S3Settings``: environment, then ``taxbreak.toml``, then the default), the one place each default lives.
The lake root may be ``s3://bucket/prefix`` too, on the same endpoint and credentials as the bucket unless its
own fields say otherwise; the warehouse and the cache are local files (DuckDB needs a POSIX filesystem).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from taxbreak.config import SETTINGS, Paths, setting
from taxbreak.ingest import Lake
from taxbreak.ingest.objects import S3_ENV, S3Settings, is_s3_url, normalise_s3_url
from taxbreak.store.bucket import Bucket, bucket_for_url, open_bucket

if TYPE_CHECKING:
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
    settle_s: str | None = None
    """Seconds, as text (``dg.EnvVar`` binds strings); unset: the ``pipeline.settle_s`` setting."""
    max_files_per_tick: int = 200

    def resolved_url(self) -> str:
        return setting("paths.bucket", option=self.url or None).value or str(Paths.from_env().inbox)

    def resolved_settle_s(self) -> float:
        return float(setting("pipeline.settle_s", option=self.settle_s or None).value)

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
        root = self.path()
        return Lake(root, s3=self.s3() if isinstance(root, str) else None)


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file, and the exports readers use while a run writes (``<dir>/exports``)."""

    path: str | None = None

    def file(self) -> Path:
        return Path(self.path) if self.path else Paths.from_env().warehouse

    def exports_dir(self) -> Path:
        return self.file().parent / "exports"


# resource -> field -> the environment variables that configure it (first set wins), from the settings registry
ENV_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "bucket": {"url": (SETTINGS["paths.bucket"].env,), "settle_s": (SETTINGS["pipeline.settle_s"].env,), **S3_ENV},
    "lake": {"root": (SETTINGS["paths.lake"].env,), "cache": (SETTINGS["paths.cache"].env,), **S3_ENV},
    "warehouse": {"path": (SETTINGS["paths.warehouse"].env,)},
}


def env_bindings(resource: str, environ: Mapping[str, str] | None = None) -> dict[str, dg.EnvVar]:
    """``field -> dg.EnvVar(variable)`` for each field of ``resource`` whose variable is set (non-empty) now.

    An unset variable is left unbound: the field stays ``None`` and resolves to the registry's default when used.
    """
    environ = os.environ if environ is None else environ
    out: dict[str, dg.EnvVar] = {}
    for field, names in ENV_FIELDS[resource].items():
        name = next((n for n in names if (environ.get(n) or "").strip()), None)
        if name is not None:
            out[field] = dg.EnvVar(name)
    return out


def configured_resources() -> dict[str, dg.ConfigurableResource]:
    return {"bucket": BucketResource(**env_bindings("bucket")), "lake": LakeResource(**env_bindings("lake")),
            "warehouse": WarehouseResource(**env_bindings("warehouse"))}


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=configured_resources())
