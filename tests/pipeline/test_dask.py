"""The same jobs on a distributed engine: a real ``distributed.LocalCluster`` (scheduler and two worker processes on
loopback) runs the batch ingest (one task per trace) and then the tables for every trace, through
``dagster-dask``'s executor with the cluster's scheduler address, as a deployment would with its own cluster."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from .conftest import NSIGHT_KERNELS, write_kineto, write_nsight


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_jobs_run_on_a_dask_cluster(env: dict[str, Path], instance: dg.DagsterInstance,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed import Client, LocalCluster

    from taxbreak.pipeline import local

    monkeypatch.setenv("TAXBREAK_EXECUTOR", "dask")  # the code location's executor (pipeline/defs/executor.py)
    inbox = env["inbox"]
    files = [write_kineto(inbox / "a.json", 2), write_kineto(inbox / "b.json", 3, base_us=77.0),
             write_nsight(inbox / "n.sqlite")]
    # workers are processes started now: they inherit the resources' environment set by the env fixture
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        worker_pids = set(client.run(os.getpid).values())
        assert len(worker_pids) == 2 and os.getpid() not in worker_pids
        execution = {"execution": {"config": {"cluster": {"existing": {"address": cluster.scheduler_address}}}}}
        # one trace_job run per trace (ingest, tables, blocking checks, marts, report, what-if), as the sensor asks;
        # (dagster-dask plans every step up front, so the batch job's dynamic fan-out is not for it: see
        # docs/orchestration.md)
        instance.add_dynamic_partitions("traces", [_sha(f) for f in files])
        for f in files:
            with dg.execute_job(dg.reconstructable(local.trace_job), instance=instance, tags={
                    "dagster/partition": _sha(f)}, run_config={
                    **execution, "ops": {"trace_ingest": {"config": {"source": f.name}}}}) as run:
                assert run.success
                events = [e.dagster_event for e in instance.all_logs(run.run_id) if e.dagster_event]
                steps = {e.step_key: e.pid for e in events if e.is_step_start}
                # every step ran in a worker process of the cluster, not in this one
                assert {"trace_ingest", "analysis_tables"} <= set(steps) and set(steps.values()) <= worker_pids
        # Dask's workers ignore SIGTERM and the processes a step starts inherit that: Dagster's compute-log tail
        # then outlived its SIGTERM and every step waited 60 s after it ended; the executor restores the default
        sigterm = client.run(lambda: int(signal.getsignal(signal.SIGTERM)))
        assert set(sigterm.values()) == {int(signal.SIG_DFL)}
        from taxbreak.pipeline.defs.analysis_assets import range_tags

        # the refresh: one run over every `traces` partition (as refresh_tables_schedule asks for it)
        with dg.execute_job(dg.reconstructable(local.refresh_job), instance=instance, run_config=execution,
                            tags=range_tags(instance.get_dynamic_partitions("traces"))) as refresh:
            assert refresh.success
            events = [e.dagster_event for e in instance.all_logs(refresh.run_id) if e.dagster_event]
            assert {e.pid for e in events if e.is_step_start} <= worker_pids
            check = dg.DagsterEventType.ASSET_CHECK_EVALUATION
            checks = [e.event_specific_data for e in events if e.event_type == check]
            # the seven invariants and the regression warning (issue 28: two runs, no baseline, nothing to warn)
            assert len(checks) == 8 and all(c.passed for c in checks)
            assert "no_regression_in_landed_runs" in {c.check_name for c in checks}
    a, b, n = (_sha(f) for f in files)
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        kernels = dict(con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall())
    assert kernels == {a: 2, b: 3, n: NSIGHT_KERNELS}
    # and the readers' copy: one partition per trace, read through the snapshot's view
    marts = env["warehouse"].parent / "marts" / "kernel_taxbreak"
    assert sorted(p.name for p in marts.glob("trace_id=*")) == sorted(f"trace_id={t}" for t in (a, b, n))
    snap = duckdb.connect(str(env["warehouse"].parent / "exports" / "snapshot.duckdb"), read_only=True)
    assert snap.execute("SELECT count(*) FROM kernel_taxbreak").fetchone()[0] == 2 + 3 + NSIGHT_KERNELS
    snap.close()
