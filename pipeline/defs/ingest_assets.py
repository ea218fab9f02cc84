"""Per-trace ingest: one dynamic partition per trace, keyed so a person recognises the file.

A partition key is ``<file stem>-<first 12 hex of the trace id>`` (``partition_key_for``: ``good.pt.trace-3f2a…``),
the file name a person dropped beside the content hash that identifies the trace; the full trace id (the sha256
of the file, the lake's key) travels with the run as the tag ``taxbreak/trace_id``. Keys registered before, the
64-hex trace id itself, keep working: ``trace_id_of_key`` maps either form to the trace id, a readable key through
the lake catalogue (its file names are the trace ids) when the run carries no tag (a materialisation from the UI).
"""


import json
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import dagster as dg

from taxbreak.ingest import trace_suffixes
from taxbreak.pipeline.defs.resources import BucketResource, LakeResource
from taxbreak.store.bucket import apply_sidecar, ingest_from

TRACES = dg.DynamicPartitionsDefinition(name="traces")
TRACE_INGEST = dg.AssetKey("trace_ingest")
TRACE_ID_TAG = "taxbreak/trace_id"  # run tag: the full trace id of the run's partition
KEY_HEX_CHARS = 12  # hex digits of the trace id in a readable key: 48 bits, a clash between two traces ~N^2 / 2^49
KEY_STEM_CHARS = 48
_HEX64 = re.compile(r"[0-9a-f]{64}")
_READABLE = re.compile(rf"-([0-9a-f]{{{KEY_HEX_CHARS}}})$")


def partition_key_for(name: str, trace_id: str) -> str:
    """``<sanitised file stem>-<first 12 hex of trace_id>`` for the bucket-relative file ``name``.

    The stem is the base name without its trace suffix (``.json``, ``.json.gz``, ``.nsys-rep`` ...), letters, digits,
    ``_``, ``-`` and single dots kept, anything else ``_``, at most 48 characters (Dagster refuses ``...`` in keys).
    """

    base = name.rsplit("/", 1)[-1]
    for suffix in sorted(trace_suffixes(), key=len, reverse=True):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
            break
    stem = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._-]+", "_", base))[:KEY_STEM_CHARS].strip("._-")
    return f"{stem or 'trace'}-{trace_id[:KEY_HEX_CHARS]}"


def key_matches(key: str, trace_id: str) -> bool:
    """Whether partition ``key`` (readable or 64-hex) names the content ``trace_id``."""
    if _HEX64.fullmatch(key):
        return key == trace_id
    m = _READABLE.search(key)
    return m is not None and trace_id.startswith(m.group(1))


class PartitionIndex:
    """The registered ``traces`` keys, looked up by trace id (one instance query per sensor tick)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = set(keys)
        self._by_prefix: dict[str, str] = {}
        for k in self.keys:
            m = _READABLE.search(k)
            if m is not None and not _HEX64.fullmatch(k):
                self._by_prefix.setdefault(m.group(1), k)

    def key_of(self, trace_id: str) -> str | None:
        """The key registered for ``trace_id``: its 64-hex id (registered before readable keys) or its readable key."""
        if trace_id in self.keys:
            return trace_id
        return self._by_prefix.get(trace_id[:KEY_HEX_CHARS])

    def __contains__(self, trace_id: str) -> bool:
        return self.key_of(trace_id) is not None


def trace_id_of_key(key: str, lake) -> str | None:  # noqa: ANN001 - taxbreak.ingest.Lake (or a callable giving one)
    """The trace id partition ``key`` names: the key itself when it is 64 hex, else the one catalogue file whose name
    starts with the key's 12 hex (None when the catalogue has none; an error when it has several)."""
    if _HEX64.fullmatch(key):
        return key
    m = _READABLE.search(key)
    if m is None:
        return None
    store = lake() if callable(lake) else lake
    found = sorted({p.name.removesuffix(".parquet") for p in store.catalogue_paths() if p.name.startswith(m.group(1))})
    if len(found) > 1:
        raise dg.Failure(f"partition {key}: {len(found)} traces in the catalogue start with {m.group(1)} "
                         f"({', '.join(t[:16] for t in found)}); run it by its 64-hex trace id")
    return found[0] if found else None


