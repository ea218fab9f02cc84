"""Jobs, the bucket sensor and the sweep schedules.

The sensor takes settled files after its cursor (``taxbreak.store.bucket.select_new``), hashes each trace
(a sidecar ``<trace>.meta.json`` stands for its trace), registers unseen hashes as ``traces`` partitions and
requests one ``trace_job`` run per trace: ingest that partition, then rebuild the tables for that trace only.
Content already in the catalogue (ingested or failed) gets no run: a copy of a known file is not a duplicate,
and a failed file waits for a content change or ``taxbreak retry``.  A changed sidecar re-runs its trace: its
catalogue row takes the sidecar (``bucket.apply_sidecar``), then the tables are rebuilt.
"""


import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import duckdb

from taxbreak.pipeline.defs.analysis_assets import ANALYSIS_KEYS, TABLE_SPECS, range_tags
from taxbreak.pipeline.defs.ingest_assets import TRACE_ID_TAG, TRACE_INGEST, TRACES, PartitionIndex, partition_key_for
from taxbreak.pipeline.defs.resources import BucketResource, LakeResource, WarehouseResource
from taxbreak.pipeline.defs.trace_assets import TRACE_ANALYSIS
from taxbreak.pipeline.defs.whatif_assets import WHATIF_KEYS
from taxbreak.store import query
from taxbreak.store.bucket import TICK_MAX_BYTES, Bucket, Cursor, Entry, select_new, sha256_of
from taxbreak.store.query import WarehouseUnavailable, open_readonly

SCHEDULE_CRON = os.environ.get("TAXBREAK_SCHEDULE_CRON", "0 * * * *")

trace_job = dg.define_asset_job(
    "trace_job", selection=dg.AssetSelection.assets(TRACE_INGEST, *ANALYSIS_KEYS, *WHATIF_KEYS, TRACE_ANALYSIS),
    partitions_def=TRACES,
    description="Ingest one trace (a `traces` partition), rebuild the analysis tables for it and record its "
    "`trace_analysis` partition.",
)
refresh_job = dg.define_asset_job(
    "refresh_job", selection=dg.AssetSelection.assets(*ANALYSIS_KEYS, *WHATIF_KEYS), partitions_def=TRACES,
    description="Rebuild the analysis tables for a range of `traces` partitions in one run (every partition: all "
    "traces, what `refresh_tables_schedule` asks for) and re-export the warehouse.",
)


@dataclass(frozen=True)
class Planned:
    trace_id: str
    name: str  # bucket-relative name of the trace file
    reason: str  # "new" or "sidecar"
    run_key: str
    partition_key: str = ""  # the trace's `traces` key (set by with_keys)


def with_keys(planned: list[Planned], index: PartitionIndex) -> tuple[list[Planned], list[str]]:
    """Each planned trace with its partition key: the one already registered for its content (a 64-hex key
    registered before readable keys, or a readable key from an earlier name of the same content), else a new
    readable key ``<file stem>-<12 hex>``; and the new keys to register."""
    out, new_keys = [], []
    for p in planned:
        key = index.key_of(p.trace_id)
        if key is None:
            key = partition_key_for(p.name, p.trace_id)
            new_keys.append(key)
        out.append(replace(p, partition_key=key))
    return out, new_keys


def analysed_traces(warehouse_file: Path) -> set[str]:
    """The trace ids the warehouse holds analysed (``trace_meta``), read as every reader does (the snapshot while a
    writer holds the file); none when there is no warehouse yet."""
    try:
        opened = open_readonly(warehouse_file)
    except (WarehouseUnavailable, duckdb.Error):
        return set()
    try:
        if not query.has_relation(opened.con, "trace_meta"):
            return set()
        return {t for (t,) in opened.con.execute("SELECT trace_id FROM trace_meta").fetchall()}
    finally:
        opened.con.close()


