"""Run the pipeline in-process, without a daemon: what ``make demo``, the tests and ``taxbreak pipeline`` use.

``tick`` evaluates the bucket sensor once (as the daemon would), registers the partitions it asks for and
executes each requested run in this process; ``run_until_idle`` ticks until the sensor has nothing left.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg


def load_defs() -> dg.Definitions:
    from taxbreak.pipeline.definitions import defs

    return defs()


@dataclass
class TickResult:
    cursor: str | None
    runs: list[dg.ExecuteInProcessResult] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    skip_reason: str | None = None


def execute_request(defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest,
                    job_name: str = "trace_job") -> dg.ExecuteInProcessResult:
    job = defs.resolve_job_def(request.job_name or job_name)
    return job.execute_in_process(
        run_config=request.run_config, instance=instance, partition_key=request.partition_key,
        tags=dict(request.tags), raise_on_error=False,
    )


def evaluate_sensor(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None):  # noqa: ANN201
    """One evaluation of the bucket sensor with the definitions' resources (a SensorExecutionData)."""
    sensor = defs.resolve_sensor_def("bucket_sensor")
    context = dg.build_sensor_context(
        instance=instance, instance_ref=instance.get_ref(), cursor=cursor, definitions=defs,
        resources=dict(defs.resources or {}),
    )
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


def run_pipeline(settle_s: float = 0.0) -> list[TickResult]:
    """Ingest whatever the bucket holds and rebuild the tables, in this process (``make demo``).

    Uses ``$DAGSTER_HOME`` when set (the runs then show in ``dg dev``), else a temporary instance.
    """
    os.environ.setdefault("TAXBREAK_SETTLE_S", str(settle_s))
    defs = load_defs()
    if os.environ.get("DAGSTER_HOME") and Path(os.environ["DAGSTER_HOME"]).is_dir():
        instance = dg.DagsterInstance.get()
        _, ticks = run_until_idle(defs, instance)
        return ticks
    with dg.DagsterInstance.local_temp() as instance:
        _, ticks = run_until_idle(defs, instance)
        return ticks


def ingest_batch_job() -> dg.JobDefinition:
    """The batch job with its resources, for ``dagster.reconstructable`` (multiprocess execution)."""
    return load_defs().resolve_job_def("ingest_batch_job")
