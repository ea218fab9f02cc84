"""Per-trace ingest: one dynamic partition per trace, keyed by the content hash of the file."""


import json
import tempfile
from pathlib import Path

import dagster as dg

from taxbreak.pipeline.defs.resources import BucketResource, LakeResource

TRACES = dg.DynamicPartitionsDefinition(name="traces")
TRACE_INGEST = dg.AssetKey("trace_ingest")


class IngestConfig(dg.Config):
    source: str = ""
    """Bucket-relative name of the file; empty: the source path recorded in the catalogue (retries)."""
    force: bool = False
    """Re-ingest even content already stored or failed before (``taxbreak retry``)."""


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
    from taxbreak.ingest import ingest_file

    key = context.partition_key
    store = lake.get()
    source = config.source
    if not source:
        row = store.catalogue_row(key)
        if row is None:
            raise dg.Failure(f"trace {key[:16]}: no source given and no catalogue row to find it in")
        source = row["source_path"]
        result = ingest_file(source, store, force=config.force, cache_dir=lake.cache_path())
    else:
        b = bucket.get()
        local = b.local_path(source)
        if local is not None:
            result = ingest_file(local, store, force=config.force, cache_dir=lake.cache_path())
        else:  # object storage: download to a temp file named like the object (adapters look at the suffix)
            with tempfile.TemporaryDirectory(prefix="taxbreak-dl-") as tmp:
                dest = Path(tmp) / Path(source).name
                b.download(source, dest)
                result = ingest_file(dest, store, force=config.force, cache_dir=lake.cache_path())
            if result.row is not None and result.status != "unchanged" and result.row["source_path"] != b.describe(
                source
            ):
                result.row["source_path"] = b.describe(source)
                store.write_catalogue_row(result.row)
    status = result.status
    if result.trace_id and result.trace_id != key:
        # The file changed between the sensor's look and this run: the new content went in under its own
        # hash (the sensor registers that partition on its next tick); this partition saw none of it.
        status = "source_changed"
        context.log.warning(f"{source} changed since it was registered: content now {result.trace_id[:16]}")
    if status == "failed":
        context.log.warning(f"trace {key[:16]} ({source}) failed: {result.error}")
    return dg.MaterializeResult(metadata=ingest_metadata(result.row, status, result.error, source))


@dg.asset_check(asset=TRACE_INGEST, description="Every ingested trace stored or explicitly skipped every source "
                "event: event_count + skipped = source_event_count, from the catalogue.")
def ingest_completeness(lake: LakeResource) -> dg.AssetCheckResult:
    rows = [r for r in lake.get().catalogue().to_pylist() if r["status"] == "ingested"]
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
