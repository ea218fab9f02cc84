"""Run the pipeline in-process, without a daemon: what ``make demo``, the tests and ``taxbreak pipeline`` use.

``tick`` evaluates the bucket sensor once (as the daemon would), registers the partitions it asks for and
executes each requested run in this process; ``run_until_idle`` ticks until the sensor has nothing left.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from taxbreak.config import Paths
from taxbreak.ingest import IngestResult, Lake, file_sha256, iter_trace_files
from taxbreak.pipeline.definitions import defs
from taxbreak.pipeline.defs.ingest_assets import TRACE_ID_TAG

if TYPE_CHECKING:
    from taxbreak.ingest import IngestResult


def load_defs() -> dg.Definitions:
    return defs()


@dataclass
class TickResult:
    cursor: str | None
    runs: list[dg.ExecuteInProcessResult] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)  # `traces` keys: `<file stem>-<12 hex>` (or 64 hex)
    trace_ids: list[str] = field(default_factory=list)  # the full trace id of each run, in the same order
    skip_reason: str | None = None


def execute_request(defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest,
                    job_name: str = "trace_job") -> dg.ExecuteInProcessResult:
    job = defs.resolve_job_def(request.job_name or job_name)
    level = os.environ.get("TAXBREAK_LOG_LEVEL", "WARNING")  # the console logger; the instance keeps everything
    run_config = {**dict(request.run_config or {}), "loggers": {"console": {"config": {"log_level": level}}}}
    return job.execute_in_process(
        run_config=run_config, instance=instance, partition_key=request.partition_key,
        tags=dict(request.tags), raise_on_error=False,
    )


def evaluate_sensor(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None):  # noqa: ANN201
    """One evaluation of the bucket sensor with the definitions' resources (a SensorExecutionData)."""
    sensor = defs.resolve_sensor_def("bucket_sensor")
    # Closed here, not when collected: the context enters an instance (from the ref) that sets Dagster's
    # current defs-state storage, and a late close restores a stale one into whatever runs at that moment.
    with dg.build_sensor_context(
        instance=instance, instance_ref=instance.get_ref(), cursor=cursor, definitions=defs,
        resources=dict(defs.resources or {}),
    ) as context:
        return sensor.evaluate_tick(context)


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None) -> TickResult:
    data = evaluate_sensor(defs, instance, cursor)
    for req in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    seen: set[str] = set()
    out = TickResult(cursor=data.cursor, skip_reason=data.skip_message)
    for request in data.run_requests or []:
        if request.run_key in seen:  # the daemon's run-key dedupe, within one tick
            continue
        seen.add(request.run_key or "")
        out.runs.append(execute_request(defs, instance, request))
        out.partition_keys.append(request.partition_key or "")
        out.trace_ids.append(request.tags.get(TRACE_ID_TAG) or request.partition_key or "")
    return out


def run_until_idle(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None,
                   max_ticks: int = 100) -> tuple[str | None, list[TickResult]]:
    ticks = []
    for _ in range(max_ticks):
        t = tick(defs, instance, cursor)
        ticks.append(t)
        cursor = t.cursor
        if not t.runs:
            break
    return cursor, ticks


_JOBS: dict[tuple[str, str], dg.JobDefinition] = {}  # (job, environment it was built under) -> job


def _job(name: str) -> dg.JobDefinition:
    """The job with its resources, built once per process (and per environment: the definitions read it).
    Building it takes seconds (the definitions, then the job's asset graph), which every step process of a
    multiprocess run pays again unless the forkserver built it first (``taxbreak.pipeline.preload``)."""
    key = (name, repr(sorted(os.environ.items())))
    if key not in _JOBS:
        _JOBS[key] = load_defs().resolve_job_def(name)
    return _JOBS[key]


def warm() -> None:
    """Build the jobs ``dagster.reconstructable`` asks for below (``taxbreak.pipeline.preload`` calls it)."""
    for name in ("ingest_batch_job", "trace_job", "refresh_job"):
        _job(name)


def ingest_batch_job() -> dg.JobDefinition:
    """The batch job with its resources, for ``dagster.reconstructable`` (multiprocess execution)."""
    return _job("ingest_batch_job")


def trace_job() -> dg.JobDefinition:
    """The per-trace job with its resources, for ``dagster.reconstructable``."""
    return _job("trace_job")


def refresh_job() -> dg.JobDefinition:
    """The refresh job (every table for every trace) with its resources, for ``dagster.reconstructable``."""
    return _job("refresh_job")


def run_inbox_pipeline(paths: Paths | None = None, settle_s: float = 0.0) -> list[IngestResult]:
    """``make demo``: the bucket sensor and its runs, in this process, over ``paths`` (default from the
    environment); returns one IngestResult per trace file in the inbox ('ingested' when a run of this call
    read it, 'unchanged' when the lake already had it, 'failed' with the recorded reason).

    Uses the instance at ``$DAGSTER_HOME`` when set (the runs then show in ``dg dev``), else a temporary one.
    """

    paths = paths or Paths.from_env()
    lake = Lake(paths.lake)
    # A fresh instance knows no partitions, so its sensor re-runs known content (the ingest is then a no-op):
    # what the lake held before is reported as unchanged.
    known_before = {r["trace_id"] for r in lake.catalogue().to_pylist() if r["status"] == "ingested"}
    env = {
        "TAXBREAK_INBOX": str(paths.inbox), "TAXBREAK_LAKE": str(paths.lake),
        "TAXBREAK_WAREHOUSE": str(paths.warehouse), "TAXBREAK_CACHE": str(paths.cache),
        "TAXBREAK_BUCKET": str(paths.inbox), "TAXBREAK_SETTLE_S": str(settle_s),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        home = os.environ.get("DAGSTER_HOME")
        with (dg.DagsterInstance.get() if home and Path(home).is_dir()
              else dg.DagsterInstance.local_temp(overrides={"telemetry": {"enabled": False}})) as instance:
            _, ticks = run_until_idle(load_defs(), instance)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ran = {k for t in ticks for k in t.trace_ids} - known_before
    out: list[IngestResult] = []
    for f in iter_trace_files([paths.inbox]):
        trace_id = file_sha256(f)
        row = lake.catalogue_row(trace_id)
        if row is None:
            out.append(IngestResult(str(f), trace_id, "failed", None, f"{f}: not picked up (still being written?)"))
        elif row["status"] in ("failed", "not_a_trace"):
            out.append(IngestResult(str(f), trace_id, row["status"], row, row["error"]))
        else:
            out.append(IngestResult(str(f), trace_id, "ingested" if trace_id in ran else "unchanged", row))
    return out

