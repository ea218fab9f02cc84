"""The per-trace analysis tables are `traces` partitions: each table's partitions page shows which traces are
materialised; the cross-trace tables are one unpartitioned step; the refresh is one run over every partition."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import duckdb

from taxbreak.pipeline.local import execute_request, load_defs, tick

from .conftest import write_kineto


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _parts(instance: dg.DagsterInstance, table: str) -> set[str]:
    return set(instance.get_materialized_partitions(dg.AssetKey(table)))


def _steps(instance: dg.DagsterInstance, run: dg.ExecuteInProcessResult) -> set[str]:
    return {e.dagster_event.step_key for e in instance.all_logs(run.run_id)
            if e.dagster_event and e.dagster_event.is_step_start}


def _kernel_meta(run: dg.ExecuteInProcessResult) -> list[dg.AssetMaterialization]:
    return [e.materialization for e in run.get_asset_materialization_events()
            if e.asset_key == dg.AssetKey("kernel_taxbreak")]


def test_partitions_follow_the_traces_and_the_refresh_is_one_run(env: dict[str, Path],
                                                                 instance: dg.DagsterInstance) -> None:
    defs = load_defs()
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("kernel_taxbreak")).partitions_def.name == "traces"
    assert graph.get(dg.AssetKey("launch_floor_measurements")).partitions_def.name == "traces"  # per-trace rows
    assert graph.get(dg.AssetKey("sweep_points")).partitions_def is None  # rows of no single trace
    assert graph.get(dg.AssetKey("kernel_taxbreak")).backfill_policy == dg.BackfillPolicy.single_run()

    a = write_kineto(env["inbox"] / "a.json", 2)
    t1 = tick(defs, instance)
    (key_a,) = t1.partition_keys
    assert t1.runs[0].success and key_a == f"a-{_sha(a)[:12]}"
    # the sensor's run materialised trace a's partition of every per-trace table, and the sweeps once, unpartitioned
    assert _parts(instance, "kernel_taxbreak") == {key_a} == _parts(instance, "taxbreak_by_scope")
    assert [m.partition for m in _kernel_meta(t1.runs[0])] == [key_a]
    assert _kernel_meta(t1.runs[0])[0].metadata["rows_computed"].value == 2
    sweep = instance.get_latest_materialization_event(dg.AssetKey("sweep_points"))
    assert sweep is not None and sweep.run_id == t1.runs[0].run_id and sweep.asset_materialization.partition is None
    assert {"analysis_tables", "cross_trace_tables"} <= _steps(instance, t1.runs[0])

    # a file that fails: its run succeeds, and no table has its partition
    (env["inbox"] / "c.json").write_bytes(b'{"traceEvents": [')
    t2 = tick(defs, instance, t1.cursor)
    (key_c,) = t2.partition_keys
    assert t2.runs[0].success and _parts(instance, "kernel_taxbreak") == {key_a}
    refit = dg.AssetSelection.assets("request_model_fit")
    before = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=refit)
    b = write_kineto(env["inbox"] / "b.json", 3, base_us=77.0)
    t3 = tick(defs, instance, t2.cursor)
    (key_b,) = t3.partition_keys
    assert _parts(instance, "kernel_taxbreak") == {key_a, key_b}
    # the request model's eager condition sees serving_steps updated, not held back by c's partition missing for good
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=refit,
                                              cursor=before.cursor)
    assert after.get_num_requested(dg.AssetKey("request_model_fit")) == 1
    assert instance.get_dynamic_partitions("traces") == [key_a, key_c, key_b]

    # the refresh schedule: one run over every partition, first..last registered key; then nothing to do
    schedule = defs.resolve_schedule_def("refresh_tables_schedule")
    with dg.build_schedule_context(instance=instance) as ctx:
        (request,) = schedule.evaluate_tick(ctx).run_requests
    assert request.tags["dagster/asset_partition_range_start"] == key_a
    assert request.tags["dagster/asset_partition_range_end"] == key_b
    run = execute_request(defs, instance, request, "refresh_job")
    assert run.success
    # one step for every trace's tables; every partition Dagster records was recomputed (the failed file's with no
    # rows: a range run records every key of its range)
    assert {m.partition for m in _kernel_meta(run)} == {key_a, key_c, key_b}
    assert {m.metadata["scope"].value for m in _kernel_meta(run)} == {"all traces"}
    assert {m.metadata["dagster/row_count"].value for m in _kernel_meta(run)} == {2 + 3}
    assert _steps(instance, run) == {"analysis_tables", "cross_trace_tables", "warehouse_exports",
                                     "warehouse_report", "whatif_tables"}
    assert _parts(instance, "kernel_taxbreak") == {key_a, key_c, key_b}
    with dg.build_schedule_context(instance=instance) as ctx:
        assert "already refreshed" in (schedule.evaluate_tick(ctx).skip_message or "")
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        kernels = dict(con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall())
    assert kernels == {_sha(a): 2, _sha(b): 3}


def test_a_range_run_analyses_the_traces_of_its_keys(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    """A run over part of the partitions (a backfill of some traces, a batch) rebuilds exactly the range's traces
    plus those of the `taxbreak/trace_ids` tag, in one step."""
    from taxbreak.pipeline.defs.analysis_assets import TRACES_TAG, range_tags

    defs = load_defs()
    files = [write_kineto(env["inbox"] / f"{n}.json", k, base_us=10.0 * k) for n, k in (("x", 1), ("y", 2), ("z", 3))]
    t = tick(defs, instance)
    assert all(r.success for r in t.runs)
    keys = instance.get_dynamic_partitions("traces")
    by_key = dict(zip(t.partition_keys, t.trace_ids, strict=True))
    ids = [by_key[k] for k in keys]
    run = execute_request(defs, instance, dg.RunRequest(tags={**range_tags(keys[:2])}), "refresh_job")
    assert run.success
    assert {m.partition for m in _kernel_meta(run)} == set(keys[:2])
    assert {m.metadata["scope"].value for m in _kernel_meta(run)} == {"2 traces"}
    kernels = {_sha(f): n for f, n in zip(files, (1, 2, 3), strict=True)}
    assert {m.metadata["rows_computed"].value for m in _kernel_meta(run)} == {kernels[ids[0]] + kernels[ids[1]]}
    # the tag adds a trace outside the range: analysed, though Dagster records only the range's keys
    run = execute_request(defs, instance, dg.RunRequest(tags={**range_tags(keys[:1]), TRACES_TAG: ids[2]}),
                          "refresh_job")
    assert run.success and {m.partition for m in _kernel_meta(run)} == {keys[0]}
    assert {m.metadata["scope"].value for m in _kernel_meta(run)} == {"2 traces"}
    # a run without partitions is refused by Dagster before the step's work: no materialisation, no new snapshot
    snapshot = env["warehouse"].parent / "exports" / "snapshot.duckdb"
    mtime = snapshot.stat().st_mtime_ns
    run = execute_request(defs, instance, dg.RunRequest(tags={TRACES_TAG: ids[0]}), "refresh_job")
    assert not run.success and run.get_asset_materialization_events() == []
    (failure,) = [e for e in run.all_events if e.is_step_failure]
    assert "Cannot access partition_key for a non-partitioned run" in failure.step_failure_data.error.message
    assert snapshot.stat().st_mtime_ns == mtime


def test_trace_ids_of_keys(env: dict[str, Path]) -> None:
    """Readable keys map to their trace through one catalogue listing; 64-hex keys are the id; unknown keys drop."""
    from taxbreak.ingest import Lake, ingest_file
    from taxbreak.pipeline.defs.ingest_assets import trace_ids_of_keys

    lake = Lake(env["lake"])
    p, q = write_kineto(env["inbox"] / "p.json", 1), write_kineto(env["inbox"] / "q.json", 2)
    for f in (p, q):
        assert ingest_file(f, lake).status == "ingested"
    keys = [f"p-{_sha(p)[:12]}", _sha(q), "gone-0123456789ab", "not a key"]
    assert trace_ids_of_keys(keys, lake) == sorted([_sha(p), _sha(q)])


def test_a_range_of_failed_files_only_changes_nothing(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    """A run over keys none of which was ingested (their files failed) succeeds and records no table partition:
    over every key (the whole-lake path, a lake with no ingested trace) and over some (the per-trace path)."""
    from taxbreak.pipeline.defs.analysis_assets import range_tags

    defs = load_defs()
    for name in ("c", "d"):
        (env["inbox"] / f"{name}.json").write_bytes(b'{"traceEvents": [' + name.encode())  # two contents
    t = tick(defs, instance)
    assert len(t.partition_keys) == 2 and all(r.success for r in t.runs)
    every = execute_request(defs, instance, dg.RunRequest(tags=range_tags(t.partition_keys)), "refresh_job")
    assert every.success and _kernel_meta(every) == [] and _parts(instance, "kernel_taxbreak") == set()
    write_kineto(env["inbox"] / "a.json", 2)
    (key_a,) = tick(defs, instance, t.cursor).partition_keys
    some = execute_request(defs, instance, dg.RunRequest(tags=range_tags(t.partition_keys)), "refresh_job")
    assert some.success and _kernel_meta(some) == [] and _parts(instance, "kernel_taxbreak") == {key_a}


def test_a_trace_job_range_run_records_each_trace(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    """trace_job over a range of partitions (a backfill: its one backfill policy is a single run) ingests each
    partition from the source its catalogue row records and records each trace's trace_analysis partition."""
    from taxbreak.pipeline.defs.analysis_assets import range_tags

    defs = load_defs()
    for n, k in (("u", 1), ("v", 2)):
        write_kineto(env["inbox"] / f"{n}.json", k, base_us=10.0 * k)
    t = tick(defs, instance)
    assert all(r.success for r in t.runs)
    keys = instance.get_dynamic_partitions("traces")
    run = execute_request(defs, instance, dg.RunRequest(tags=range_tags(keys)), "trace_job")
    assert run.success
    mats = {e.asset_key.to_user_string(): e.materialization for e in run.get_asset_materialization_events()
            if e.asset_key.to_user_string() in ("trace_ingest", "trace_analysis")}
    assert mats["trace_ingest"].metadata["partitions"].value == 2
    assert mats["trace_ingest"].metadata["status_unchanged"].value == 2  # both ingested by the sensor's runs
    assert mats["trace_analysis"].metadata["traces"].value == 2
    parts = {e.materialization.partition for e in run.get_asset_materialization_events()
             if e.asset_key == dg.AssetKey("trace_analysis")}
    assert parts == set(keys)
