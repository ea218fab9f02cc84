"""``dagster-dask``'s executor, with the two defects that stop it running these jobs fixed (issue 12).

``dagster_dask.DaskExecutor`` (0.29.27) hands each step's arguments to ``Client.submit`` as they are; Dask walks
tuples among a task's arguments looking for nested tasks, and Dagster's ``@record`` values (a run's
``RunOpConcurrency``, which every run in a pool has) refuse iteration, so every step fails before it starts.
It also names each task ``<job>.<step>``, so two runs of the same job on one cluster (the sensor's per-trace runs)
share task keys and the second run's steps are taken for the first's (dagster-io/dagster#21418).  This executor
submits the arguments as one pickled payload and names tasks ``<job>.<step>.<run id>``; everything else (the
config schema: ``cluster: {local: {...}}`` or ``cluster: {existing: {address: ...}}``, step ordering, the events
returned to the run) is dagster-dask's.  Dynamic outputs (``ingest_batch_job``'s fan-out) are not supported by
dagster-dask's up-front plan: run that job on the multiprocess, Kubernetes or Celery executor.
"""

from __future__ import annotations

import pickle
import signal
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
import dask.distributed
from dagster import _check as check
from dagster._core.errors import raise_execution_interrupts
from dagster._core.events import DagsterEvent
from dagster._utils import iterate_with_context
from dagster_dask.executor import DaskExecutor, dask_executor, get_dask_resource_requirements, query_on_dask_worker


def _run_step(dependencies: Any, payload: bytes) -> Sequence[DagsterEvent]:  # noqa: ANN401 - Dask's results
    """On a worker: the step named in ``payload`` (dagster-dask's ``query_on_dask_worker``)."""
    return query_on_dask_worker(dependencies, *pickle.loads(payload))  # noqa: S301 - our own payload


class DefaultSigterm(dask.distributed.WorkerPlugin):
    """Dask's worker processes run with SIGINT and SIGTERM ignored, and the processes a step starts inherit that:
    Dagster's compute-log ``tail -F`` and its orphan watcher then ignore the SIGTERM that ends them, and every step
    waited 2 x 30 s (Dagster's ``communicate`` timeouts) after it had finished.  ``setup`` runs on the worker's event
    loop, in its main thread, where a signal disposition can be set: SIGTERM back to the default there."""

    idempotent = True  # one registration per worker, however many runs register it

    def setup(self, worker: Any) -> None:  # noqa: ANN401 - distributed.Worker
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class TaxbreakDaskExecutor(DaskExecutor):
    def execute(self, plan_context, execution_plan) -> Iterator[DagsterEvent]:  # noqa: ANN001
        if self.cluster_type not in ("local", "existing"):  # the job-queue clusters: dagster-dask's own code
            yield from super().execute(plan_context, execution_plan)
            return
        check.invariant(plan_context.instance.is_persistent, "Dask execution requires a persistent DagsterInstance")
        job_name = plan_context.job_name
        run_id = plan_context.dagster_run.run_id
        instance_ref = plan_context.instance.get_ref()
        if self.cluster_type == "existing":
            cluster: Any = self.cluster_configuration["address"]
        else:
            cluster = dask.distributed.LocalCluster(**self.build_dict(job_name))
        try:
            with dask.distributed.Client(cluster) as client:
                client.register_plugin(DefaultSigterm(), name="taxbreak-default-sigterm")
                by_step: dict[str, Any] = {}
                futures = []
                for level in execution_plan.get_steps_to_execute_by_level():
                    for step in level:
                        # Dask runs a step once the futures of the steps it reads are done
                        deps = [by_step[k] for inp in step.step_inputs for k in inp.dependency_keys]
                        payload = pickle.dumps((plan_context.reconstructable_job, plan_context.dagster_run,
                                                plan_context.run_config, [step.key], instance_ref,
                                                execution_plan.known_state))
                        future = client.submit(_run_step, deps, payload, key=f"{job_name}.{step.key}.{run_id}",
                                               pure=False, resources=get_dask_resource_requirements(step.tags))
                        by_step[step.key] = future
                        futures.append(future)
                done = dask.distributed.as_completed(futures, with_results=True)
                for _future, events in iterate_with_context(raise_execution_interrupts, done):
                    for event in events:
                        yield check.inst(event, DagsterEvent)
        finally:
            if not isinstance(cluster, str):
                cluster.close()


@dg.executor(name="dask", config_schema=dask_executor.config_schema,
             requirements=dg.multiple_process_executor_requirements())
def taxbreak_dask_executor(init_context: dg.InitExecutorContext) -> TaxbreakDaskExecutor:
    ((cluster_type, cluster_configuration),) = init_context.executor_config["cluster"].items()
    return TaxbreakDaskExecutor(cluster_type, cluster_configuration)