def plan_requests(
    bucket: Bucket, lake, entries: list[Entry], *, has_partition, log=None,  # noqa: ANN001
    analysed: Callable[[], set[str]] | None = None,
) -> list[Planned]:
    """Decide which entries need a run; never raises for one bad file (it is logged and skipped).

    Content the catalogue already knows gets no run whatever the Dagster instance remembers (a fresh instance, as
    ``dg dev`` after ``make demo``, has no partitions; issue 29: its first tick re-ran every trace): a failed file
    waits for a content change or ``taxbreak retry``, an ingested one is done when the warehouse holds it analysed
    (``analysed``: the analysed trace ids, asked once, only if a known ingested trace is in the batch). An
    ingested trace the warehouse lacks (ingested by ``taxbreak ingest`` alone, or a warehouse rebuilt without it)
    gets its run; so does one without a partition when no ``analysed`` is given (the old rule)."""
    seen: set[str] | None = None
    by_trace: dict[str, Entry] = {}
    for e in entries:  # a trace and its sidecar in one batch: one run, for the trace
        prev = by_trace.get(e.trace_name)
        if prev is None or (prev.is_sidecar and not e.is_sidecar):
            by_trace[e.trace_name] = e
    planned: dict[str, Planned] = {}
    for trace_name, e in by_trace.items():
        try:
            trace_id = sha256_of(bucket, trace_name)
        except FileNotFoundError:
            if log is not None:
                log.info(f"{bucket.describe(e.name)}: no trace {trace_name} beside this sidecar yet")
            continue
        except OSError as exc:  # unreadable now; recorded by the run once it is readable
            if log is not None:
                log.warning(f"{bucket.describe(trace_name)}: cannot read ({exc}); left for a sweep")
            continue
        if trace_id in planned:
            continue
        row = lake.catalogue_row(trace_id)
        if e.is_sidecar:
            planned[trace_id] = Planned(trace_id, trace_name, "sidecar", f"{trace_id}:meta:{e.changed_ns}")
            continue
        if row is None:
            planned[trace_id] = Planned(trace_id, trace_name, "new", trace_id)
            continue
        if row["status"] == "ingested":
            if analysed is None:
                done = has_partition(trace_id)
            else:
                if seen is None:
                    seen = analysed()
                done = trace_id in seen
            if not done:
                planned[trace_id] = Planned(trace_id, trace_name, "new", trace_id)
                continue
        if log is not None:
            what = "analysed" if row["status"] == "ingested" else row["status"]
            log.info(f"{bucket.describe(trace_name)}: content {trace_id[:16]} already {what}; no run")
    return list(planned.values())


def _run_request(p: Planned) -> dg.RunRequest:
    # A changed sidecar is recorded in its trace's catalogue row (events not read again); the tables follow.
    config = {"source": p.name, "force": False, "sidecar": p.reason == "sidecar"}
    return dg.RunRequest(
        run_key=p.run_key, partition_key=p.partition_key or p.trace_id,
        run_config={"ops": {"trace_ingest": {"config": config}}},
        # the runs list shows the tags beside the partition: the file, and the full trace id the steps analyse
        tags={"taxbreak/source": p.name, "taxbreak/reason": p.reason, TRACE_ID_TAG: p.trace_id},
    )


@dg.sensor(job=trace_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="New or changed files in the bucket (traces and sidecars) -> partitions and trace_job runs.")
def bucket_sensor(context: dg.SensorEvaluationContext, bucket: BucketResource, lake: LakeResource,
                  warehouse: WarehouseResource) -> dg.SensorResult:
    b = bucket.get()
    cursor = Cursor.loads(context.cursor)
    batch, new_cursor, waiting = select_new(
        b.list(), cursor, now_ns=time.time_ns(), settle_s=bucket.resolved_settle_s(),
        max_files=bucket.max_files_per_tick, max_bytes=TICK_MAX_BYTES,  # bounded hashing per tick
    )
    # one query per tick
    known = PartitionIndex(context.instance.get_dynamic_partitions(TRACES.name) if batch else [])
    planned = plan_requests(b, lake.get(), batch, log=context.log, has_partition=known.__contains__,
                            analysed=lambda: analysed_traces(warehouse.file()))
    planned, new_keys = with_keys(planned, known)
    skip = None
    if not planned:
        skip = f"{len(batch)} settled file(s), nothing new" + (f"; {waiting} still settling" if waiting else "")
    return dg.SensorResult(
        run_requests=[_run_request(p) for p in planned], cursor=new_cursor.dumps(), skip_reason=skip,
        dynamic_partitions_requests=[TRACES.build_add_request(new_keys)] if new_keys else [],
    )


