"""The executor, chosen by ``$TAXBREAK_EXECUTOR`` when the code location loads.

``multiprocess`` (default): each step in its own process on this machine.  ``dask``: each step a task on a Dask
cluster (``dagster-dask``, pinned in requirements.lock; two of its defects fixed in
``taxbreak.pipeline.dask_executor``): a ``distributed.LocalCluster`` started by the run, or an
existing scheduler given in run config (``execution: {config: {cluster: {existing: {address: tcp://host:8786}}}}``)
or by ``$TAXBREAK_DASK_SCHEDULER``.  ``k8s``: each step in its own Kubernetes pod (``dagster-k8s``); ``celery``:
each step on a Celery worker (``dagster-celery``).  Those two packages are installed only where they are used
(``deploy/``); asking for one that is missing fails loudly.
"""

import os

import dagster as dg

from taxbreak.pipeline.dask_executor import taxbreak_dask_executor as dask_executor


def executor_from_env() -> dg.ExecutorDefinition:
    kind = os.environ.get("TAXBREAK_EXECUTOR", "multiprocess")
    if kind == "multiprocess":
        return dg.multiprocess_executor
    if kind == "in_process":
        return dg.in_process_executor
    if kind == "dask":
        address = os.environ.get("TAXBREAK_DASK_SCHEDULER")
        if address:  # the cluster the deployment runs; run config can still name another
            return dask_executor.configured({"cluster": {"existing": {"address": address}}}, name="dask_executor")
        return dask_executor
    if kind == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    if kind == "celery":
        from dagster_celery import celery_executor

        return celery_executor
    raise ValueError(f"TAXBREAK_EXECUTOR={kind!r}: expected multiprocess, in_process, dask, k8s or celery")


@dg.definitions
def executor_defs() -> dg.Definitions:
    return dg.Definitions(executor=executor_from_env())