def trace_ids_of_keys(keys: Iterable[str], lake) -> list[str]:  # noqa: ANN001 - taxbreak.ingest.Lake
    """The trace ids partition ``keys`` name, like ``trace_id_of_key`` but with one catalogue listing for all (a
    partition range of a refresh); keys of traces not in the catalogue are left out."""
    by_prefix: dict[str, list[str]] = {}
    for p in lake.catalogue_paths():
        tid = p.name.removesuffix(".parquet")
        by_prefix.setdefault(tid[:KEY_HEX_CHARS], []).append(tid)
    out: set[str] = set()
    for key in keys:
        m = _READABLE.search(key)
        found = [key] if _HEX64.fullmatch(key) else by_prefix.get(m.group(1), []) if m else []
        if len(found) > 1:
            raise dg.Failure(f"partition {key}: {len(found)} traces in the catalogue start with {m.group(1)} "
                             f"({', '.join(t[:16] for t in sorted(found))}); run it by its 64-hex trace id")
        out.update(found)
    return sorted(out)


def run_trace_id(tags: Mapping[str, str], lake: Callable[[], object]) -> str | None:
    """The trace id of a run's partition: the ``taxbreak/trace_id`` tag, else mapped from ``dagster/partition``
    (``lake`` is only called when the catalogue must be read); None for a run without a partition."""
    if tags.get(TRACE_ID_TAG):
        return tags[TRACE_ID_TAG]
    key = tags.get("dagster/partition")
    if not key:
        return None
    trace_id = trace_id_of_key(key, lake)
    if trace_id is None:
        raise dg.Failure(f"partition {key}: no trace in the catalogue starts with {key[-KEY_HEX_CHARS:]} "
                         "(not ingested yet: run it from the bucket sensor, or give `source`)")
    return trace_id


class IngestConfig(dg.Config):
    source: str = ""
    """Bucket-relative name of the file; empty: the source path recorded in the catalogue (retries)."""
    force: bool = False
    """Re-ingest even content already stored or failed before (``taxbreak retry``)."""
    sidecar: bool = False
    """The trace's sidecar changed: record it in the catalogue row without reading the events again."""


def ingest_metadata(row: dict | None, status: str, error: str | None, source: str) -> dict[str, dg.MetadataValue]:
    row = row or {}
    skipped = json.loads(row.get("skipped_counts_json") or "{}")
    meta: dict[str, object] = {
        "status": status,
        "trace_id": row.get("trace_id") or "",
        "source": source,
        "file_name": row.get("file_name") or Path(source).name,
        "source_format": row.get("source_format") or "",
        "event_count": int(row.get("event_count") or 0),
        "skipped_event_count": int(sum(skipped.values())),
        "source_event_count": int(row.get("source_event_count") or 0),
    }
    if error:
        meta["error"] = dg.MetadataValue.md(f"```\n{error}\n```")
    return meta  # type: ignore[return-value]


def ingest_source(
    bucket: BucketResource, lake: LakeResource, key: str, source: str, force: bool, log,  # noqa: ANN001
    sidecar: bool = False,
) -> tuple[str, dict]:
    """Ingest the bucket object ``source`` registered as partition ``key`` (a readable key or a 64-hex trace id);
    returns (status, metadata).

    An empty ``source`` means the source recorded in the catalogue (retries).
    """
    store = lake.get()
    if source:
        b, name = bucket.get(), source
    else:  # a retry from the UI or the CLI: the path or URL the catalogue recorded
        trace_id = trace_id_of_key(key, store)
        row = store.catalogue_row(trace_id) if trace_id else None
        if row is None:
            raise dg.Failure(f"partition {key}: no source given and no catalogue row to find it in")
        b, name = bucket.for_url(row["source_path"])
        source = row["source_path"]
    if sidecar:
        result = apply_sidecar(b, name, store, cache_dir=lake.cache_path())
    else:
        result = ingest_from(b, name, store, force=force, cache_dir=lake.cache_path())
    status = result.status
    if result.trace_id and not key_matches(key, result.trace_id):
        # The file changed between the sensor's look and this run: the new content went in under its own
        # hash (the sensor registers that partition on its next tick); this partition saw none of it.
        status = "source_changed"
        log.warning(f"{source} changed since it was registered: content now {result.trace_id[:16]}")
    if status == "failed":
        log.warning(f"trace {key[:16]} ({source}) failed: {result.error}")
    meta = ingest_metadata(result.row, status, result.error, source)
    if result.trace_id:
        meta["trace_id"] = result.trace_id  # type: ignore[assignment]
    return status, meta