def sweep(bucket: BucketResource, lake: LakeResource, instance: dg.DagsterInstance, log=None,  # noqa: ANN001
          warehouse: WarehouseResource | None = None) -> list[Planned]:
    """Every settled trace in the bucket not yet in the catalogue (known files are recognised by path,
    size and time without re-hashing); registers their partitions. With ``warehouse``, a copy of known content
    gets a run only when it is not analysed there (``plan_requests``)."""
    b = bucket.get()
    store = lake.get()
    known = {
        r["source_path"]: r for r in store.catalogue().select(
            ["source_path", "file_bytes", "ingested_at_ns", "trace_id"]).to_pylist()
    }
    entries, _, _ = select_new(b.list(), Cursor(), now_ns=time.time_ns(), settle_s=bucket.resolved_settle_s(),
                               max_files=1 << 62)
    todo = []
    for e in entries:
        if e.is_sidecar:
            continue  # sidecar changes are the sensor's; a sweep looks for unseen traces
        row = known.get(b.describe(e.name))
        if row and row["file_bytes"] == e.size_bytes and row["ingested_at_ns"] >= e.changed_ns:
            continue
        todo.append(e)
    known_keys = PartitionIndex(instance.get_dynamic_partitions(TRACES.name) if todo else [])
    planned = plan_requests(b, store, todo, log=log, has_partition=known_keys.__contains__,
                            analysed=None if warehouse is None else lambda: analysed_traces(warehouse.file()))
    planned, new_keys = with_keys(planned, known_keys)
    if new_keys:
        instance.add_dynamic_partitions(TRACES.name, new_keys)
    return planned


@dg.schedule(job=trace_job, cron_schedule=SCHEDULE_CRON, default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Sweep the whole bucket (for deployments without the sensor): a run per unseen trace. "
             "Cron from $TAXBREAK_SCHEDULE_CRON (default hourly).")
def bucket_sweep_schedule(context: dg.ScheduleEvaluationContext, bucket: BucketResource, lake: LakeResource,  # noqa: ANN201
                          warehouse: WarehouseResource):
    planned = sweep(bucket, lake, context.instance, log=context.log, warehouse=warehouse)
    if not planned:
        return dg.SkipReason("no unseen traces in the bucket")
    return [_run_request(p) for p in planned]


def code_versions() -> dict[str, str]:
    """Every analysis table's code version (its SQL, the run-local SQL it reads, the settings it reads)."""
    return {s.key.to_user_string(): s.code_version or "" for s in TABLE_SPECS}


def code_versions_key(current: dict[str, str]) -> str:
    """One hash of every table's code version: the refresh for it is requested once (it is the run key)."""
    return hashlib.sha256(json.dumps(current, sort_keys=True).encode()).hexdigest()[:16]


@dg.schedule(job=refresh_job, cron_schedule=SCHEDULE_CRON, name="refresh_tables_schedule",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Rebuild every analysis table for all traces (one run over every `traces` partition), only "
             "when a table's code version (its SQL, what it reads, the settings) changed since the last refresh: new "
             "traces are the sensor's runs, so an unchanged code location recomputes nothing (same cron as the sweep).")
def refresh_schedule(context: dg.ScheduleEvaluationContext):  # noqa: ANN201
    key = code_versions_key(code_versions())
    done = context.instance.get_run_records(
        dg.RunsFilter(job_name=refresh_job.name, tags={"taxbreak/code_versions": key}), limit=1)
    if done:
        return dg.SkipReason(f"code versions {key} already refreshed: nothing to recompute")
    keys = context.instance.get_dynamic_partitions(TRACES.name)
    if not keys:
        return dg.SkipReason("no trace registered: nothing to refresh")
    # one run over every partition (first..last key): the tables' step is one step for all traces (its backfill
    # policy is a single run); run key = the code versions: the daemon never launches a second run for the same code
    return dg.RunRequest(run_key=f"code:{key}", tags={"taxbreak/code_versions": key, **range_tags(keys)})


@dg.definitions
def automation_defs() -> dg.Definitions:
    return dg.Definitions(jobs=[trace_job, refresh_job], sensors=[bucket_sensor],
                          schedules=[bucket_sweep_schedule, refresh_schedule])
