"""Per-trace ingest: one dynamic partition per trace, keyed by the content hash of the file."""


import json
from pathlib import Path

import dagster as dg

from taxbreak.pipeline.bucket import apply_sidecar, ingest_from
from taxbreak.pipeline.defs.resources import BucketResource, LakeResource

TRACES = dg.DynamicPartitionsDefinition(name="traces")
TRACE_INGEST = dg.AssetKey("trace_ingest")


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
    """Ingest the bucket object ``source`` registered as partition ``key``; returns (status, metadata).

    An empty ``source`` means the source recorded in the catalogue (retries).
    """
    store = lake.get()
    if source:
        b, name = bucket.get(), source
    else:  # a retry from the UI or the CLI: the path or URL the catalogue recorded
        row = store.catalogue_row(key)
        if row is None:
            raise dg.Failure(f"trace {key[:16]}: no source given and no catalogue row to find it in")
        b, name = bucket.for_url(row["source_path"])
        source = row["source_path"]
    if sidecar:
        result = apply_sidecar(b, name, store, cache_dir=lake.cache_path())
    else:
        result = ingest_from(b, name, store, force=force, cache_dir=lake.cache_path())
    status = result.status
    if result.trace_id and result.trace_id != key:
        # The file changed between the sensor's look and this run: the new content went in under its own
        # hash (the sensor registers that partition on its next tick); this partition saw none of it.
        status = "source_changed"
        log.warning(f"{source} changed since it was registered: content now {result.trace_id[:16]}")
    if status == "failed":
        log.warning(f"trace {key[:16]} ({source}) failed: {result.error}")
    return status, ingest_metadata(result.row, status, result.error, source)


@dg.asset(
    key=TRACE_INGEST,
    partitions_def=TRACES,
    group_name="ingest",
    kinds={"python", "parquet"},
    description="One trace file read into the Parquet lake (events partition + catalogue row). A file that "
    "fails is recorded as failed with its reason and the asset still materialises (status=failed), so a "
    "bad file never blocks the others; it is retried only when its content changes or on `taxbreak retry`.",
)
def trace_ingest(
    context: dg.AssetExecutionContext, config: IngestConfig, bucket: BucketResource, lake: LakeResource
) -> dg.MaterializeResult:
    status, meta = ingest_source(bucket, lake, context.partition_key, config.source, config.force, context.log,
                                 sidecar=config.sidecar)
    return dg.MaterializeResult(metadata=meta)



@dg.asset_check(asset=TRACE_INGEST, description="Every ingested trace stored or explicitly skipped every source "
                "event: event_count + skipped = source_event_count, from the catalogue.")
def ingest_completeness(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.get()
    key = context.run.tags.get("dagster/partition")  # a per-trace run checks its trace only: flat cost per trace
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
