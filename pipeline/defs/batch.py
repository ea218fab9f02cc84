"""``ingest_batch_job``: ingest many traces in one run, one step per trace, in parallel.

Per-trace work is independent, so under the multiprocess executor (the default for jobs loaded by ``dg dev``
and the daemon) each file is ingested in its own process, and on the Kubernetes / Celery executors in its own
pod / worker (``deploy/``).  Each step reports the ``trace_ingest`` partition it materialised, exactly like a
sensor run does; the tables are then rebuilt for the batch in one run of ``refresh_job`` over the batch's
partitions (registered together, so one range: ``analysis_assets.range_tags``).
"""

import dagster as dg

from taxbreak.pipeline.defs.automation import sweep
from taxbreak.pipeline.defs.ingest_assets import TRACE_INGEST, ingest_source
from taxbreak.pipeline.defs.resources import BucketResource, LakeResource


@dg.op(out=dg.DynamicOut(dict), description="Every settled trace in the bucket not in the catalogue yet "
       "(registered as partitions), one dynamic output each.")
def pending_traces(context: dg.OpExecutionContext, bucket: BucketResource, lake: LakeResource):  # noqa: ANN201
    for p in sweep(bucket, lake, context.instance, log=context.log):
        yield dg.DynamicOutput({"trace_id": p.trace_id, "name": p.name, "partition_key": p.partition_key},
                               mapping_key=p.trace_id[:16])


@dg.op(description="Ingest one trace; reports the trace_ingest partition it materialised.")
def ingest_one(context: dg.OpExecutionContext, item: dict, bucket: BucketResource, lake: LakeResource) -> str:
    key = item.get("partition_key") or item["trace_id"]
    status, meta = ingest_source(bucket, lake, key, item["name"], False, context.log)
    context.log_event(dg.AssetMaterialization(asset_key=TRACE_INGEST, partition=key, metadata=meta))
    return status


@dg.op(description="Count the outcomes.")
def summarise(context: dg.OpExecutionContext, statuses: list[str]) -> dict:
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    context.add_output_metadata({f"traces_{s}": n for s, n in counts.items()})
    return counts


@dg.job(description="Ingest every unseen trace in the bucket, one parallel step per trace.")
def ingest_batch_job() -> None:
    summarise(pending_traces().map(ingest_one).collect())


@dg.definitions
def batch_defs() -> dg.Definitions:
    return dg.Definitions(jobs=[ingest_batch_job])