def single_run_asset(**kwargs: object) -> Callable:
    """``dg.asset`` with the one backfill policy of trace_job's partitioned assets: a single run over a range, the
    policy the analysis tables need for the refresh. One policy, so the job resolves without Dagster's "materializes
    assets with varying BackfillPolicies" warning every run printed (issue 29). The parameter is beta on ``@asset``
    in Dagster 1.13 (not on ``@multi_asset``, which the tables use): that notice is silenced here, for it only."""

    def wrap(fn: Callable) -> dg.AssetsDefinition:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)
            return dg.asset(backfill_policy=dg.BackfillPolicy.single_run(), **kwargs)(fn)

    return wrap


@single_run_asset(
    key=TRACE_INGEST,
    partitions_def=TRACES,
    group_name="ingest",
    kinds={"python", "parquet"},
    description="One trace file read into the Parquet lake (events partition + catalogue row). A file that "
    "fails is recorded as failed with its reason and the asset still materialises (status=failed), so a "
    "bad file never blocks the others; it is retried only when its content changes or on `taxbreak retry`. "
    "A run over a range of partitions (a backfill) ingests each from the source its catalogue row records.",
)
def trace_ingest(
    context: dg.AssetExecutionContext, config: IngestConfig, bucket: BucketResource, lake: LakeResource
) -> dg.MaterializeResult:
    keys = context.partition_keys  # one for the sensor's and the schedule's runs; a range for a backfill
    if len(keys) == 1:
        status, meta = ingest_source(bucket, lake, keys[0], config.source, config.force, context.log,
                                     sidecar=config.sidecar)
        return dg.MaterializeResult(metadata=meta)
    if config.source:
        raise dg.Failure(f"config source {config.source!r} names one file, and the run covers {len(keys)} partitions: "
                         "a range takes each partition's source from the catalogue")
    statuses: dict[str, int] = {}
    for key in keys:
        status, _meta = ingest_source(bucket, lake, key, "", config.force, context.log, sidecar=config.sidecar)
        statuses[status] = statuses.get(status, 0) + 1
    return dg.MaterializeResult(metadata={"partitions": len(keys), **{f"status_{k}": n for k, n in
                                                                        sorted(statuses.items())}})


@dg.asset_check(asset=TRACE_INGEST, description="Every ingested trace stored or explicitly skipped every source "
                "event: event_count + skipped = source_event_count, from the catalogue.")
def ingest_completeness(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.get()
    key = run_trace_id(context.run.tags, lambda: store)  # a per-trace run checks its trace only: flat cost per trace
    if key:
        row = store.catalogue_row(key)
        rows = [row] if row is not None and row["status"] == "ingested" else []
    else:
        rows = [r for r in store.catalogue().to_pylist() if r["status"] == "ingested"]
    bad = []
    for r in rows:
        skipped = sum(json.loads(r["skipped_counts_json"] or "{}").values())
        if r["source_event_count"] is None or r["event_count"] + skipped != r["source_event_count"]:
            bad.append(f"{r['trace_id'][:16]} {r['file_name']}: {r['event_count']} + {skipped} "
                       f"!= {r['source_event_count']}")
    return dg.AssetCheckResult(
        passed=not bad, metadata={"traces_checked": len(rows), "mismatches": len(bad),
                                  "details": dg.MetadataValue.md("\n".join(f"- {b}" for b in bad) or "none")},
    )
